"""What cuDNN computes when TF32 is allowed, per suite problem: its time and its error against float64 with
TF32 on (torch's default) and off, in NCHW and channels_last, in one GPU process. Where cuDNN's "TF32" output is
as accurate as fp32, no TF32 kernel can match it by KernelBench's allclose; then the channels_last kernel at
tf32x3 (three TF32 products per multiply) is timed on a grid, checked against torch's default output, and
compared with cuDNN's TF32-on time (the fastest cuDNN output of that accuracy).

    python benchmarks/probe_cudnn_precision.py [--problems a,b] [--grid 'BM=64,128;BN=64,128;BK=32;W=4,8;S=3,4']
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, grid, load_problem

from convtune.kernels import nhwc_igemm
from convtune.measure import bench
from convtune.measure.correctness import reference
from convtune.measure.one_config import make_inputs

SUITE = ("kernelbench_l1_50,alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,resnet50_stem,"
         "resnet50_layer1_1x1,resnet50_layer2_3x3,vgg16_conv3_2")
FP32_CLASS = 1e-5  # rel L2 from float64 below this: fp32-accurate (TF32 rounding gives ~3e-4 on these problems)


def rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def cudnn(p, x, w, b, ref) -> dict[str, tuple[float, float]]:
    """(median ms, rel L2 from float64) of F.conv2d (cuDNN, benchmark mode) per layout and TF32 setting."""
    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.benchmark = True
    out = {}
    try:
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            for layout, fmt in (("nchw", torch.contiguous_format), ("cl", torch.channels_last)):
                xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
                y = F.conv2d(xl, wl, b, p.stride, p.padding, p.dilation)
                t = bench.time_gpu(lambda xl=xl, wl=wl: F.conv2d(xl, wl, b, p.stride, p.padding, p.dilation), FAST,
                                   x.device)
                out[f"{layout} tf32 {'on' if tf32 else 'off'}"] = (t.median_ms, rel(y, ref))
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = saved
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=SUITE)
    ap.add_argument("--grid", default="BM=64,128;BN=64,128;BK=32;W=4,8;S=3,4")
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    print("cuDNN per problem: median ms (rel L2 from float64), TF32 on (torch's default) and off")
    fp32_like = []
    for name in a.problems.split(","):
        p = load_problem(name)
        x, w, b = make_inputs(p, 0, dev)
        ref = reference(p, x, w, b)
        got = cudnn(p, x, w, b, ref)
        print(f"  {name:<20} " + " · ".join(f"{k} {ms:.4f} ({e:.1e})" for k, (ms, e) in got.items()), flush=True)
        if got["cl tf32 on"][1] < FP32_CLASS:
            fp32_like.append((p, x, w, b, ref, got))
        del ref
        torch.cuda.empty_cache()
    for p, x, w, b, ref, got in fp32_like:
        print(f"\n{p.name}: cuDNN with TF32 allowed is fp32-accurate; nhwc_igemm at tf32x3 on a channels_last input, "
              f"against cuDNN channels_last TF32 on ({got['cl tf32 on'][0]:.4f} ms)")
        x_cl = x.contiguous(memory_format=torch.channels_last)
        torch.backends.cudnn.allow_tf32 = True
        theirs = F.conv2d(x_cl, w.contiguous(memory_format=torch.channels_last), b, p.stride, p.padding, p.dilation)
        for meta in grid(a.grid):
            def call(p=p, x_cl=x_cl, w=w, b=b, meta=meta):
                return nhwc_igemm.launch(x_cl, w, b, p.stride, p.padding, p.dilation, meta, "tf32x3")
            try:
                y = call().out
                ok = bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4))
                t = bench.time_gpu(call, FAST, dev)
                print(f"  {meta.short():<22} {t.median_ms:.4f} ms  {got['cl tf32 on'][0] / t.median_ms:.2f}x  "
                      f"rel {rel(y, ref):.1e}  allclose to torch {ok}", flush=True)
            except Exception as e:  # noqa: BLE001 - a failing config is a result
                print(f"  {meta.short():<22} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200])


if __name__ == "__main__":
    main()
