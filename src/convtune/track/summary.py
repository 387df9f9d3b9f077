"""The sweep summary: every configuration of a sweep in one table, best first. Pure formatting of runs read back
from the store (tracking's plain dicts, read through the run record's RunView)."""

from __future__ import annotations

import math
from typing import Any, Iterable

from convtune.record import Metric, Param, RunView, Status, Tag

__all__ = ["INTERPRETER_NOTE", "counts", "markdown", "per_problem", "ranked", "rows"]

COLUMNS = ("rank", "config", "status", "latency_ms", "p20–p80 ms", "cv", "TFLOPS", "GB/s", "% peak",
           "vs cuDNN", "rel_err", "note")
# what the printed table and the dashboard say under a sweep of interpreter runs
INTERPRETER_NOTE = ("(interpreter) CPU host times through Triton's interpreter: for testing the pipeline, meaningless "
                    "for a GPU; TFLOPS and GB/s follow from them")


def _views(runs: Iterable[Any]) -> list[RunView]:
    return [r if isinstance(r, RunView) else RunView(r) for r in runs]


def ranked(runs: Iterable[Any]) -> list[RunView]:
    """ok runs by latency, then incorrect, failed, killed, anything else (still running)."""
    def order(r: RunView) -> tuple[int, float]:
        latency = r.latency_ms
        return Status.ORDER.get(r.status, 4), float("inf") if latency is None else latency
    return sorted(_views(runs), key=order)


def _fmt(v: Any, spec: str) -> str:
    return "" if v is None else format(v, spec)


def _sig(v: Any) -> str:
    """Three significant digits: an interpreter's 6.5e-06 TFLOPS is not "0.0"."""
    if v is None:
        return ""
    return f"{v:.0f}" if abs(v) >= 100 else format(v, ".3g")


def rows(runs: Iterable[Any]) -> list[list[str]]:
    out = []
    ordered = ranked(runs)
    # a sweep over kernels (+experiment=candidates): the same launch keys mean other things in each, so name it
    several = len({r.param(Param.KERNEL) for r in ordered}) > 1
    dtypes = len({_dtype(r) for r in ordered}) > 1  # a sweep over dtype=: each row says its own
    for i, r in enumerate(ordered, 1):
        m = r.metric
        p20, p80 = m(Metric.LATENCY_P20_MS), m(Metric.LATENCY_P80_MS)
        spread = ("" if p20 is None or p80 is None else "one call" if p20 == p80 else f"{p20:.3f}–{p80:.3f}")
        speedup = m(Metric.SPEEDUP_VS_CUDNN)
        out.append([
            str(i) if r.ok else "-", (f"{_dtype(r)} " if dtypes else "") + (f"{r.param(Param.KERNEL)}: " if several else "")
            + r.config_label(), r.status,
            _fmt(r.latency_ms, ".4f"), spread, _fmt(m(Metric.LATENCY_CV), ".2%"),
            _sig(m(Metric.TFLOPS)), _sig(m(Metric.GBPS)), _fmt(m(Metric.PCT_PEAK_TFLOPS), ".1f"),
            _fmt(speedup, ".2f") + ("x" if speedup is not None else ""),
            _fmt(m(Metric.REL_ERR), ".1e"),
            (r.tag(Tag.ERROR_MESSAGE) or (f"resumed from {r.tag(Tag.RESUMED_FROM)[:8]}" if r.tag(Tag.RESUMED_FROM) else ""))[:90],
        ])
    return out


def _dtype(r: Any) -> str:
    return str(r.param("problem.dtype") or "float32")


def markdown(runs: Iterable[Any]) -> str:
    table = [list(COLUMNS)] + rows(runs)
    widths = [max(len(row[c]) for row in table) for c in range(len(COLUMNS))]
    line = lambda row: "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |"  # noqa: E731
    return "\n".join([line(table[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in table[1:]])


def per_problem(runs: Iterable[Any]) -> str:
    """For a sweep over several problems: the best correct run of each problem, input layout and dtype against cuDNN
    at that dtype (a channels_last input against cuDNN channels_last, an NCHW one against cuDNN's faster layout), and
    the geomean per layout (and dtype, where not float32)."""
    best: dict[tuple[str, str], RunView] = {}
    for r in ranked(runs):
        if r.ok:
            layout = str(r.param("problem.layout") or "nchw")
            best.setdefault((r.problem or "?", layout if _dtype(r) == "float32" else f"{layout} {_dtype(r)}"), r)
    head = ["problem", "layout", "kernel", "cuDNN NCHW ms", "cuDNN CL ms", "ours ms", "speedup", "TFLOPS",
            "% of floor", "config"]
    body, logs = [], {}
    for (name, layout), r in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1] != "nchw")):
        sp = r.metric(Metric.SPEEDUP_VS_CUDNN)
        if sp:
            logs.setdefault(layout, []).append(math.log(sp))
        body.append([name, layout, str(r.param(Param.KERNEL) or "?"), _fmt(r.metric(Metric.CUDNN_NCHW_MS), ".4f"),
                     _fmt(r.metric(Metric.CUDNN_CHANNELS_LAST_MS), ".4f"), _fmt(r.latency_ms, ".4f"),
                     _fmt(sp, ".2f") + ("x" if sp else ""), _fmt(r.metric(Metric.TFLOPS), ".1f"),
                     _fmt(r.metric(Metric.PCT_OF_FLOOR), ".1f"), r.config_label()])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]
    for layout, logged in logs.items():
        lines.append(f"\ngeometric mean speedup over cuDNN, {layout} input: {math.exp(sum(logged) / len(logged)):.2f}x "
                     f"({len(logged)} problems)")
    return "\n".join(lines)


def counts(runs: Iterable[Any]) -> dict[str, int]:
    c = {s: 0 for s in Status.ORDER}
    for r in _views(runs):
        c[r.status] = c.get(r.status, 0) + 1
    return c
