"""Issue 13, session 20: a stride-1 convolution read straight from NCHW, its input tiles the MMA's register operand.

With an NCHW input the stride-1 layers run `nhwc_igemm` / `nhwc_preround` after a copy of the input to channels_last
inside the call, and that copy is most of the gap on three of the four NCHW rows under 0.9x in session 19's table
(vgg16_conv3_2: 0.4224 ms against the kernel's 0.3490 on a channels_last input; alexnet_conv5 0.2791 against 0.2475).
This probe reads the NCHW input where it is. The GEMM is nhwc_igemm's (M = output positions, N = C_out, K = taps ×
input channels, tap by tap with the channels innermost; the weight packed [C_out, KH, KW, C_in] and loaded through
TMA, K-major), but an A tile is BLOCK_K channels × BLOCK_M positions of one image, loaded with the positions
contiguous. Where OW == W (stride 1, "same" padding: every layer here), the address of tap (r, s) at position p is
p + (r - PH)·W + (s - PW) + c·H·W, affine in p, so a warp's loads are 128 contiguous bytes (scalar: a tap's shift
leaves them 4-byte aligned only). TF32 wgmma cannot take such a tile from shared memory (K-major only), but it can
from registers: the tile is rounded to nearest TF32 there (ties to even, as cuDNN at stride 1) and is the MMA's
register A, as in `nchw_1x1`. A program's positions stay in one image (the grid: tiles of an image × C_out tiles,
images), so a tile wastes the positions past H·W (13×13 = 169 in 64-row tiles: 12 %).

Prediction (before the run): the MMAs are nhwc_igemm's; the loads come from L1/L2 (each input element is read by
KH·KW taps) at 128 bytes a warp instruction, under a tenth of the MMA time of a 128×128×32 step. So about the
channels_last kernel's time on a channels_last input, without the copy: vgg16_conv3_2 0.35-0.40 ms (0.92-1.05x
cuDNN's faster layout), alexnet_conv5 0.25-0.29 (0.85-0.98x), resnet50_layer2_3x3 0.065-0.075 (0.76-0.87x),
alexnet_conv4 0.40-0.45 (0.79-0.89x); outputs 1e-5-class from the exact sum of the rounded operands, allclose(1e-4)
to torch.

    python benchmarks/probe_nchw_direct.py [--shapes a,b] [--quick] [--tma]

`--tma`: the input tiles through a TMA descriptor of the input as [N·C, H·W] (layers with H·W % 4 == 0, C a multiple of
BLOCK_K), at a tap's shift, so at innermost coordinates that are not multiples of 4 floats; the positions a shift wraps
into the next or previous row are zeroed in registers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import convtune
from convtune.kernels import Meta
from convtune.kernels.precision import round_tf32_even, round_to_tf32_even
from convtune.measure import bench
from convtune.measure.bench import TimingSettings

FAST = TimingSettings(rounds=5, reps=20, warmup=3)

# (name, batch, C, C_out, H=W, kernel, padding, bias): the suite's stride-1 layers with a spatial kernel
SHAPES = [("vgg16_conv3_2", 32, 256, 256, 56, 3, 1, True), ("alexnet_conv5", 256, 384, 256, 13, 3, 1, True),
          ("resnet50_layer2_3x3", 64, 128, 128, 28, 3, 1, False), ("alexnet_conv4", 256, 384, 384, 13, 3, 1, True),
          ("alexnet_conv3", 256, 256, 384, 13, 3, 1, True), ("alexnet_conv2", 256, 96, 256, 27, 5, 2, True)]


@triton.jit
def _nchw_direct_kernel(x_ptr, w_desc, b_ptr, y_ptr,
                        C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr,
                        KH: tl.constexpr, KW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                        HAS_BIAS: tl.constexpr, ROUND: tl.constexpr, EVICT: tl.constexpr, X_TMA: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n = tl.program_id(1)
    HW: tl.constexpr = H * W
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    pid_n = pid % TILES_N  # a position tile's C_out tiles side by side: they share its input rows in L2
    pid_m = pid // TILES_N
    p = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output positions in image n; OW == W, so also input positions
    m_mask = p < HW
    oh = p // W
    ow = p % W
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(KH * KW * C_BLOCKS):  # pipelined num_stages deep
        tap = t // C_BLOCKS
        r = tap // KW - PH
        s = tap % KW - PW
        c = (t % C_BLOCKS) * BLOCK_K + offs_k
        inside = m_mask & (oh + r >= 0) & (oh + r < H) & (ow + s >= 0) & (ow + s < W)
        if X_TMA:  # x_ptr: a descriptor of the input as [N·C, H·W] (C % BLOCK_K == 0); a tap's shift wraps rows: masked
            a = tl.where(inside[:, None], x_ptr.load([n * C + (t % C_BLOCKS) * BLOCK_K, pid_m * BLOCK_M + r * W + s]).T,
                         0.0)
        else:
            a = tl.load(x_ptr + n.to(tl.int64) * (C * HW) + (p + (r * W + s))[:, None] + c[None, :] * HW,
                        mask=inside[:, None] & (c < C)[None, :], other=0.0)
        if ROUND:
            a = round_tf32_even(a)
        # past C the tile holds the next tap's weights, multiplied by A's zeros; past K, zeros
        b = w_desc.load([pid_n * BLOCK_N, tap * C + (t % C_BLOCKS) * BLOCK_K]).T
        acc = tl.dot(a, b, acc, input_precision="tf32")
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=offs_n < C_OUT, other=0.0)[None, :]
    y_offs = n.to(tl.int64) * (C_OUT * HW) + p[:, None] + offs_n[None, :] * HW
    if EVICT:
        tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & (offs_n < C_OUT)[None, :], eviction_policy="evict_first")
    else:
        tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & (offs_n < C_OUT)[None, :])


def pack(w: torch.Tensor) -> torch.Tensor:
    """[C_out, C, KH, KW] → [C_out, KH·KW·C] rounded to nearest TF32 (ties to even), as nhwc_igemm packs it."""
    return round_to_tf32_even(w.permute(0, 2, 3, 1).contiguous()).reshape(w.shape[0], -1).contiguous()


def launcher(x, wp, b, y, kh, kw, pad, meta: Meta, rounds: bool = True, evict: bool = False, x_tma: bool = False):
    from triton.tools.tensor_descriptor import TensorDescriptor

    n, c, h, wd = x.shape
    c_out = wp.shape[0]
    desc = TensorDescriptor.from_tensor(wp, [meta.BLOCK_N, meta.BLOCK_K])
    xa = TensorDescriptor.from_tensor(x.view(n * c, h * wd), [meta.BLOCK_K, meta.BLOCK_M]) if x_tma else x
    grid = (triton.cdiv(h * wd, meta.BLOCK_M) * triton.cdiv(c_out, meta.BLOCK_N), n)
    bb = b if b is not None else y

    def call():
        _nchw_direct_kernel[grid](xa, desc, bb, y, C=c, H=h, W=wd, C_OUT=c_out, KH=kh, KW=kw, PH=pad, PW=pad,
                                  HAS_BIAS=b is not None, ROUND=rounds, EVICT=evict, X_TMA=x_tma, BLOCK_M=meta.BLOCK_M,
                                  BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K, num_warps=meta.num_warps,
                                  num_stages=meta.num_stages)
        return y
    return call


def metas(c_out: int, quick: bool) -> list[Meta]:
    first = [Meta(64, 128, 32, 4, 3), Meta(64, 256, 32, 4, 3), Meta(128, 128, 32, 4, 3), Meta(128, 128, 32, 8, 3),
             Meta(128, 256, 32, 8, 3), Meta(64, 256, 32, 8, 3), Meta(64, 64, 32, 4, 3)]
    first = [m for m in first if m.BLOCK_N <= max(64, triton.next_power_of_2(c_out))]
    return first[:3] if quick else first


def variants_of(best: Meta) -> list[Meta]:
    """The best first-round tile at other depths and K steps."""
    out = [Meta(best.BLOCK_M, best.BLOCK_N, best.BLOCK_K, best.num_warps, s) for s in (2, 4)]
    out += [Meta(best.BLOCK_M, best.BLOCK_N, k, best.num_warps, best.num_stages) for k in (16, 64)]
    return out


def probe_shape(si: int, shape: tuple, dev: torch.device, quick: bool, x_tma: bool) -> None:
    name, batch, c, c_out, side, k, pad, has_bias = shape
    on_gpu = dev.type == "cuda"
    if x_tma and side * side % 4:
        return
    if not on_gpu:  # the interpreter: index logic only, on a small batch
        batch = 2
    g = torch.Generator(device=dev).manual_seed(si)
    x = torch.randn((batch, c, side, side), generator=g, device=dev)
    w = torch.randn((c_out, c, k, k), generator=g, device=dev) / (c * k * k) ** 0.5
    b = torch.randn((c_out,), generator=g, device=dev) if has_bias else None
    y = torch.empty((batch, c_out, side, side), device=dev)
    wp = pack(w)
    exact = F.conv2d(round_to_tf32_even(x).double(), round_to_tf32_even(w).double(),
                     b.double() if b is not None else None, padding=pad)
    theirs = F.conv2d(x, w, b, padding=pad)
    if not on_gpu:
        launcher(x, wp, b, y, k, k, pad, Meta(32, 64, 16, 4, 1), x_tma=x_tma)()
        print(f"{name}: interpreter, vs exact {(y.double() - exact).abs().max().item():.1e}", flush=True)
        return
    x_cl = x.contiguous(memory_format=torch.channels_last)
    t_nchw = bench.time_gpu(lambda: F.conv2d(x, w, b, padding=pad), FAST, dev).median_ms
    t_cl = bench.time_gpu(lambda: F.conv2d(x_cl, w, b, padding=pad), FAST, dev).median_ms
    best_cudnn = min(t_nchw, t_cl)
    lib_nchw = bench.time_gpu(lambda: convtune.conv2d(x, w, b, 1, pad), FAST, dev).median_ms
    lib_cl = bench.time_gpu(lambda: convtune.conv2d(x_cl, w, b, 1, pad), FAST, dev).median_ms
    print(f"\n== {name}: N={batch} C={c} C_out={c_out} {side}x{side} {k}x{k} pad {pad}; cuDNN NCHW {t_nchw:.4f} "
          f"ms, channels_last {t_cl:.4f}; library NCHW {lib_nchw:.4f} ({best_cudnn / lib_nchw:.2f}x), "
          f"channels_last {lib_cl:.4f} ({t_cl / lib_cl:.2f}x cuDNN CL)", flush=True)
    rows = []

    def trial(meta: Meta, evict: bool = False) -> None:
        tag = f"M{meta.BLOCK_M} N{meta.BLOCK_N} K{meta.BLOCK_K} w{meta.num_warps} s{meta.num_stages}" + \
              (" evict_first" if evict else "") + (" tma" if x_tma else "")
        if x_tma and c % meta.BLOCK_K:
            return
        y.fill_(float("nan"))
        try:
            call = launcher(x, wp, b, y, k, k, pad, meta, evict=evict, x_tma=x_tma)
            call()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (a configuration that does not compile: shared memory, registers)
            print(f"   {tag}: failed: {type(e).__name__}: {' | '.join(str(e).splitlines()[-3:])[:300]}", flush=True)
            return
        err = (y.double() - exact).abs().max().item()
        ok = bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4))
        ms = bench.time_gpu(call, FAST, dev).median_ms
        rows.append((ms, tag, meta, err, ok))

    for meta in metas(c_out, quick):
        trial(meta)
    if rows and not quick:
        best = min(rows, key=lambda r: r[0])[2]
        for meta in variants_of(best):
            trial(meta)
        best = min(rows, key=lambda r: r[0])[2]
        trial(best, evict=True)
    rows.sort(key=lambda r: r[0])
    for ms, tag, _, err, ok in rows:
        print(f"   {tag:32s} {ms:.4f} ms  {best_cudnn / ms:.2f}x cuDNN best  {lib_nchw / ms:.2f}x library NCHW  "
              f"vs exact {err:.1e}  allclose {ok}", flush=True)
    wrong = [r for r in rows if not r[4] or r[3] > 1e-4]
    print(f"   {len(rows)} configurations ran, {len(wrong)} wrong" +
          (f": {[r[1] for r in wrong][:6]}" if wrong else ""), flush=True)
    if rows:  # the rounding's cost: the best configuration on Triton's truncating TF32 (not a candidate)
        try:
            t_trunc = bench.time_gpu(launcher(x, wp, b, y, k, k, pad, rows[0][2], rounds=False, x_tma=x_tma), FAST,
                                     dev).median_ms
            print(f"   same, no rounding of A (truncating TF32, not a candidate): {t_trunc:.4f} ms", flush=True)
        except Exception as e:  # noqa: BLE001 (without the rounding A stays in shared memory: more of it)
            print(f"   same, no rounding of A: failed: {type(e).__name__}", flush=True)


def main() -> None:
    args = sys.argv[1:]
    only = args[args.index("--shapes") + 1].split(",") if "--shapes" in args else [s[0] for s in SHAPES]
    quick = "--quick" in args
    x_tma = "--tma" in args  # the input tiles through TMA (layers with H·W % 4 == 0); run apart: a fault ends the process
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = dev.type == "cuda"
    if on_gpu:
        print(torch.cuda.get_device_name(dev), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    for si, shape in enumerate(SHAPES):
        if shape[0] in only:
            probe_shape(si, shape, dev, quick, x_tma)


if __name__ == "__main__":
    main()
