"""Issue 13, session 19: a stride-1 convolution read straight from NCHW through TMA, nchw_1x1's design for any kernel.

With an NCHW input the suite's 3×3 layers run on `nhwc_preround` / `nhwc_igemm` after a copy to channels_last inside
the call (resnet50_layer2_3x3 0.66x cuDNN's faster layout, vgg16_conv3_2 0.89x). nchw_1x1 (session 19) showed that an
NCHW tile read by TMA, rounded in registers and given to wgmma as its register operand runs at DRAM speed. For a K×K
stride-1 kernel a tile of output positions is BH rows × BW columns of one image (BW a power of two ≥ OW's part), and
tap (r, s) of channel block c0 is one TMA load of the 4-D input [N, C, H, W] at (n, c0, oh0 + r·dh − ph,
ow0 + s·dw − pw): TMA fills what lies outside the image (padding included) with zeros. K runs over taps × channel
blocks; the weight, packed [C_out, KH·KW·C] and rounded once, is the K-major B operand (masked loads, or TMA where
its rows allow). Needs W·4 bytes a multiple of 16 (TMA strides): vgg16_conv3_2 (56) and resnet50_layer2_3x3 (28), not
AlexNet's 13 and 27.

Prediction (before the run): resnet50_layer2_3x3 within 10 % of nhwc_igemm on a channels_last input (0.0644 ms:
the same register-A MMA, BW 32 for 28 columns wastes 12.5 %), 0.065-0.075 ms, 0.77-0.88x cuDNN's best (0.0573);
vgg16_conv3_2 0.35-0.40 ms, 0.9-1.0x (cuDNN channels_last 0.364). Each configuration checked against the exact
sum of the operands rounded to nearest TF32 (ties to even) and torch's allclose.

Measured (H200, triton 3.6; docs/evidence/h200_issue13_nchw_tma.txt): the first configuration's launch ended the
process with "an illegal instruction". Likely why: a tap's tile starts at a W coordinate that is not a multiple of 4
floats, and TMA tiles must start 16-byte aligned in their innermost dimension (Triton's interpreter asserts it:
"block offset start must be 16-byte aligned"). Run through the interpreter with that assertion removed, the index
logic is right (max |diff| 4e-7 to 7e-7 on three small shapes). So an NCHW input's taps cannot be TMA tiles shifted
along W; this design needs the shift done in shared memory (Gluon's static sub-views) or an NHWC copy.

    python benchmarks/probe_nchw_tma.py [--shapes a,b]
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from convtune.kernels import get_variant
from convtune.kernels.precision import round_tf32_even, round_to_tf32_even
from convtune.measure import bench
from convtune.measure.bench import TimingSettings

FAST = TimingSettings(rounds=5, reps=20, warmup=3)
# (name, batch, C, C_out, H=W, kernel, padding)
SHAPES = [("resnet50_layer2_3x3", 64, 128, 128, 28, 3, 1), ("vgg16_conv3_2", 32, 256, 256, 56, 3, 1)]


@triton.jit
def _nchw_tma_kernel(x_desc, w_ptr, y_ptr, C: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr,
                     OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                     W_TMA: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n = tl.program_id(1)
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    TILES_W: tl.constexpr = (OW + BW - 1) // BW
    BLOCK_M: tl.constexpr = BH * BW
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    K_TOTAL: tl.constexpr = KH * KW * C
    pid_n = pid % TILES_N  # a position tile's channel tiles side by side: they share its input tiles in L2
    tile = pid // TILES_N
    ow0 = (tile % TILES_W) * BW
    oh0 = (tile // TILES_W) * BH
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < C_OUT
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(KH * KW * C_BLOCKS):
        tap = t // C_BLOCKS
        c0 = (t % C_BLOCKS) * BLOCK_K
        x = x_desc.load([n, c0, oh0 + tap // KW - PH, ow0 + tap % KW - PW]).reshape(BLOCK_K, BLOCK_M)
        a = tl.trans(round_tf32_even(x))
        if W_TMA:  # past C the tile holds the next tap's weights, multiplied by A's zeros
            w = w_ptr.load([pid_n * BLOCK_N, tap * C + c0])
        else:
            k = c0 + offs_k
            w = tl.load(w_ptr + offs_n[:, None] * K_TOTAL + tap * C + k[None, :],
                        mask=n_mask[:, None] & (k < C)[None, :], other=0.0)
        acc = tl.dot(a, tl.trans(w), acc, input_precision="tf32")
    offs_m = tl.arange(0, BLOCK_M)
    oh = oh0 + offs_m // BW
    ow = ow0 + offs_m % BW
    y_offs = n.to(tl.int64) * (C_OUT * OH * OW) + (oh * OW + ow)[:, None] + offs_n[None, :] * (OH * OW)
    tl.store(y_ptr + y_offs, acc, mask=((oh < OH) & (ow < OW))[:, None] & n_mask[None, :])


def launcher(x, wp, y, kh, kw, ph, pw, bh, bw, bn, bk, nw, ns, w_tma):
    from triton.tools.tensor_descriptor import TensorDescriptor

    n, c = x.shape[:2]
    c_out, oh, ow = y.shape[1], y.shape[2], y.shape[3]
    grid = (triton.cdiv(c_out, bn) * triton.cdiv(oh, bh) * triton.cdiv(ow, bw), n)
    xd = TensorDescriptor.from_tensor(x, [1, bk, bh, bw])
    wa = TensorDescriptor.from_tensor(wp, [bn, bk]) if w_tma else wp

    def call():
        _nchw_tma_kernel[grid](xd, wa, y, C=c, C_OUT=c_out, OH=oh, OW=ow, KH=kh, KW=kw, PH=ph, PW=pw, W_TMA=w_tma,
                               BH=bh, BW=bw, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
        return y
    return call


def tiles(ow: int) -> list[tuple]:
    bws = [b for b in (32, 64) if b >= ow // 2 and b <= max(32, triton.next_power_of_2(ow))]
    out = []
    for bw, bh, bn, bk, nw, ns, w_tma in itertools.product(bws, (1, 2, 4), (64, 128, 256), (32, 64), (4, 8), (2, 3),
                                                           (False, True)):
        m = bh * bw
        if m not in (64, 128) or (m * bn > 128 * 128 and nw == 4) or (m * bn < 64 * 128 and nw == 8):
            continue
        if (m + bn) * bk * 4 * ns > 200 * 1024:
            continue
        out.append((bh, bw, bn, bk, nw, ns, w_tma))
    return out


def main() -> None:
    args = sys.argv[1:]
    only = args[args.index("--shapes") + 1].split(",") if "--shapes" in args else [s[0] for s in SHAPES]
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = True
    print(torch.cuda.get_device_name(dev), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    for si, (name, batch, c, c_out, hw, k, p) in enumerate(SHAPES):
        if name not in only:
            continue
        g = torch.Generator(device=dev).manual_seed(si)
        x = torch.randn((batch, c, hw, hw), generator=g, device=dev)
        w = (torch.rand((c_out, c, k, k), generator=g, device=dev) * 2 - 1) / (c * k * k) ** 0.5
        y = torch.empty((batch, c_out, hw, hw), device=dev)
        wp = round_to_tf32_even(w.permute(0, 2, 3, 1).reshape(c_out, -1)).contiguous()
        exact = F.conv2d(round_to_tf32_even(x).double(), round_to_tf32_even(w).double(), padding=p)
        theirs = F.conv2d(x, w, padding=p)
        x_cl = x.contiguous(memory_format=torch.channels_last)
        t_nchw = bench.time_gpu(lambda x=x, w=w, p=p: F.conv2d(x, w, padding=p), FAST, dev).median_ms
        t_cl = bench.time_gpu(lambda x=x_cl, w=w, p=p: F.conv2d(x, w, padding=p), FAST, dev).median_ms
        best_cudnn = min(t_nchw, t_cl)
        flop = 2 * batch * c_out * hw * hw * c * k * k
        print(f"\n== {name}: N={batch} C={c} C_out={c_out} {hw}x{hw} {k}x{k} pad {p}: cuDNN NCHW {t_nchw:.4f} ms, "
              f"channels_last {t_cl:.4f} ms", flush=True)
        for vname, xin in (("nhwc_igemm", x_cl), ("nhwc_preround", x)):  # our kernels today, at their defaults
            v = get_variant(vname)
            meta = v.default_meta(c_out, 1, hw, "tf32")
            out = torch.empty_like(y).contiguous(memory_format=torch.channels_last) if xin is x_cl else y
            call = v.prepared(xin, w, None, 1, p, 1, meta, "tf32", out=out)
            call()
            ms = bench.time_gpu(call, FAST, dev).median_ms
            print(f"   {vname} ({'channels_last' if xin is x_cl else 'NCHW'} input) {meta.short()}: {ms:.4f} ms "
                  f"({best_cudnn / ms:.2f}x)", flush=True)
        rows = []
        for bh, bw, bn, bk, nw, ns, w_tma in tiles(hw):
            tag = f"BH{bh} BW{bw} N{bn} K{bk} w{nw} s{ns}{' wtma' if w_tma else ''}"
            y.fill_(float("nan"))
            try:
                call = launcher(x, wp, y, k, k, p, p, bh, bw, bn, bk, nw, ns, w_tma)
                call()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 (a configuration that does not compile, or fails at launch)
                print(f"   {tag}: failed: {type(e).__name__}: {' | '.join(str(e).splitlines()[-2:])[:200]}", flush=True)
                continue
            err = (y.double() - exact).abs().max().item()
            ok = bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4)) and err < 1e-4
            ms = bench.time_gpu(call, FAST, dev).median_ms
            rows.append((ms, tag, err, ok))
        rows.sort()
        right = [r for r in rows if r[3]]
        for ms, tag, err, ok in right[:10]:
            print(f"   {tag:32s} {ms:.4f} ms  {best_cudnn / ms:.2f}x cuDNN best  {flop / ms / 1e9:.0f} TFLOP/s  "
                  f"vs exact {err:.1e}", flush=True)
        wrong = [r for r in rows if not r[3]]
        print(f"   {len(rows)} configurations ran, {len(wrong)} wrong" +
              (f": {[(r[1], f'{r[2]:.2g}') for r in wrong][:12]}" if wrong else ""), flush=True)


if __name__ == "__main__":
    main()
