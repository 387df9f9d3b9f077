"""Issue 13, session 28: fewer instructions a K step in `nchw_igemm` (vgg16_conv3_2's NCHW pin, 0.89-0.93x cuDNN
channels_last depending on the machine), and its output stores marked to leave L2 first.

Session 20's NCU profile found nchw_igemm bound by the SM's issue slots, not by memory: 62 % SM throughput against
nhwc_igemm's 75 % at the same tile, the difference being the instructions the register path spends on each A tile
(loads, addresses, masks, the layout change). Two of those are cheap to cut:
- the channel mask `c < C` on every A element, which is always true where C_in is a multiple of BLOCK_K (every
  layer of the suite), and
- the tap's bounds test, four signed compares a position, which two unsigned ones do (`(oh + dr) as u32 < H`).
And the A tile's pointers made once before the K loop, a step adding one scalar to them (fused_gluon's comment: int32
offsets cost ptxas twelve instructions a pointer), where now each step builds them from p, the tap's shift and the
channels. And the output (103 MB on vgg16_conv3_2, written once) marked evict_first, as fused_gluon's, which measured
-2 % on L1 #50 from the input rows it then kept in L2.

Prediction, written before the run: the masks -1 to -3 % on vgg16_conv3_2 NCHW (0.398 -> 0.386-0.394 ms at the pin's
tile; the K loop has 72 steps of one 64 x 32 A tile a warpgroup), the pointers made once -2 to -5 %, evict_first 0 to
-2 % more; resnet50_layer2_3x3
NCHW alike, still far under 0.9x; outputs bit for bit the library kernel's (the same sums in the same order).

Variants, each timed side by side with the library's nchw_igemm and cuDNN in both layouts (weight in the input's
layout, as the tracker's baseline), in interleaved rounds, twice:
    lib              kernels/nchw_igemm.py as it is
    mask             the two mask changes
    ptr              the pointers made once
    mask+ptr         both
    mask+ptr+evict   and the stores evict_first

    python benchmarks/probe_nchw_mask.py [--problems vgg16_conv3_2,resnet50_layer2_3x3,alexnet_conv5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem, side_by_side  # noqa: E402

from convtune.kernels import Meta, nchw_igemm, torch_conv  # noqa: E402
from convtune.kernels.common import geometry  # noqa: E402
from convtune.kernels.nhwc_igemm import _weight_arg, packed_weight  # noqa: E402
from convtune.kernels.precision import round_tf32_even  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402


@triton.jit
def _variant_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    HAS_BIAS: tl.constexpr, OUT_CL: tl.constexpr, W_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FAST_MASK: tl.constexpr, EVICT_OUT: tl.constexpr, PTR_ONCE: tl.constexpr,
):
    """nchw_igemm's kernel (kernels/nchw_igemm.py) with the two switches of the module's doc."""
    pid = tl.program_id(0)
    n = tl.program_id(1)
    OHW: tl.constexpr = OH * W
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    pid_n = pid % TILES_N
    pid_m = pid // TILES_N
    p = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = p < OHW
    oh = p // W
    ow = p % W
    x_img = x_ptr + n.to(tl.int64) * (C * H * W)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < C_OUT
    offs_k = tl.arange(0, BLOCK_K)
    K_TOTAL: tl.constexpr = KH * KW * C
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    EVEN_C: tl.constexpr = C % BLOCK_K == 0
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_base = x_img + (p[:, None] + offs_k[None, :] * (H * W))  # PTR_ONCE: a step adds one scalar to these
    for t in range(KH * KW * C_BLOCKS):
        tap = t // C_BLOCKS
        dr = (tap // KW) * DH - PH
        ds = (tap % KW) * DW - PW
        c = (t % C_BLOCKS) * BLOCK_K + offs_k
        if FAST_MASK:
            # a negative row or column is a large unsigned one: one compare a bound pair (p < OHW keeps oh < OH ≤ H)
            inside = m_mask & ((oh + dr).to(tl.uint32, bitcast=True) < H) & \
                ((ow + ds).to(tl.uint32, bitcast=True) < W)
            if EVEN_C:
                a_mask = inside[:, None]
            else:
                a_mask = inside[:, None] & (c < C)[None, :]
        else:
            inside = m_mask & (oh + dr >= 0) & (oh + dr < H) & (ow + ds >= 0) & (ow + ds < W)
            a_mask = inside[:, None] & (c < C)[None, :]
        if PTR_ONCE:
            x = tl.load(a_base + ((dr * W + ds) + (t % C_BLOCKS) * (BLOCK_K * H * W)), mask=a_mask, other=0.0)
        else:
            x = tl.load(x_img + (p + (dr * W + ds))[:, None] + c[None, :] * (H * W), mask=a_mask, other=0.0)
        a = round_tf32_even(x)
        if W_TMA:
            b = w_ptr.load([pid_n * BLOCK_N, tap * C + (t % C_BLOCKS) * BLOCK_K]).T
        else:
            b = tl.load(w_ptr + offs_n[None, :] * K_TOTAL + (tap * C + c)[:, None],
                        mask=(c < C)[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32")

    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if OUT_CL:
        y_offs = (n.to(tl.int64) * OHW + p)[:, None] * C_OUT + offs_n[None, :]
    else:
        y_offs = n.to(tl.int64) * (C_OUT * OHW) + p[:, None] + offs_n[None, :] * OHW
    if EVICT_OUT:
        tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & n_mask[None, :], eviction_policy="evict_first")
    else:
        tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & n_mask[None, :])


def variant_call(x, w, b, p, meta: Meta, fast_mask: bool, evict: bool, ptr_once: bool):
    g = geometry(x, w, p.stride, p.padding, p.dilation)
    plan = nchw_igemm.make_plan(g, b is not None, meta, "tf32", False)
    cx = plan.constexprs
    out = torch.empty(plan.out_shape, device=x.device)
    wp = packed_weight(w, True)
    warg = _weight_arg(cx, wp)
    bb = b if b is not None else out

    def call():
        _variant_kernel[plan.grid](x, warg, bb, out, **cx, FAST_MASK=fast_mask, EVICT_OUT=evict,
                                     PTR_ONCE=ptr_once)
        return out
    return call


def lib_call(x, w, b, p, meta: Meta):
    return nchw_igemm.prepared(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32")


VARIANTS = ("mask", "ptr", "mask+ptr", "mask+ptr+evict")
TILES = {
    "vgg16_conv3_2": ["64-256-32-4-3"],
    "resnet50_layer2_3x3": ["128-128-16-4-3", "128-128-32-4-3"],
    "alexnet_conv5": ["64-256-32-4-3"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=",".join(TILES))
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for name in a.problems.split(","):
        p = load_problem(name)
        args = (p.stride, p.padding, p.dilation)
        x, w, b = make_inputs(p, 0, dev)
        x_cl, w_cl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        theirs = torch_conv.conv2d(x, w, b, *args, "tf32")
        for spec in TILES[name]:
            meta = Meta(*(int(v) for v in spec.split("-")))
            calls = {
                "cuDNN channels_last (x, w CL)": lambda x_cl=x_cl, w_cl=w_cl, b=b, args=args: torch_conv.conv2d(
                    x_cl, w_cl, b, *args, "tf32"),
                "cuDNN NCHW": lambda x=x, w=w, b=b, args=args: torch_conv.conv2d(x, w, b, *args, "tf32"),
                "lib": lib_call(x, w, b, p, meta),
                "mask": variant_call(x, w, b, p, meta, True, False, False),
                "ptr": variant_call(x, w, b, p, meta, False, False, True),
                "mask+ptr": variant_call(x, w, b, p, meta, True, False, True),
                "mask+ptr+evict": variant_call(x, w, b, p, meta, True, True, True),
            }
            for attempt in (1, 2):
                ms, ok, outs = side_by_side(calls, theirs, dev)
                same = {k: bool(torch.equal(outs[k], outs["lib"])) for k in VARIANTS}
                base = min(ms["cuDNN channels_last (x, w CL)"], ms["cuDNN NCHW"])
                print(f"{name} NCHW {spec} (run {attempt}); vs cuDNN's faster layout {base:.4f} ms", flush=True)
                for k in calls:
                    extra = f"  bit-equal to lib {same[k]}" if k in same else ""
                    print(f"  {k:30s} {ms[k]:.4f} ms  {base / ms[k]:.3f}x  {ms[k] / ms['lib'] - 1:+.1%} vs lib  "
                          f"allclose {ok[k]}{extra}", flush=True)


if __name__ == "__main__":
    main()
