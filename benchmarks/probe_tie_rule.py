"""Issue 13, session 15: which TF32 rounding cuDNN uses, problem by problem. benchmarks/probe_1x1_rule.py found that
with TF32 allowed cuDNN rounds operands to nearest with ties to *even* on resnet50_layer1_1x1 (3.1e-6 from the exact
sum; 1.9e-4 with ties away from zero, the `tf32` precision's rule), on resnet50_layer2_3x3 and alexnet_conv5 too
(1.1e-5 and 2.8e-5 against 8e-5), but with ties *away* on L1 #50 (1.8e-6 against 7.2e-5).

On convtune.verify's random shapes (its generator, both layouts, seed 15) and the suite's problems: torch's output
(cuDNN, TF32 allowed) against the exact (float64) sums of the operands rounded both ways and of the operands as they
are (cuDNN computing in fp32). A case follows the rule whose exact sum is at least 4x closer than the other's; ties
change nothing where the operands have none. Prints a summary by stride (1 or more), input channels (< 16 or more)
and kernel (1x1 or larger), and one line per suite problem.

Prediction: ties to even on every stride-1 case cuDNN runs in TF32; ties away on the strided few-channel ones (L1 #50's
kind); strided with many channels: unknown.

    python benchmarks/probe_tie_rule.py [--cases 300]
"""

from __future__ import annotations

import collections
import json
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_1x1_rule import round_to_tf32_even
from probe_kernels import load_problem

from convtune.kernels.precision import round_to_tf32
from convtune.measure.one_config import make_inputs
from convtune.verify import draw_case

SUITE = ("kernelbench_l1_50", "resnet50_stem", "alexnet_conv2", "alexnet_conv3", "alexnet_conv4", "alexnet_conv5",
         "resnet50_layer1_1x1", "resnet50_layer2_3x3", "vgg16_conv3_2")


def classify(x: torch.Tensor, w: torch.Tensor, b, stride, padding, dilation, fmt) -> dict:
    theirs = F.conv2d(x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt), b, stride, padding,
                      dilation).double()
    bd = None if b is None else b.double()
    diff = {}
    for name, (xi, wi) in {"away": (round_to_tf32(x), round_to_tf32(w)), "even": (round_to_tf32_even(x), round_to_tf32_even(w)),
                           "fp32": (x, w)}.items():
        diff[name] = (F.conv2d(xi.double(), wi.double(), bd, stride, padding, dilation) - theirs).abs().max().item()
    ties = int((round_to_tf32(x) != round_to_tf32_even(x)).sum() + (round_to_tf32(w) != round_to_tf32_even(w)).sum())
    if diff["fp32"] * 4 < min(diff["away"], diff["even"]):
        rule = "fp32"
    elif diff["even"] * 4 <= diff["away"]:
        rule = "even"
    elif diff["away"] * 4 <= diff["even"]:
        rule = "away"
    else:
        rule = "unclear"
    return dict(diff, ties=ties, rule=rule)


def main() -> None:
    cases = int(sys.argv[sys.argv.index("--cases") + 1]) if "--cases" in sys.argv else 300
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = True
    print(torch.cuda.get_device_name(), torch.__version__, "cuDNN", torch.backends.cudnn.version(), flush=True)
    for name in SUITE:
        p = load_problem(name)
        x, w, b = make_inputs(p, 1, dev)
        for lay, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
            r = classify(x, w, b, p.stride, p.padding, p.dilation, fmt)
            print(f"  {name:20s} {lay:13s} {r['rule']:7s} away {r['away']:.1e} · even {r['even']:.1e} · fp32 "
                  f"{r['fp32']:.1e} ({r['ties']} ties)", flush=True)
    rng = random.Random(15)
    groups: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    rows = []
    for i in range(cases):
        c = draw_case(rng, i, "implicit_gemm", "tf32", small=False)
        g = torch.Generator(device=dev).manual_seed(c.seed)
        make = torch.rand if c.init == "rand" else torch.randn
        x = make((c.n, c.c, c.h, c.w), generator=g, device=dev)
        w = make((c.k, c.c, c.kh, c.kw), generator=g, device=dev) / (c.c * c.kh * c.kw) ** 0.5
        b = make((c.k,), generator=g, device=dev) if c.bias else None
        fmt = torch.channels_last if c.layout == "channels_last" else torch.contiguous_format
        r = classify(x, w, b, c.stride, c.padding, c.dilation, fmt)
        key = ("stride 1" if c.stride == (1, 1) else "strided", "C<16" if c.c < 16 else "C>=16",
               "1x1" if (c.kh, c.kw) == (1, 1) else "larger", c.layout)
        groups[key][r["rule"]] += 1
        rows.append(dict(label=c.label(), **r))
    print(f"\n{cases} random cases (convtune.verify's generator, seed 15): the rule cuDNN followed, by group")
    for key in sorted(groups):
        print(f"  {' · '.join(key):45s} " + ", ".join(f"{k} {v}" for k, v in sorted(groups[key].items())))
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else None
    if out:
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
