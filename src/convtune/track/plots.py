"""Pictures for a sweep's parent run: a roofline with every configuration as a point, and latency per
configuration. Pure matplotlib on run dicts (no torch), headless (Agg)."""

from __future__ import annotations

import statistics
import textwrap
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import LogFormatter  # noqa: E402

from convtune.record import Metric, RunView  # noqa: E402
from convtune.track.summary import ranked  # noqa: E402


def _ok(runs: list[dict[str, Any]]) -> list[RunView]:
    return [r for r in ranked(runs) if r.ok and r.metric(Metric.TFLOPS) is not None]


class _PlainLogFormatter(LogFormatter):
    """matplotlib's log-axis labels, on the same ticks, as plain text ("7.1e-06", "10") rather than mathtext, whose
    parser took 0.82 of the 2.24 CPU-s (under cProfile) a fresh process spent drawing a sweep's three pictures; with
    plain labels, median 1.13 CPU-s against 2.06 (a 2-core CPU, 8 fresh processes each)."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:.3g}"


def roofline(runs: list[dict[str, Any]], title: str) -> Optional[Figure]:
    """Attained TFLOP/s against arithmetic intensity; intensity from NCU's DRAM bytes where profiled,
    else from the fewest bytes. Roofs from the ceilings the runs used (peak_tflops, peak_gbps)."""
    ok = _ok(runs)
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5))
    m0 = ok[0].raw["metrics"]
    for r in ok:
        ai = r.metric(Metric.NCU_ARITHMETIC_INTENSITY) or r.metric(Metric.ARITHMETIC_INTENSITY)
        tflops = r.metric(Metric.TFLOPS)
        ax.scatter(ai, tflops, s=28, zorder=3)
        ax.annotate(r.config_label().replace("BLOCK_", "").replace("num_", ""), (ai, tflops),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")
    for prefix, style in (("", "k-"), ("measured_", "b--")):
        # Metric.PEAK_TFLOPS / PEAK_GBPS and their MEASURED_ twins
        peak, bw = m0.get(f"{prefix}{Metric.PEAK_TFLOPS}"), m0.get(f"{prefix}{Metric.PEAK_GBPS}")
        if peak and bw:
            knee = peak * 1e3 / bw  # FLOP/byte where the roofs meet
            xs = [knee / 100, knee, knee * 100]
            ax.plot(xs, [min(peak, x * bw / 1e3) for x in xs], style, lw=1.5,
                    label=f"{prefix.rstrip('_') or 'datasheet'} roof: {peak:.0f} TFLOP/s, {bw:.0f} GB/s")
    if ax.get_lines():
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(_PlainLogFormatter())
        axis.set_minor_formatter(_PlainLogFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("attained TFLOP/s")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def latency_by_config(runs: list[dict[str, Any]], title: str) -> Optional[Figure]:
    """Median latency per configuration with its p20–p80 spread, fastest first, coloured by num_warps."""
    ok = _ok(runs)
    if not ok:
        return None
    # At least 3.5 in tall (a 2-config sweep was 800×164 px), the legend beside the bars, never over them.
    fig, ax = plt.subplots(figsize=(9, max(3.5, 0.8 + 0.28 * len(ok))))
    warps = sorted({r.param("num_warps", "?") for r in ok})
    colours = {w: plt.cm.viridis(i / max(len(warps) - 1, 1)) for i, w in enumerate(warps)}
    for i, r in enumerate(ok):
        ms = r.latency_ms
        lo, hi = r.metric(Metric.LATENCY_P20_MS) or ms, r.metric(Metric.LATENCY_P80_MS) or ms
        ax.barh(i, ms, color=colours[r.param("num_warps", "?")], xerr=[[ms - lo], [hi - ms]], capsize=2)
    ax.set_yticks(range(len(ok)), [r.config_label().replace("BLOCK_", "") for r in ok], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("latency (ms), median and p20–p80")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
              labels=[f"num_warps={w}" for w in colours], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


KNOBS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")


def latency_by_parameter(runs: list[dict[str, Any]], title: str) -> Optional[Figure]:
    """The importance view (as W&B sweeps and the Optuna dashboard draw one): for each launch parameter the sweep
    varied, every correct run's latency against that parameter's value, with the median per value joined by a line,
    so that which knob moves latency, and which way, shows at a glance. None where no parameter varies."""
    ok = _ok(runs)
    varied = [k for k in KNOBS if len({r.param(k) for r in ok}) > 1]
    if not ok or not varied:
        return None
    width = 3.2 * len(varied) + 0.6
    # constrained layout makes room for the figure's title; the title is wrapped to the figure's width (at 9 pt,
    # about 13 characters an inch): one varied parameter made a 3.8-inch figure whose title was cut at both ends
    fig, axes = plt.subplots(1, len(varied), figsize=(width, 3.6), sharey=True, squeeze=False, layout="constrained")
    for ax, key in zip(axes[0], varied):
        values = sorted({int(r.param(key)) for r in ok})
        by_value = {v: sorted(r.latency_ms for r in ok if int(r.param(key)) == v) for v in values}
        xs = list(range(len(values)))
        for x, v in zip(xs, values):
            ys = by_value[v]
            ax.scatter([x] * len(ys), ys, s=14, color=plt.cm.viridis(0.3), alpha=0.7)
        medians = [statistics.median(by_value[v]) for v in values]
        ax.plot(xs, medians, color=plt.cm.viridis(0.8), marker="o", lw=1.5, label="median")
        ax.set_xticks(xs, [str(v) for v in values], fontsize=8)
        ax.set_xlabel(key, fontsize=9)
    axes[0][0].set_ylabel("latency (ms)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(textwrap.fill(f"latency against each swept parameter · {title}", int(width * 13)), fontsize=9)
    return fig
