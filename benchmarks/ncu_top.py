"""Print the counters of one Nsight Compute `--page raw --csv` export that say what bounds a kernel: the tensor pipe,
issue slots, L1 and L2 hit rates, throughput against peak, and the warp stall reasons by cycles a warp spends in each
(largest first). Used by the GPU scripts after `ncu --set full`.

    python benchmarks/ncu_top.py <report>.csv
"""

from __future__ import annotations

import csv
import sys

WANTED = ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
          "smsp__issue_active.avg.pct_of_peak_sustained_active",
          "l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct",
          "sm__throughput.avg.pct_of_peak_sustained_elapsed",
          "dram__throughput.avg.pct_of_peak_sustained_elapsed",
          "gpu__time_duration.sum", "launch__registers_per_thread")
# warps stalled for each reason per issued instruction (Nsight Compute's "Warp State" section, as raw counters)
STALL, PER_ISSUE = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"


def main(path: str) -> None:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if r]
    head = next(i for i, r in enumerate(rows) if "ID" in r and "Kernel Name" in r)
    names, units, values = rows[head], rows[head + 1], rows[head + 2]
    table = {n: (v, u) for n, u, v in zip(names, units, values)}
    for name in WANTED:
        if name in table:
            print(f"{name} = {table[name][0]} {table[name][1]}")
    stalls = []
    for name, (value, _) in table.items():
        if name.startswith(STALL) and name.endswith(PER_ISSUE):
            try:
                stalls.append((float(value.replace(",", "")), name[len(STALL):-len(PER_ISSUE)]))
            except ValueError:
                continue
    print("stalls (warps stalled per issued instruction):",
          ", ".join(f"{reason} {value:.2f}" for value, reason in sorted(stalls, reverse=True)[:6]))


if __name__ == "__main__":
    main(sys.argv[1])
