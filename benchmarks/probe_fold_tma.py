"""Issue 13, L1 #50: the folded convolution with both operands through TMA, then persistent.

benchmarks/probe_fold_rows.py ran the folded 3×3 convolution over 48 channels with masked-load A tiles at 0.350 ms
(fold + conv 0.427 against 0.525 today, H200). There the fold takes the padding, so the folded convolution has none,
and an A tile is plain strided memory: in the folded NHWC image a row of output positions q (ow running over all
WF = 57 columns, the last two computed and thrown away: 3.6 % more rows) reads, for kernel row kh, the rows
q + kh·WF of a view [positions, 144] with row stride 48 floats: the kernel row's 3 taps × 48 channels. That view's rows
overlap (stride 48 < 144), which a TMA descriptor allows (strides need only be 16-byte multiples); the `taps` view
is the non-overlapping [positions, 48] one, one tap's 16 channels a step. With A and the weight both TMA loads
the K loop is a plain GEMM's, so it can also run persistent (a fixed grid walking the tiles, `tl.range(...,
flatten=True)` overlapping one tile's epilogue with the next one's loads).

Prediction written before the run: TMA A tiles take the address math and masks out of the loop: 0.30-0.33 ms for the
conv at the 64+32 split (from 0.350); persistent with flatten another 5-10 % (the 297 MB output write, a third of
the time at 4.3 TB/s, overlapping the next tile's MMAs): about 0.28-0.30 ms, 0.36-0.38 with the fold.

    python benchmarks/probe_fold_tma.py [--batch 256] [--only SUBSTRING]
    TRITON_INTERPRET=1 python benchmarks/probe_fold_tma.py --cpu-check --only ...
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_fold_rows import conv_rows, fold_input, l1_50_setup, pack_rows

from convtune.kernels.precision import round_to_tf32


@triton.jit
def _tma_kernel(a_desc, w_desc, w2_desc, b_ptr, y_ptr, NUM_TILES, NUM_PROGRAMS,
                HF: tl.constexpr, WF: tl.constexpr, C: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
                C_OUT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, ROW_PAD: tl.constexpr, ROW_VIEW: tl.constexpr,
                OUT_CL: tl.constexpr, FLATTEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_N2: tl.constexpr, N2_ALLOC: tl.constexpr, BLOCK_K: tl.constexpr):
    """One N tile covers every output channel (C_OUT <= BLOCK_N + BLOCK_N2). Tiles are BLOCK_M consecutive q =
    oh·WF + ow of one image; tile i of image n reads folded rows n·HF·WF + q + kh·WF (+ tap in the taps view)."""
    TILES_PER_IMG: tl.constexpr = (OH * WF + BLOCK_M - 1) // BLOCK_M
    CHUNKS: tl.constexpr = ROW_PAD // BLOCK_K if ROW_VIEW else KW * (C // BLOCK_K)
    C_CHUNKS: tl.constexpr = C // BLOCK_K
    OHW: tl.constexpr = OH * OW
    for tile in tl.range(tl.program_id(0), NUM_TILES, NUM_PROGRAMS, flatten=FLATTEN):
        img = tile // TILES_PER_IMG
        q0 = (tile % TILES_PER_IMG) * BLOCK_M
        r0 = img * (HF * WF) + q0
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_M, N2_ALLOC), dtype=tl.float32)
        for t in range(0, KH * CHUNKS):
            kh = t // CHUNKS
            if ROW_VIEW:
                a = a_desc.load([r0 + kh * WF, (t % CHUNKS) * BLOCK_K])
            else:
                a = a_desc.load([r0 + kh * WF + (t % CHUNKS) // C_CHUNKS, ((t % CHUNKS) % C_CHUNKS) * BLOCK_K])
            k_off = kh * ROW_PAD + (t % CHUNKS) * BLOCK_K
            acc = tl.dot(a, w_desc.load([0, k_off]).T, acc, input_precision="tf32")
            if BLOCK_N2 > 0:
                acc2 = tl.dot(a, w2_desc.load([BLOCK_N, k_off]).T, acc2, input_precision="tf32")
        q = q0 + tl.arange(0, BLOCK_M)
        oh = q // WF
        ow = q % WF
        valid = (oh < OH) & (ow < OW)
        p = oh * OW + ow
        _store(acc, b_ptr, y_ptr, img, p, valid, tl.arange(0, BLOCK_N), C_OUT, OHW, OUT_CL)
        if BLOCK_N2 > 0:
            _store(acc2, b_ptr, y_ptr, img, p, valid, BLOCK_N + tl.arange(0, N2_ALLOC), C_OUT, OHW, OUT_CL)


@triton.jit
def _store(acc, b_ptr, y_ptr, img, p, valid, offs_n, C_OUT: tl.constexpr, OHW: tl.constexpr, OUT_CL: tl.constexpr):
    n_mask = offs_n < C_OUT
    acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    base = img.to(tl.int64) * (C_OUT * OHW)
    if OUT_CL:
        y_offs = base + p[:, None] * C_OUT + offs_n[None, :]
    else:
        y_offs = base + p[:, None] + offs_n[None, :] * OHW
    tl.store(y_ptr + y_offs, acc, mask=valid[:, None] & n_mask[None, :])


def conv_tma(xf: torch.Tensor, wrows: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, kh: int, kw: int,
             bm: int, bn: int, bn2: int, bk: int, warps: int, stages: int, row_view: bool, persistent: int,
             flatten: bool, sms: int) -> torch.Tensor:
    n, hf, wf, c = xf.shape
    c_out, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    if row_view:  # overlapping rows: position r's kernel row of kw taps × c channels
        rows = n * hf * wf - (kw - 1)
        a_desc = TensorDescriptor(xf, [rows, kw * c], [c, 1], [bm, bk])
    else:
        a_desc = TensorDescriptor(xf, [n * hf * wf, c], [c, 1], [bm, bk])
    d1 = TensorDescriptor.from_tensor(wrows, [bn, bk])
    d2 = TensorDescriptor.from_tensor(wrows, [max(bn2, 16), bk])
    tiles = n * triton.cdiv(oh * wf, bm)
    programs = min(tiles, persistent * sms) if persistent else tiles
    _tma_kernel[(programs,)](a_desc, d1, d2, bias, out, tiles, programs, HF=hf, WF=wf, C=c, OH=oh, OW=ow, C_OUT=c_out,
                             KH=kh, KW=kw, ROW_PAD=wrows.shape[1] // kh, ROW_VIEW=row_view,
                             OUT_CL=out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous(),
                             FLATTEN=flatten, BLOCK_M=bm, BLOCK_N=bn, BLOCK_N2=bn2, N2_ALLOC=max(bn2, 16), BLOCK_K=bk,
                             num_warps=warps, num_stages=stages)
    return out


def configs() -> list[tuple]:
    """(BM, BN, BN2, BK, warps, stages, row view, persistent programs per SM (0: one program per tile), flatten)."""
    out = []
    for (bm, w), (bn, bn2), bk, s in itertools.product(((64, 4), (128, 4), (128, 8), (256, 8)), ((64, 32), (128, 0)),
                                                       (16, 32), (3, 4)):
        out.append((bm, bn, bn2, bk, w, s, True, 0, False))
    for (bm, w), s in itertools.product(((128, 4), (128, 8)), (3, 4)):
        out.append((bm, 64, 32, 16, w, s, False, 0, False))  # the non-overlapping view
    for (bm, w), bk, (pers, flat), s in itertools.product(((128, 4), (128, 8), (64, 4)), (16, 32),
                                                          ((1, True), (1, False), (2, True)), (3, 4)):
        out.append((bm, 64, 32, bk, w, s, True, pers, flat))
    return out


def name_of(cfg: tuple) -> str:
    bm, bn, bn2, bk, w, s, row_view, pers, flat = cfg
    return (f"M{bm}-N{bn}{'+' + str(bn2) if bn2 else ''}-K{bk}-w{w}-s{s}-{'rows' if row_view else 'taps'}"
            f"{f'-persistent{pers}' + ('-flat' if flat else '') if pers else ''}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--only", default="", help="run the configurations whose name has this substring")
    ap.add_argument("--cpu-check", action="store_true", help="a small batch through the interpreter")
    a = ap.parse_args()
    cpu = a.cpu_check
    dev, batch, x, w, b, s, pad, oh, hf, wfold = l1_50_setup(cpu, a.batch)
    kh, kw, cf = wfold.shape[2], wfold.shape[3], wfold.shape[1]
    wrows = {bk: pack_rows(wfold, -(-kw * cf // bk) * bk) for bk in (16, 32)}
    ref64 = F.conv2d(x.double(), w.double(), b.double(), stride=s, padding=pad)
    if cpu:  # cuDNN's TF32 emulated: operands rounded to nearest, float64 sum
        theirs = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(), stride=s, padding=pad).float()
    else:
        theirs = F.conv2d(x, w, b, stride=s, padding=pad)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if not cpu else 4
    xf = fold_input(x, s, pad, hf, hf, True)
    if not cpu:
        import convtune
        from convtune.measure import bench
        from convtune.measure.bench import TimingSettings
        fast = TimingSettings(rounds=3, reps=10, warmup=2)
        t_cudnn = bench.time_gpu(lambda: F.conv2d(x, w, b, stride=s, padding=pad), fast, dev).median_ms
        t_now = bench.time_gpu(lambda: convtune.conv2d(x, w, b, stride=s, padding=pad), fast, dev).median_ms
        t_fold = bench.time_gpu(lambda: fold_input(x, s, pad, hf, hf, True), fast, dev).median_ms
        out = torch.empty((batch, 96, oh, oh), device=dev)
        base = (128, 64, 32, 16, 4, 4, False)  # probe_fold_rows' best
        t_rows = bench.time_gpu(lambda: conv_rows(xf, wrows[16], b, out, kh, kw * cf, *base), fast, dev).median_ms
        print(f"cuDNN {t_cudnn:.4f} ms · convtune.conv2d today {t_now:.4f} ms · fold alone {t_fold:.4f} ms · "
              f"probe_fold_rows' best conv (M128-N64+32-K16-w4-s4, masked loads) {t_rows:.4f} ms", flush=True)
    best = []
    for cfg in configs():
        name = name_of(cfg)
        if a.only not in name:
            continue
        try:
            out = torch.full((batch, 96, oh, oh), float("nan"), device=dev)
            wr = wrows[cfg[3]]

            def conv_only(cfg=cfg, out=out, wr=wr):
                return conv_tma(xf, wr, b, out, kh, kw, *cfg, sms)

            def whole(cfg=cfg, out=out, wr=wr):
                return conv_tma(fold_input(x, s, pad, hf, hf, True), wr, b, out, kh, kw, *cfg, sms)
            got = whole()
            ok = bool(torch.allclose(got, theirs, atol=1e-4, rtol=1e-4))
            rel = float(((got.double() - ref64).norm() / ref64.norm()).item())
            line = f"{name:40s} allclose {ok} rel {rel:.2e} max|diff| {float((got - theirs).abs().max()):.2e}"
            if not cpu:
                t_conv = bench.time_gpu(conv_only, fast, dev).median_ms
                t_all = bench.time_gpu(whole, fast, dev).median_ms
                line += (f" · conv {t_conv:.4f} ms ({ref64.numel() * 363 * 2 / t_conv / 1e9:.0f} TFLOP/s real)"
                         f" · fold+conv {t_all:.4f} ms = {t_now / t_all:.2f}x today, {t_cudnn / t_all:.2f}x cuDNN")
                best.append((t_all, t_conv, name, ok))
            print(line, flush=True)
        except Exception as e:  # noqa: BLE001 - a configuration that does not compile or fit is a result
            print(f"{name:40s} {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", flush=True)
    for t, tc, name, ok in sorted(best)[:10]:
        print(f"best: {name} fold+conv {t:.4f} ms (conv {tc:.4f}) allclose {ok}")


if __name__ == "__main__":
    if "--cpu-check" in sys.argv and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("--cpu-check needs TRITON_INTERPRET=1 set before triton is imported")
    main()
