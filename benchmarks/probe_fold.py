"""Issue 13, L1 #50 by stride folding: is it worth building? The 11×11 stride-4 convolution over 3 channels is,
after a space-to-depth by 4 of the (padded) input, a 3×3 stride-1 convolution over 48 channels, which
kernels/nhwc_igemm.py runs with both operands K-major. This probe folds the input with one Triton pass (the
padding inside it), folds the weight with torch, runs nhwc_igemm on the folded problem writing NCHW, and
checks and times it next to today's path (convtune.conv2d: implicit_gemm at its pin) and cuDNN, in one GPU
process. Prediction written before the run: the folded convolution at 250-300 TFLOP/s on its 64 GFLOP
(the padding's zeros included; 56 GFLOP real) is 0.21-0.26 ms, the fold about 0.10 ms (158 MB read, 160 MB written), so
0.31-0.36 ms in all against 0.52 today.

    python benchmarks/probe_fold.py [--grid 'BM=64,128;BN=128;BK=16,32;W=4,8;S=3,4']
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, grid, load_problem

import convtune
from convtune.kernels import nhwc_igemm
from convtune.kernels.precision import round_tf32
from convtune.measure import bench
from convtune.measure.one_config import make_inputs


@triton.jit
def _fold_kernel(x_ptr, out_ptr, TOTAL, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, S: tl.constexpr,
                 PH: tl.constexpr, PW: tl.constexpr, HF: tl.constexpr, WF: tl.constexpr, BLOCK: tl.constexpr,
                 ROUND: tl.constexpr = False):  # ROUND: to nearest TF32 (benchmarks/probe_fold_rows.py)
    o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = o < TOTAL
    s = o % S
    r = (o // S) % S
    c = (o // (S * S)) % C
    wf = (o // (S * S * C)) % WF
    hf = (o // (S * S * C * WF)) % HF
    n = o // (S * S * C * WF * HF)
    ih = hf * S + r - PH
    iw = wf * S + s - PW
    keep = inside & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    v = tl.load(x_ptr + ((n * C + c) * H + ih) * W + iw, mask=keep, other=0.0)
    if ROUND:
        v = round_tf32(v)
    tl.store(out_ptr + o, v, mask=inside)


def fold_input(x: torch.Tensor, s: int, pad: int, hf: int, wf: int) -> torch.Tensor:
    """[N, C, H, W] NCHW → [N, C·s·s, HF, WF] in channels_last memory: channel (c, r, s') of position (hf, wf) is
    x[c, s·hf + r - pad, s·wf + s' - pad], zero outside."""
    n, c, h, w = x.shape
    out = torch.empty((n, hf, wf, c * s * s), device=x.device, dtype=x.dtype)
    total = out.numel()
    _fold_kernel[(triton.cdiv(total, 1024),)](x, out, total, C=c, H=h, W=w, S=s, PH=pad, PW=pad, HF=hf, WF=wf,
                                                BLOCK=1024)
    return out.permute(0, 3, 1, 2)


def fold_weight(w: torch.Tensor, s: int) -> torch.Tensor:
    """[K, C, KH, KW] → [K, C·s·s, ceil(KH/s), ceil(KW/s)]: tap (a, b) of channel (c, r, s') is w[c, s·a + r, s·b + s']."""
    k, c, kh, kw = w.shape
    a, b = -(-kh // s), -(-kw // s)
    wp = F.pad(w, (0, b * s - kw, 0, a * s - kh))
    return wp.view(k, c, a, s, b, s).permute(0, 1, 3, 5, 2, 4).reshape(k, c * s * s, a, b).contiguous()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="BM=64,128;BN=128;BK=16,32;W=4,8;S=3,4")
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    torch.backends.cudnn.allow_tf32 = True  # KernelBench's reference runs at torch's defaults: TF32 convolutions
    p = dataclasses.replace(load_problem("kernelbench_l1_50"), batch=a.batch)
    x, w, b = make_inputs(p, 1, dev)  # the tracker's inputs for L1 #50 (torch.rand images), seed 1
    s, pad = 4, 2
    oh = (x.shape[2] + 2 * pad - 11) // s + 1
    hf = oh + 3 - 1
    theirs = F.conv2d(x, w, b, stride=s, padding=pad)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride=s, padding=pad).float()
    wf = fold_weight(w, s)
    xf = fold_input(x, s, pad, hf, hf)
    flops = p.flops
    cudnn = bench.time_gpu(lambda: F.conv2d(x, w, b, stride=s, padding=pad), FAST, dev).median_ms
    ours_now = bench.time_gpu(lambda: convtune.conv2d(x, w, b, stride=s, padding=pad), FAST, dev).median_ms
    t_fold = bench.time_gpu(lambda: fold_input(x, s, pad, hf, hf), FAST, dev).median_ms
    print(f"cuDNN {cudnn:.4f} ms · convtune.conv2d today {ours_now:.4f} ms · fold alone {t_fold:.4f} ms "
          f"({(x.numel() + xf.numel()) * 4 / t_fold / 1e6:.0f} GB/s)", flush=True)
    rows = []
    for meta in grid(a.grid):
        out = torch.empty(theirs.shape, device=dev)
        try:
            def conv_only(meta=meta, out=out):
                return nhwc_igemm.launch(xf, wf, b, 1, 0, 1, meta, "tf32", out=out)

            def whole(meta=meta, out=out):
                return nhwc_igemm.launch(fold_input(x, s, pad, hf, hf), wf, b, 1, 0, 1, meta, "tf32", out=out)
            got = whole().out
            torch.cuda.synchronize()
            kb = bool(torch.allclose(got, theirs, atol=1e-4, rtol=1e-4))
            rel = float(((got - ref).norm() / ref.norm()).item())
            t_conv = bench.time_gpu(conv_only, FAST, dev).median_ms
            t_all = bench.time_gpu(whole, FAST, dev).median_ms
            out_cl = torch.empty(theirs.shape, device=dev).contiguous(memory_format=torch.channels_last)
            t_cl = bench.time_gpu(lambda m=meta, o=out_cl: conv_only(m, o), FAST, dev).median_ms  # the write's cost
            rows.append((t_all, meta.short()))
            print(f"{meta.short():22s} conv {t_conv:.4f} ms ({flops / t_conv / 1e9:.0f} TFLOP/s of the real {p.flops / 1e9:.0f} GFLOP;"
                  f" {t_cl:.4f} ms writing channels_last)"
                  f" · fold+conv {t_all:.4f} ms = {cudnn / t_all:.2f}x cuDNN, {ours_now / t_all:.2f}x today · "
                  f"allclose {kb} rel {rel:.2e}", flush=True)
        except Exception as e:  # noqa: BLE001 - a failing configuration is a result
            print(f"{meta.short():22s} {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", flush=True)
    if rows:
        print(f"best fold+conv {min(rows)[0]:.4f} ms ({min(rows)[1]})")


if __name__ == "__main__":
    main()
