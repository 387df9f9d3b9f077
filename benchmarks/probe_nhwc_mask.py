"""Issue 13, session 28: `nhwc_igemm` with fewer instructions a K step, on the channels_last pins (resnet50_layer2_3x3
0.89x cuDNN channels_last in this session's table, 0.0645 against 0.0576 ms).

The same two changes as benchmarks/probe_nchw_mask.py made to nchw_igemm (its run, same session: the pointers made
once -3 % on alexnet_conv5 and -1.4 % on resnet50_layer2_3x3 but +3 % on vgg16_conv3_2; the masks within +-2 %):
- masks: the tap's bounds test by two unsigned compares instead of four signed ones, and no channel mask where C_in
  is a multiple of BLOCK_K;
- ptr: the A tile's pointers made once before the K loop, each step adding one scalar (the tap's shift and the
  channel block) instead of building them from the rows' bases, the shift and the channels.

Prediction, written before the run: resnet50_layer2_3x3 channels_last -1 to -3 % (0.0645 -> 0.063-0.064 ms, 0.90-0.91x
cuDNN channels_last); vgg16_conv3_2 and alexnet_conv5 within +-3 %; outputs bit for bit the library kernel's.

    python benchmarks/probe_nhwc_mask.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem, side_by_side  # noqa: E402

from convtune.kernels import Meta, nhwc_igemm, torch_conv  # noqa: E402
from convtune.kernels.common import geometry  # noqa: E402
from convtune.kernels.nhwc_igemm import _weight_arg, packed_weight  # noqa: E402
from convtune.kernels.precision import round_tf32_even  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402


@triton.jit(do_not_specialize=["M"])
def _variant_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M,
    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    DH: tl.constexpr, DW: tl.constexpr,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, ROUND_A: tl.constexpr, OUT_CL: tl.constexpr, W_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr,
    FAST_MASK: tl.constexpr, PTR_ONCE: tl.constexpr,
):
    """nhwc_igemm's kernel (kernels/nhwc_igemm.py) with the two switches of the module's doc."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    per_group = GROUP * TILES_N
    first_m = (pid // per_group) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    OHW: tl.constexpr = OH * OW
    img = offs_m // OHW
    p = offs_m % OHW
    ih0 = (p // OW) * SH - PH
    iw0 = (p % OW) * SW - PW
    x_rows = x_ptr + img.to(tl.int64) * (H * W * C)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < C_OUT
    K_TOTAL: tl.constexpr = KH * KW * C
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    EVEN_C: tl.constexpr = C % BLOCK_K == 0
    offs_k = tl.arange(0, BLOCK_K)
    a_base = x_rows[:, None] + ((ih0 * W + iw0) * C)[:, None] + offs_k[None, :]  # PTR_ONCE: a step adds one scalar

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, KH * KW * C_BLOCKS):
        tap = t // C_BLOCKS
        c = (t % C_BLOCKS) * BLOCK_K + offs_k
        ih = ih0 + (tap // KW) * DH
        iw = iw0 + (tap % KW) * DW
        if FAST_MASK:
            inside = m_mask & (ih.to(tl.uint32, bitcast=True) < H) & (iw.to(tl.uint32, bitcast=True) < W)
            if EVEN_C:
                a_mask = inside[:, None]
            else:
                a_mask = inside[:, None] & (c < C)[None, :]
        else:
            inside = m_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            a_mask = inside[:, None] & (c < C)[None, :]
        if PTR_ONCE:
            shift = ((tap // KW) * DH * W + (tap % KW) * DW) * C + (t % C_BLOCKS) * BLOCK_K
            a = tl.load(a_base + shift, mask=a_mask, other=0.0)
        else:
            a = tl.load(x_rows[:, None] + ((ih * W + iw) * C)[:, None] + c[None, :], mask=a_mask, other=0.0)
        if ROUND_A:
            a = round_tf32_even(a)
        if W_TMA:
            b = w_ptr.load([pid_n * BLOCK_N, tap * C + (t % C_BLOCKS) * BLOCK_K]).T
        else:
            b = tl.load(w_ptr + offs_n[None, :] * K_TOTAL + (tap * C + c)[:, None],
                        mask=(c < C)[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if OUT_CL:
        y_offs = offs_m.to(tl.int64)[:, None] * C_OUT + offs_n[None, :]
    else:
        y_offs = (img.to(tl.int64) * (C_OUT * OHW) + p)[:, None] + offs_n[None, :] * OHW
    tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & n_mask[None, :])


def variant_call(x, w, b, p, meta: Meta, fast_mask: bool, ptr_once: bool):
    """On a channels_last input, the output channels_last, as the library's call on such an input."""
    g = geometry(x, w, p.stride, p.padding, p.dilation)
    plan = nhwc_igemm.make_plan(g, b is not None, meta, "tf32", True)
    cx = plan.constexprs
    out = torch.empty(plan.out_shape, device=x.device).contiguous(memory_format=torch.channels_last)
    warg = _weight_arg(cx, packed_weight(w, plan.round_weight))
    bb = b if b is not None else x

    def call():
        _variant_kernel[plan.grid](x, warg, bb, out, plan.m, **cx, FAST_MASK=fast_mask, PTR_ONCE=ptr_once)
        return out
    return call


def lib_call(x, w, b, p, meta: Meta):
    return nhwc_igemm.prepared(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32")


VARIANTS = {"mask": (True, False), "ptr": (False, True), "mask+ptr": (True, True)}
TILES = {"resnet50_layer2_3x3": "64-128-32-4-3", "vgg16_conv3_2": "64-256-32-4-3", "alexnet_conv5": "64-256-32-4-3"}


def main() -> None:
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for name, spec in TILES.items():
        p = load_problem(name)
        args = (p.stride, p.padding, p.dilation)
        x, w, b = make_inputs(p, 0, dev)
        x, w_cl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        theirs = torch_conv.conv2d(x, w_cl, b, *args, "tf32")
        meta = Meta(*(int(v) for v in spec.split("-")))
        calls = {"cuDNN channels_last (x, w CL)": lambda x=x, w_cl=w_cl, b=b, args=args: torch_conv.conv2d(
                     x, w_cl, b, *args, "tf32"),
                 "lib": lib_call(x, w, b, p, meta)}
        calls.update({k: variant_call(x, w, b, p, meta, *v) for k, v in VARIANTS.items()})
        for attempt in (1, 2):
            ms, ok, outs = side_by_side(calls, theirs, dev)
            base = ms["cuDNN channels_last (x, w CL)"]
            print(f"{name} channels_last {spec} (run {attempt})", flush=True)
            for k in calls:
                extra = f"  bit-equal to lib {torch.equal(outs[k], outs['lib'])}" if k in VARIANTS else ""
                print(f"  {k:30s} {ms[k]:.4f} ms  {base / ms[k]:.3f}x cuDNN CL  {ms[k] / ms['lib'] - 1:+.1%} vs lib  "
                      f"allclose {ok[k]}{extra}", flush=True)


if __name__ == "__main__":
    main()
