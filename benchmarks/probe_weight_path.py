"""Issue 13, session 28: the weight tiles by TMA or by plain loads, on the three rows still under 0.9x cuDNN.

After session 27 the table's rows under 0.9x cuDNN's faster layout are resnet50_layer2_3x3 (0.64x with an NCHW input,
0.88x channels_last: nhwc_igemm M64-N128-K32-w4-s3, 0.0652 ms against cuDNN channels_last's 0.0573) and
vgg16_conv3_2 with an NCHW input (0.89x: nchw_igemm M64-N256-K32-w4-s3, 0.4050 ms against 0.3618). Every nhwc and
nchw kernel loads its weight tiles through a TMA descriptor wherever C_in % 4 == 0. That choice was measured once,
in session 11 before the timing fix (docs/evidence/h200_issue13_tma.txt): it gained 3-16 % on five layers and lost
9 % on resnet50_layer2_3x3 (M64-N128-K32-w4-s3 0.0760 ms by TMA against 0.0694 without), the one layer whose K loop
is short (9 taps x 128 channels = 36 steps of 32) and whose tiles run three to an SM. It was never measured on
nchw_igemm, nhwc_preround or at the tiles the pins have now.

Prediction, written before the run: resnet50_layer2_3x3 channels_last at the pin's tile 5-9 % faster without TMA
(0.0652 -> 0.059-0.062 ms, 0.92-0.97x cuDNN channels_last); its NCHW routes move by the same few microseconds,
still far under 0.9x (the copy is 0.018-0.020 ms of them: docs/evidence/h200_issue13_layout_copy.txt);
vgg16_conv3_2 NCHW within +-3 % either way (TMA gained 11 % on its nhwc_igemm in session 11, at a 256-wide tile).

Each row is a call as the library makes it (the checks and plan once, then the input's copy or rounding, if any,
and the launch), its output checked with KernelBench's allclose against torch's on the same input, and every call
of a problem timed in interleaved rounds (probe_kernels.side_by_side), twice.

The run of session 28 (docs/evidence/h200_issue13_session28_probes.txt) had cuDNN's weight NCHW beside a channels_last
input, which torch converts every call (0.068-0.070 ms against the tracker's 0.0576): fixed since; our rows stand.

    python benchmarks/probe_weight_path.py [--problems resnet50_layer2_3x3,vgg16_conv3_2]
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

from convtune.kernels import Meta, nchw_igemm, nhwc_igemm, torch_conv  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

T = "tf32"


def tile(s: str) -> Meta:
    """'64-128-32-4-3' → Meta(64, 128, 32, 4, 3)."""
    return Meta(*(int(v) for v in s.split("-")))


def nhwc_call(x, w, b, args, meta: Meta, weight_tma: bool, preround: bool, out_fmt, out_shape):
    """nhwc_igemm (or nhwc_preround) as `prepared` makes it, with the weight path chosen."""
    out = torch.empty(out_shape, device=x.device).contiguous(memory_format=out_fmt)  # its own: checked after all ran
    plan, out = nhwc_igemm._checked_plan(x, w, b, *args, meta, T, out, 1, weight_tma, preround)

    def call():
        nhwc_igemm.run(plan, nhwc_igemm.round_input(x, plan), w, b, out)
        return out
    return call


def nchw_call(x, w, b, args, meta: Meta, weight_tma: bool, out_fmt, out_shape):
    """nchw_igemm as `prepared` makes it, its plan's W_TMA set to `weight_tma`."""
    out = torch.empty(out_shape, device=x.device).contiguous(memory_format=out_fmt)  # its own: checked after all ran
    plan, out = nchw_igemm._checked_plan(x, w, b, *args, meta, T, out, 1)
    cx = {**plan.constexprs, "W_TMA": plan.constexprs["W_TMA"] and weight_tma}
    plan = dataclasses.replace(plan, constexprs=cx, binary_key=tuple(sorted(cx.items())))

    def call():
        nchw_igemm.run(plan, nchw_igemm.readable_input(x, plan), w, b, out)
        return out
    return call


