"""Pictures for a sweep's parent run: a roofline with every configuration as a point, and latency per
configuration. Pure matplotlib on run dicts (no torch), headless (Agg)."""

from __future__ import annotations

from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from convtune.summary import config_label, ranked  # noqa: E402


def _ok(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in ranked(runs) if r["tags"].get("status") == "ok" and "tflops" in r["metrics"]]


def roofline(runs: list[dict[str, Any]], title: str) -> Optional[Figure]:
    """Attained TFLOP/s against arithmetic intensity; intensity from NCU's DRAM bytes where profiled,
    else from the fewest bytes. Roofs from the ceilings the runs used (peak_tflops, peak_gbps)."""
    ok = _ok(runs)
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5))
    m0 = ok[0]["metrics"]
    for r in ok:
        m = r["metrics"]
        ai = m.get("ncu_arithmetic_intensity", m["arithmetic_intensity"])
        ax.scatter(ai, m["tflops"], s=28, zorder=3)
        ax.annotate(config_label(r["params"]).replace("BLOCK_", "").replace("num_", ""), (ai, m["tflops"]),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")
    for prefix, style in (("", "k-"), ("measured_", "b--")):
        peak, bw = m0.get(f"{prefix}peak_tflops"), m0.get(f"{prefix}peak_gbps")
        if peak and bw:
            knee = peak * 1e3 / bw  # FLOP/byte where the roofs meet
            xs = [knee / 100, knee, knee * 100]
            ax.plot(xs, [min(peak, x * bw / 1e3) for x in xs], style, lw=1.5,
                    label=f"{prefix.rstrip('_') or 'datasheet'} roof: {peak:.0f} TFLOP/s, {bw:.0f} GB/s")
    if ax.get_lines():
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
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
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.28 * len(ok)))
    warps = sorted({r["params"].get("num_warps", "?") for r in ok})
    colours = {w: plt.cm.viridis(i / max(len(warps) - 1, 1)) for i, w in enumerate(warps)}
    for i, r in enumerate(ok):
        m = r["metrics"]
        lo, hi = m.get("latency_p20_ms", m["latency_ms"]), m.get("latency_p80_ms", m["latency_ms"])
        ax.barh(i, m["latency_ms"], color=colours[r["params"].get("num_warps", "?")],
                xerr=[[m["latency_ms"] - lo], [hi - m["latency_ms"]]], capsize=2)
    ax.set_yticks(range(len(ok)), [config_label(r["params"]).replace("BLOCK_", "") for r in ok], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("latency (ms), median and p20–p80")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
              labels=[f"num_warps={w}" for w in colours], fontsize=7, loc="lower right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
