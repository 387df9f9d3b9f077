"""Two stores that each hold one sweep of the same configurations (say on one GPU and on every GPU): per
configuration the two latencies, their ratio, and whether they differ by more than the runs' own spread
(p20–p80); then the counts and the GPU slots used.

    python benchmarks/compare_sweeps.py sqlite:///a.db sqlite:///b.db
"""
import statistics
import sys
from collections import Counter

from convtune.record import Metric, RunView, Tag
from convtune.track.store import Tracker


def children(uri: str) -> list[RunView]:
    t = Tracker(uri)
    return [RunView(r) for r in t.search("tags.`mlflow.parentRunId` != ''")]


def main(a_uri: str, b_uri: str) -> int:
    a, b = ({r.config_label(): r for r in children(u)} for u in (a_uri, b_uri))
    print(f"{'configuration':58s} {'A ms':>9s} {'B ms':>9s} {'B/A':>6s}  beyond spread")
    ratios, beyond = [], 0
    for label in sorted(set(a) | set(b)):
        ra, rb = a.get(label), b.get(label)
        if ra is None or rb is None or ra.latency_ms is None or rb.latency_ms is None:
            print(f"{label:58s} {'missing or not ok':>26s}")
            continue
        spread = max(ra.raw["metrics"][Metric.LATENCY_P80_MS] - ra.raw["metrics"][Metric.LATENCY_P20_MS],
                     rb.raw["metrics"][Metric.LATENCY_P80_MS] - rb.raw["metrics"][Metric.LATENCY_P20_MS])
        out = abs(rb.latency_ms - ra.latency_ms) > spread
        beyond += out
        ratios.append(rb.latency_ms / ra.latency_ms)
        print(f"{label:58s} {ra.latency_ms:9.4f} {rb.latency_ms:9.4f} {rb.latency_ms / ra.latency_ms:6.3f}  {'yes' if out else ''}")
    for name, runs in (("A", a), ("B", b)):
        print(f"{name}: {len(runs)} runs, status {dict(Counter(r.tag(Tag.STATUS, '?') for r in runs.values()))}, "
              f"gpu slots {dict(Counter(r.tag(Tag.GPU_SLOT, '-') for r in runs.values()))}")
    if ratios:
        print(f"B/A over {len(ratios)} configurations: median {statistics.median(ratios):.4f}, min {min(ratios):.4f}, "
              f"max {max(ratios):.4f}; {beyond} differ by more than their p20–p80 spread")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
