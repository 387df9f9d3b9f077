"""Issue 13, session 26: `nhwc_streamk` (kernels/nhwc_streamk.py, the split of session 23's probe in the library with
A from shared memory, parts of at least num_stages K steps and a barrier before each part) against `nhwc_preround`
at the same tiles and the library's current route, cuDNN in both layouts beside them, side by side in one process,
interleaved (each call's median of 3 rounds of probe_kernels.FAST). Each row is one problem in one layout: an NCHW
input with NCHW output (the copy to channels_last inside every nhwc call), or channels_last in and out. Every output
is checked with KernelBench's allclose against torch's.

Prediction written before the run: where the binary holds an SM alone (M128-N256-w8-s4, M64-N256-w4-s3) and the last
wave is part-empty, as session 23's probe measured: alexnet_conv5 at M128-N256-w8-s4 about -6 % (its NCHW route
0.2785 → ~0.266 ms, 0.92x cuDNN's faster layout), alexnet_conv2 -5 to -10 %; at tiles of two programs an SM (conv3,
conv4's M128-N128-w4-s3) it does not split and runs within ±2 % of nhwc_preround.

    python benchmarks/probe_streamk.py [--problems a,b]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem, side_by_side  # noqa: E402

from convtune.kernels import Meta, get_variant, library_choice, nhwc_streamk, pins, torch_conv  # noqa: E402
from convtune.measure.correctness import torch_output  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

PROBLEMS = "alexnet_conv5,alexnet_conv2,alexnet_conv4,alexnet_conv3,vgg16_conv3_2"
TILES = [Meta(128, 256, 32, 8, 4), Meta(64, 256, 32, 4, 3), Meta(128, 128, 32, 4, 3), Meta(128, 128, 32, 8, 3)]


def probe(name: str) -> None:
    p0 = load_problem(name)
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    for layout in ("nchw", "channels_last"):
        p = dataclasses.replace(p0, layout=layout)
        x, w, b = make_inputs(p, 0, dev)
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        x_cl = x.contiguous(memory_format=torch.channels_last)
        x_nchw = x.contiguous()
        args = (p0.stride, p0.padding, p0.dilation)
        torch.backends.cudnn.benchmark = True
        theirs, _ = torch_output(p0, x_nchw, w, b, "tf32")
        calls = {}
        pin, _ = library_choice(pins.default_path(), torch.cuda.get_device_name(), p, "tf32")
        if isinstance(pin, pins.KernelPin):
            calls[f"library: {pin.short()}"] = get_variant(pin.kernel).prepared(
                x, w, b, *args, pin.meta, "tf32", out=torch.empty(p0.output_shape, device=dev, memory_format=fmt))
        splits = {}
        for meta in TILES:
            for kernel in ("nhwc_preround", "nhwc_streamk"):
                out = torch.empty(p0.output_shape, device=dev, memory_format=fmt)
                calls[f"{kernel} {meta.short()}"] = get_variant(kernel).prepared(x, w, b, *args, meta, "tf32", out=out)
            launched = nhwc_streamk.launch(x, w, b, *args, meta, "tf32")
            per_sm = nhwc_streamk.resident_programs(launched.compiled)
            plan = nhwc_streamk.make_plan(nhwc_streamk.geometry(x, w, *args), b is not None, meta, "tf32",
                                          layout != "nchw")
            s = nhwc_streamk.split_schedule(plan.tiles, plan.steps, plan.constexprs["GRAIN"],
                                            nhwc_streamk.split_slots(per_sm, sms))
            splits[meta.short()] = (f"{per_sm} an SM, {plan.tiles} tiles: {s.dp_tiles} whole, {s.sk_tiles} split "
                                    f"by {s.workers}")
        calls["cuDNN NCHW"] = lambda x=x_nchw, w=w, b=b: torch_conv.conv2d(x, w, b, *args, "tf32")  # noqa: B023
        calls["cuDNN CL"] = lambda x=x_cl, w=w, b=b: torch_conv.conv2d(x, w, b, *args, "tf32")  # noqa: B023
        med, ok, got = side_by_side(calls, theirs, dev)
        best = min(med["cuDNN NCHW"], med["cuDNN CL"]) if layout == "nchw" else med["cuDNN CL"]
        print(f"{name} {layout} (batch {p0.batch}); cuDNN's {'faster layout' if layout == 'nchw' else 'CL'} "
              f"{best:.4f} ms", flush=True)
        for meta, s in splits.items():
            print(f"  nhwc_streamk {meta}: {s}", flush=True)
        for k, ms in med.items():
            print(f"  {k:42s} {ms:8.4f} ms  {best / ms:5.3f}x cuDNN  allclose {ok[k]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=PROBLEMS)
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in a.problems.split(","):
        probe(name)


if __name__ == "__main__":
    main()
