"""Benchmark results as data: one CSV a benchmark under benchmarks/results/, one row a measurement, each row with
the GPU, the date, the commit and the command that made it. Maintained tools append; nobody edits rows by hand.

    from results import append   # from a tool in benchmarks/
    append("vs_cudnn", rows, gpu="NVIDIA H200", command="python run.py +experiment=vs_cudnn")
"""

from __future__ import annotations

import csv
import datetime
import subprocess
from pathlib import Path
from typing import Iterable, Optional

RESULTS = Path(__file__).resolve().parent / "results"
COMMON = ("gpu", "date", "commit", "command")


def head_commit(where: Optional[Path] = None) -> str:
    """The commit the tree at `where` (this project) is at, marked "-dirty" where its tracked files differ from it:
    a measured tree with changes not yet committed, or a copy whose git metadata is older than its files (the GPU
    machine's copy of a working tree), is not that commit's."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty", "--exclude=*"],
                             cwd=where or RESULTS.parent, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def append(benchmark: str, rows: Iterable[dict], gpu: str, command: str, commit: Optional[str] = None,
           date: Optional[str] = None) -> Path:
    """Append `rows` (dicts with the same keys) to benchmarks/results/<benchmark>.csv, each with the GPU, date
    (UTC, today unless given), commit (HEAD unless given) and command. A file whose header differs is refused."""
    rows = list(rows)
    if not rows:
        raise ValueError(f"{benchmark}: no rows to append")
    fields = list(COMMON) + [k for k in rows[0] if k not in COMMON]
    path = RESULTS / f"{benchmark}.csv"
    if path.exists():
        with path.open(newline="") as f:
            header = next(csv.reader(f), [])
        if header != fields:
            raise ValueError(f"{path}: its columns {header} are not this benchmark's {fields}")
    common = {"gpu": gpu, "date": date or datetime.date.today().isoformat(), "commit": commit or head_commit(),
              "command": command}
    RESULTS.mkdir(exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({**common, **r})
    return path
