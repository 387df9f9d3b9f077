"""What compiling our kernels at a lower LLVM level (convtune.kernels.llvm_opt) costs: each level in its own
process (the level is fixed at compile time), alternated A B C A B C so that drift shows; each process times
every problem's default configuration with CUDA events, L2 flushed, and prints its medians.

    python benchmarks/llvm_opt_cost.py [--levels O3,O0,O1,O2] [--problems kernelbench_l1_50,alexnet_conv3] [--repeat 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def child(problems: list[str], precision: str) -> None:
    import torch

    from probe_kernels import load_problem

    from convtune.measure import bench
    from convtune.measure.correctness import judge
    from convtune.config import TOLERANCE
    from convtune.kernels import implicit_gemm as ig
    from convtune.measure.one_config import make_inputs

    dev = torch.device("cuda")
    for name in problems:
        p = load_problem(name)
        x, w, b = make_inputs(p, 0, dev)
        meta = ig.default_meta(p.out_channels, p.stride[1], p.width, precision)
        out = ig.launch(x, w, b, p.stride, p.padding, p.dilation, meta, precision).out
        v = judge(out, p, x, w, b, precision, TOLERANCE[precision], check="float64")
        t = bench.time_gpu(lambda: ig.launch(x, w, b, p.stride, p.padding, p.dilation, meta, precision, out=out),
                           bench.TimingSettings(rounds=5, reps=20), dev)
        print(json.dumps({"problem": name, "meta": meta.short(), "ms": t.median_ms, "ok": v.ok,
                          "rel_err": v.metrics["rel_err"]}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="O3,O0,O1,O2")
    ap.add_argument("--problems", default="kernelbench_l1_50,alexnet_conv3,resnet50_layer1_1x1,resnet50_stem")
    ap.add_argument("--precision", default="tf32")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    problems = a.problems.split(",")
    if a.child:
        child(problems, a.precision)
        return 0
    levels = a.levels.split(",")
    ms: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.repeat):
        for lvl in levels:
            env = {**os.environ, "CONVTUNE_LLVM_OPT": lvl, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix=f"cost-{lvl}-")}
            r = subprocess.run([sys.executable, __file__, "--child", "--problems", a.problems, "--precision", a.precision],
                               env=env, capture_output=True, text=True)
            if r.returncode:
                print(f"{lvl}: failed\n{r.stderr[-2000:]}")
                continue
            for line in r.stdout.splitlines():
                d = json.loads(line)
                print(f"{lvl} {d['problem']:22} {d['meta']:22} {d['ms']:.4f} ms ok={d['ok']} rel_err={d['rel_err']:.2g}", flush=True)
                ms.setdefault((lvl, d["problem"]), []).append(d["ms"])
    print(f"\nmedian over {a.repeat} processes, ms (ratio to {levels[0]})")
    for name in problems:
        base = statistics.median(ms.get((levels[0], name), [float("nan")]))
        cells = [f"{lvl} {statistics.median(ms[(lvl, name)]):.4f} ({statistics.median(ms[(lvl, name)]) / base:.3f})"
                 for lvl in levels if (lvl, name) in ms]
        print(f"{name:22} " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
