"""Append the per-problem table of a `python run.py +experiment=vs_cudnn` sweep to benchmarks/results/vs_cudnn.csv
(one row a problem and input layout: our fastest correct kernel against cuDNN, as the sweep's per_problem.md).

    python benchmarks/vs_cudnn_table.py --store sqlite:///mlruns/mlflow.db [--parent RUN_ID]

Without --parent, the newest finished sweep of the store that ran the vs_cudnn preset.
"""

from __future__ import annotations

import argparse
import datetime
import sys

from results import append

from convtune.record import Metric, Param, RunView, Tag
from convtune.track.store import Tracker


def newest_vs_cudnn(tracker: Tracker) -> str:
    parents = [r for r in tracker.search("attributes.status = 'FINISHED'")
               if "+experiment=vs_cudnn" in r["tags"].get(Tag.OVERRIDES, "") and "mlflow.parentRunId" not in r["tags"]]
    if not parents:
        raise SystemExit("no finished +experiment=vs_cudnn sweep in this store")
    return max(parents, key=lambda r: r["start_time"])["run_id"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--parent", default=None)
    a = ap.parse_args()
    tracker = Tracker(a.store)
    parent = a.parent or newest_vs_cudnn(tracker)
    best: dict[tuple[str, str], RunView] = {}
    for r in sorted(map(RunView, tracker.children(parent)), key=lambda r: r.latency_ms or float("inf")):
        if r.ok:
            best.setdefault((r.problem or "?", str(r.param("problem.layout") or "nchw")), r)
    if not best:
        raise SystemExit(f"sweep {parent}: no correct run")
    first = next(iter(best.values()))
    ms = lambda v: "" if v is None else f"{v:.4f}"  # noqa: E731 - what the timing resolves, not a float's digits
    rows = [{"problem": name, "layout": layout, "kernel": r.param(Param.KERNEL),
             "cudnn_nchw_ms": ms(r.metric(Metric.CUDNN_NCHW_MS)), "cudnn_cl_ms": ms(r.metric(Metric.CUDNN_CHANNELS_LAST_MS)),
             "ours_ms": ms(r.latency_ms), "speedup": f"{r.metric(Metric.SPEEDUP_VS_CUDNN) or 0:.2f}",
             "config": r.config_label()}
            for (name, layout), r in sorted(best.items())]
    when = datetime.datetime.fromtimestamp(first.raw["start_time"] / 1000, datetime.timezone.utc).date().isoformat()
    path = append("vs_cudnn", rows, gpu=first.tag(Tag.DEVICE, "?"), command="python run.py +experiment=vs_cudnn",
                  commit=(first.tag(Tag.GIT_COMMIT) or "unknown")[:7], date=when)
    print(f"{len(rows)} rows appended to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
