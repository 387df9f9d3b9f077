"""Count the cases of a `python -m convtune.commands.verify --out FILE.jsonl` run by variant, input layout and outcome (a run
cut short by a time limit leaves its JSONL, not its summary table).

    python benchmarks/verify_counts.py verify.jsonl
"""

import collections
import json
import sys


def main(path: str) -> None:
    counts: collections.Counter = collections.Counter()
    for line in open(path):
        r = json.loads(line)
        counts[(r["variant"], r.get("layout", "nchw"), r["outcome"])] += 1
    for (variant, layout, outcome), n in sorted(counts.items()):
        print(f"{n:4d}  {variant:<14} {layout:<14} {outcome}")


if __name__ == "__main__":
    main(sys.argv[1])