# problem → layout → [(label, kind, tile, weight by TMA)]; kind: igemm (A rounded in the kernel), preround (the input
# rounded before it), nchw (nchw_igemm), torch
ROWS = {
    "resnet50_layer2_3x3": {
        "channels_last": [
            ("torch (cuDNN CL)", "torch", None, None),
            ("igemm 64-128-32-4-3 tma (pin)", "igemm", "64-128-32-4-3", True),
            ("igemm 64-128-32-4-3 ld", "igemm", "64-128-32-4-3", False),
            ("igemm 64-128-32-4-4 ld", "igemm", "64-128-32-4-4", False),
            ("igemm 64-128-32-8-3 ld", "igemm", "64-128-32-8-3", False),
            ("igemm 128-128-32-4-3 ld", "igemm", "128-128-32-4-3", False),
            ("igemm 128-128-32-8-3 tma", "igemm", "128-128-32-8-3", True),
            ("igemm 128-128-32-8-3 ld", "igemm", "128-128-32-8-3", False),
            ("igemm 64-128-16-4-4 ld", "igemm", "64-128-16-4-4", False),
        ],
        "nchw": [
            ("torch (cuDNN NCHW)", "torch", None, None),
            ("igemm 64-128-32-4-3 tma", "igemm", "64-128-32-4-3", True),
            ("igemm 64-128-32-4-3 ld", "igemm", "64-128-32-4-3", False),
            ("preround 128-128-32-8-3 tma", "preround", "128-128-32-8-3", True),
            ("preround 128-128-32-8-3 ld", "preround", "128-128-32-8-3", False),
            ("nchw 128-128-16-4-3 tma", "nchw", "128-128-16-4-3", True),
            ("nchw 128-128-16-4-3 ld", "nchw", "128-128-16-4-3", False),
        ],
    },
    "vgg16_conv3_2": {
        "nchw": [
            ("torch (cuDNN NCHW)", "torch", None, None),
            ("nchw 64-256-32-4-3 tma (pin)", "nchw", "64-256-32-4-3", True),
            ("nchw 64-256-32-4-3 ld", "nchw", "64-256-32-4-3", False),
            ("preround 128-256-32-8-4 tma", "preround", "128-256-32-8-4", True),
            ("preround 128-256-32-8-4 ld", "preround", "128-256-32-8-4", False),
            ("igemm 64-256-32-4-3 ld", "igemm", "64-256-32-4-3", False),
        ],
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=",".join(ROWS))
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in a.problems.split(","):
        p = load_problem(name)
        args = (p.stride, p.padding, p.dilation)
        x0, w, b = make_inputs(p, 0, dev)
        # cuDNN channels_last with the weight channels_last too, as the tracker's baseline (one_config.cudnn_baseline)
        x_cl, w_cl = (t.contiguous(memory_format=torch.channels_last) for t in (x0, w))
        cudnn_cl = side_by_side({"cl": lambda x_cl=x_cl, w_cl=w_cl, b=b, args=args: torch_conv.conv2d(
            x_cl, w_cl, b, *args, T)}, torch_conv.conv2d(x_cl, w_cl, b, *args, T), dev)[0]["cl"]
        for layout, rows in ROWS[name].items():
            fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            x, wt = x0.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
            calls = {}
            for label, kind, spec, tma in rows:
                if kind == "torch":
                    calls[label] = lambda x=x, wt=wt, b=b, args=args: torch_conv.conv2d(x, wt, b, *args, T)
                elif kind == "nchw":
                    calls[label] = nchw_call(x, w, b, args, tile(spec), tma, fmt, p.output_shape)
                else:
                    calls[label] = nhwc_call(x, w, b, args, tile(spec), tma, kind == "preround", fmt,
                                             p.output_shape)
            theirs = torch_conv.conv2d(x, wt, b, *args, T)
            for attempt in (1, 2):
                ms, ok, _ = side_by_side(calls, theirs, dev)
                print(f"{name} {layout} (run {attempt}); cuDNN channels_last alone {cudnn_cl:.4f} ms", flush=True)
                for label in calls:
                    print(f"  {label:34s} {ms[label]:.4f} ms  {cudnn_cl / ms[label]:.3f}x cuDNN CL  "
                          f"allclose {ok[label]}", flush=True)


if __name__ == "__main__":
    main()
