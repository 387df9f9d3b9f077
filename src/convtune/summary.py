"""The sweep summary: every configuration of a sweep in one table, best first. Pure formatting of run dicts."""

from __future__ import annotations

import math
from typing import Any

META_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
STATUS_ORDER = {"ok": 0, "incorrect": 1, "failed": 2, "killed": 3}
COLUMNS = ("rank", "config", "status", "latency_ms", "p20–p80 ms", "cv", "tflops", "% peak",
           "vs cuDNN", "rel_err", "note")


def ranked(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ok runs by latency, then incorrect, failed, killed, anything else (still running)."""
    def order(r: dict[str, Any]) -> tuple[int, float]:
        status = r["tags"].get("status", "running")
        return STATUS_ORDER.get(status, 4), r["metrics"].get("latency_ms", float("inf"))
    return sorted(runs, key=order)


def config_label(params: dict[str, str]) -> str:
    return " ".join(f"{k}={params[k]}" for k in META_KEYS if k in params)


def _fmt(v: Any, spec: str) -> str:
    return "" if v is None else format(v, spec)


def rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for i, r in enumerate(ranked(runs), 1):
        m, status = r["metrics"], r["tags"].get("status", "running")
        spread = (f"{m['latency_p20_ms']:.3f}–{m['latency_p80_ms']:.3f}"
                  if "latency_p20_ms" in m and "latency_p80_ms" in m else "")
        note = r["tags"].get("error.message", "")
        out.append([
            str(i) if status == "ok" else "-", config_label(r["params"]), status,
            _fmt(m.get("latency_ms"), ".4f"), spread, _fmt(m.get("latency_cv"), ".2%"),
            _fmt(m.get("tflops"), ".1f"), _fmt(m.get("pct_peak_tflops"), ".1f"),
            _fmt(m.get("speedup_vs_cudnn"), ".2f") + ("x" if "speedup_vs_cudnn" in m else ""),
            _fmt(m.get("rel_err"), ".1e"), note[:90],
        ])
    return out


def markdown(runs: list[dict[str, Any]]) -> str:
    table = [list(COLUMNS)] + rows(runs)
    widths = [max(len(row[c]) for row in table) for c in range(len(COLUMNS))]
    line = lambda row: "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |"  # noqa: E731
    return "\n".join([line(table[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in table[1:]])


def per_problem(runs: list[dict[str, Any]]) -> str:
    """For a sweep over several problems: the best correct run of each against cuDNN, and the geomean."""
    best: dict[str, dict[str, Any]] = {}
    for r in ranked(runs):
        if r["tags"].get("status") == "ok":
            best.setdefault(r["params"].get("problem", "?"), r)
    head = ["problem", "cuDNN ms", "ours ms", "speedup", "TFLOPS", "% of floor", "config"]
    body, logs = [], []
    for name, r in best.items():
        m = r["metrics"]
        sp = m.get("speedup_vs_cudnn")
        if sp:
            logs.append(math.log(sp))
        body.append([name, _fmt(m.get("cudnn_ms"), ".4f"), _fmt(m.get("latency_ms"), ".4f"),
                     _fmt(sp, ".2f") + ("x" if sp else ""), _fmt(m.get("tflops"), ".1f"),
                     _fmt(m.get("pct_of_floor"), ".1f"), config_label(r["params"])])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]
    if logs:
        lines.append(f"\ngeometric mean speedup over cuDNN: {math.exp(sum(logs) / len(logs)):.2f}x ({len(logs)} problems)")
    return "\n".join(lines)


def counts(runs: list[dict[str, Any]]) -> dict[str, int]:
    c = {s: 0 for s in STATUS_ORDER}
    for r in runs:
        s = r["tags"].get("status", "running")
        c[s] = c.get(s, 0) + 1
    return c
