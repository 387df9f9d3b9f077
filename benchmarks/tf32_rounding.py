"""What cuDNN-matching TF32 rounding costs: `tf32` (operands rounded to nearest) against `tf32_trunc` (Triton's
truncating TF32 dot), timed interleaved round by round in one process on every problem of conf/problem/,
with each output's max |diff| against torch's own TF32 convolution and KernelBench's allclose verdict. GPU only.

    python benchmarks/tf32_rounding.py [--rounds 10] [--reps 20] [--problems kernelbench_l1_50,alexnet_conv3]
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import judge  # noqa: E402
from convtune.kernels import get_variant  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402
from convtune.problem import ConvProblem  # noqa: E402

PRECISIONS = ("tf32", "tf32_trunc")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--problems", default=None)
    a = ap.parse_args()
    names = a.problems.split(",") if a.problems else sorted(p.stem for p in (ROOT / "conf/problem").glob("*.yaml") if p.stem != "tiny")
    dev = torch.device("cuda")
    variant = get_variant("implicit_gemm")
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · rounds {a.rounds} × reps {a.reps}, L2 flushed")
    print("| problem | tf32 ms | tf32_trunc ms | cost of rounding | tf32 max abs diff vs torch | matches | trunc max abs diff | matches |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for name in names:
        p = ConvProblem.from_mapping({**yaml.safe_load((ROOT / "conf/problem" / f"{name}.yaml").read_text()), "name": name})
        x, w, b = make_inputs(p, 0, dev)
        meta = variant.default_meta(p.out_channels, p.stride[1], p.width, "tf32")
        outs = {prec: torch.full(p.output_shape, float("nan"), device=dev) for prec in PRECISIONS}
        calls = {prec: (lambda prec=prec: variant.launch(x, w, b, p.stride, p.padding, p.dilation, meta, prec, out=outs[prec]))
                 for prec in PRECISIONS}
        verdicts = {}
        for prec, call in calls.items():
            call()
            verdicts[prec] = judge(outs[prec], p, x, w, b, prec, 2e-3, check="float64")
        one = bench.TimingSettings(rounds=1, reps=a.reps, warmup=2)
        times = {prec: [] for prec in PRECISIONS}
        for _ in range(a.rounds):  # interleaved: drift hits both alike
            for prec, call in calls.items():
                times[prec].append(bench.time_gpu(call, one, dev).median_ms)
        per_round = [r / t for r, t in zip(times["tf32"], times["tf32_trunc"])]
        ratios.append(statistics.median(per_round))
        med = {prec: statistics.median(v) for prec, v in times.items()}
        m = {prec: verdicts[prec].metrics for prec in PRECISIONS}
        print(f"| {name} | {med['tf32']:.4f} | {med['tf32_trunc']:.4f} | {100 * (ratios[-1] - 1):+.1f} % | "
              f"{m['tf32']['max_abs_err_vs_torch']:.2g} | {bool(m['tf32']['matches_torch'])} | "
              f"{m['tf32_trunc']['max_abs_err_vs_torch']:.2g} | {bool(m['tf32_trunc']['matches_torch'])} |", flush=True)
        del x, w, b, outs
        torch.cuda.empty_cache()
    geo = statistics.geometric_mean(ratios)
    print(f"geometric mean of the per-problem median ratios tf32 / tf32_trunc: {geo:.4f} ({100 * (geo - 1):+.1f} %)")


if __name__ == "__main__":
    main()
