"""Which TF32 rule does cuDNN follow on a problem, and which of our precisions matches it by KernelBench's allclose?

Per problem and input layout: torch's own output at its defaults (cuDNN, TF32 allowed) against the exact
(float64) result of the operands converted to TF32 four ways: both rounded to nearest (cvt.rna: what `tf32`
does), both truncated (what `tf32_trunc` does), input rounded and weight truncated, and the reverse. Then our
kernel at `tf32` and `tf32_trunc` (implicit_gemm on NCHW, nhwc_igemm on channels_last, default configurations):
max |diff| to torch's output and KernelBench's allclose(atol=rtol=1e-4). GPU only.

    python benchmarks/probe_tf32_rule.py [--problems resnet50_layer1_1x1,alexnet_conv5] [--seeds 0,1]
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

from probe_kernels import load_problem

from convtune.kernels import implicit_gemm, nhwc_igemm
from convtune.kernels.precision import round_to_tf32
from convtune.measure.one_config import make_inputs


def truncate_to_tf32(t: torch.Tensor) -> torch.Tensor:
    return (t.contiguous().view(torch.int32) & -8192).view(torch.float32)


def exact(p, x, w, b) -> torch.Tensor:
    return F.conv2d(x.double(), w.double(), None if b is None else b.double(), p.stride, p.padding, p.dilation)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default="resnet50_layer1_1x1,resnet50_layer2_3x3,alexnet_conv5")
    ap.add_argument("--seeds", default="0,1")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = True  # torch's default, stated
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · cuDNN {torch.backends.cudnn.version()}")
    print("max |diff| to torch's output (cuDNN, TF32 allowed), and whether allclose(1e-4) holds")
    for name in a.problems.split(","):
        p = load_problem(name)
        for seed in (int(s) for s in a.seeds.split(",")):
            x, w, b = make_inputs(p, seed, dev)
            rules = {"rn/rn": (round_to_tf32(x), round_to_tf32(w)), "tr/tr": (truncate_to_tf32(x), truncate_to_tf32(w)),
                     "rn/tr": (round_to_tf32(x), truncate_to_tf32(w)), "tr/rn": (truncate_to_tf32(x), round_to_tf32(w))}
            emulated = {k: exact(p, xi, wi, b) for k, (xi, wi) in rules.items()}
            for layout, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
                xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
                theirs = F.conv2d(xl, wl, b, p.stride, p.padding, p.dilation)
                row = [f"{k} {(theirs.double() - e).abs().max().item():.1e}" for k, e in emulated.items()]
                variant = nhwc_igemm if layout == "channels_last" else implicit_gemm
                for prec in ("tf32", "tf32_trunc"):
                    meta = variant.default_meta(p.out_channels, p.stride[1], p.width, prec)
                    ours = variant.launch(xl, w, b, p.stride, p.padding, p.dilation, meta, prec).out
                    ok = bool(torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4))
                    row.append(f"ours {prec} {(ours - theirs).abs().max().item():.1e} allclose {ok}")
                print(f"  {name:<20} seed {seed} {layout:<13} torch vs exact of operands " + " · ".join(row[:4])
                      + " | " + " · ".join(row[4:]), flush=True)
            del emulated
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
