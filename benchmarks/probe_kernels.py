"""Exploration on a GPU, outside the tracker: check and time many configurations of a kernel variant on
several problems in one process, next to cuDNN, and write a JSON-lines log plus a short table.

    python benchmarks/probe_kernels.py --out results.jsonl [--variant implicit_gemm] [--problems a,b]

The tracker (run.py) is the tool for sweeps whose results should be kept; this script exists to spend a
short GPU lease well while a kernel is being written (one call, many variants).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from convtune.measure import bench  # noqa: E402
from convtune.measure.bench import TimingSettings  # noqa: E402
from convtune.config import TOLERANCE  # noqa: E402
from convtune.kernels import Meta, get_variant  # noqa: E402
from convtune.measure.correctness import reference  # noqa: E402
from convtune.measure.one_config import cudnn_baseline, make_inputs  # noqa: E402
from convtune.problem import ConvProblem  # noqa: E402

FAST = TimingSettings(rounds=3, reps=10, warmup=2)
SIDE_BY_SIDE_ROUNDS = 3


def side_by_side(calls: dict, theirs: torch.Tensor, dev) -> tuple[dict, dict, dict]:
    """Each call once (its output checked with KernelBench's allclose against `theirs`), then all of them timed in
    SIDE_BY_SIDE_ROUNDS interleaved rounds of FAST: (median ms, allclose, output) by label. From session 23's
    benchmarks/probe_split.py (commit ea7cb1a), for the probes that compare variants in one process."""
    import statistics

    outs = {}
    for label, call in calls.items():
        r = call()
        outs[label] = r.out if hasattr(r, "out") else r
    torch.cuda.synchronize()
    ok = {k: bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4)) for k, y in outs.items()}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(SIDE_BY_SIDE_ROUNDS):
        for k, c in calls.items():
            times[k].append(bench.time_gpu(c, FAST, dev).median_ms)
    return {k: statistics.median(v) for k, v in times.items()}, ok, outs


def load_problem(name: str) -> ConvProblem:
    node = OmegaConf.load(ROOT / "conf" / "problem" / f"{name}.yaml")
    node.pop("description", None)
    return ConvProblem.from_mapping(node)


def grid(spec: str) -> list[Meta]:
    """'BM=64,128;BN=128;BK=32;W=4,8;S=2,3' → the product as Metas."""
    parts = dict(p.split("=") for p in spec.split(";"))
    axes = [[int(v) for v in parts[k].split(",")] for k in ("BM", "BN", "BK", "W", "S")]
    return [Meta(*t) for t in itertools.product(*axes)]


def probe(problem: ConvProblem, variant_name: str, metas: list[Meta], precision: str, log,
          extra: dict | None = None) -> list[dict]:
    """`extra` keyword arguments go to the launcher (e.g. vec=4 for implicit_gemm)."""
    v = get_variant(variant_name)
    launch = functools.partial(v.launch, **(extra or {}))
    dev = torch.device("cuda")
    x, w, b = make_inputs(problem, 0, dev)
    ref = reference(problem, x, w, b)
    base = cudnn_baseline(problem, x, w, b, precision, FAST)
    rows = []
    for meta in metas:
        row = {"problem": problem.name, "variant": variant_name, "precision": precision, **(extra or {}),
               **meta.as_dict(), **base}
        out = torch.full(problem.output_shape, float("nan"), device=dev)
        try:
            t0 = time.perf_counter()
            launched = launch(x, w, b, problem.stride, problem.padding, problem.dilation, meta, precision, out=out)
            torch.cuda.synchronize()
            row["compile_s"] = time.perf_counter() - t0
            chk = bench.check_output(out, ref, TOLERANCE[precision])
            row.update(ok=chk.ok, rel_err=chk.rel_err, regs=launched.n_regs, spills=launched.n_spills,
                       smem=launched.shared_bytes)
            if chk.ok:
                t = bench.time_gpu(lambda: launch(x, w, b, problem.stride, problem.padding, problem.dilation,
                                                          meta, precision, out=out), FAST, dev)
                row.update(ms=t.median_ms, cv=t.cv, tflops=problem.flops / t.median_ms / 1e9,
                           speedup=base["cudnn_ms"] / t.median_ms)
        except Exception as e:  # noqa: BLE001 - a failing config is a result
            row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200])
        rows.append(row)
        log.write(json.dumps(row) + "\n")
        log.flush()
        print(f"{problem.name:22s} {meta.short():22s} {row.get('ms', float('nan')):8.4f} ms "
              f"regs={row.get('regs')} spills={row.get('spills')} {row.get('error', '')}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", default="implicit_gemm")
    ap.add_argument("--problems", default="kernelbench_l1_50")
    ap.add_argument("--grid", default="BM=64,128;BN=128;BK=32;W=4,8;S=2,3")
    ap.add_argument("--precision", default="tf32")
    ap.add_argument("--vec", type=int, default=None, help="implicit_gemm: force the input vector width")
    a = ap.parse_args()
    extra = {} if a.vec is None else {"vec": a.vec}
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    best = []
    with open(a.out, "a") as log:
        for name in a.problems.split(","):
            rows = [r for r in probe(load_problem(name), a.variant, grid(a.grid), a.precision, log, extra) if "ms" in r]
            if rows:
                best.append(min(rows, key=lambda r: r["ms"]))
    print(f"\nbest per problem ({a.variant}, {a.precision}, {extra}):")
    for r in best:
        print(f"{r['problem']:22s} M{r['BLOCK_M']}-N{r['BLOCK_N']}-K{r['BLOCK_K']}-w{r['num_warps']}-s{r['num_stages']}"
              f"  {r['ms']:.4f} ms  cuDNN {r['cudnn_ms']:.4f} ms (nchw {r['cudnn_nchw_ms']:.4f}, cl "
              f"{r['cudnn_channels_last_ms']:.4f})  x{r['speedup']:.2f}  {r['tflops']:.1f} TFLOPS  err {r['rel_err']:.1e}")


if __name__ == "__main__":
    main()
