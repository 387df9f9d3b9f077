"""The sweep's dashboard: its parent run's description. The MLflow UI renders a run's `mlflow.note.content`
tag as markdown on the run's Overview, so the page the sweep's `browse:` link opens answers "which configuration is
fastest, and why" with no clicks: the ranked table (latency, p20-p80, TFLOPS, GB/s, % of peak, speed against cuDNN,
correct), the winner marked, each row a link to its child run, the plots embedded, and a link to the runs table
sorted by latency. Pure formatting of runs read back from the store, and the links the UI understands.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional
from urllib.parse import quote

from convtune.record import Metric, RunView, Status, Tag
from convtune.track.summary import ranked

NOTE, WINNER = Tag.NOTE, Tag.WINNER
INTERPRETED = ("These are **CPU host times through Triton's interpreter**: they test the pipeline and say nothing of a "
               "GPU. TFLOPS and GB/s follow from them, so they are tiny too.")
# the model-training view of MLflow 3's UI: without it a click on a run can land in the GenAI evaluation views
VIEW = "workflowType=machine_learning"


# The runs table takes its sort and filter from a link (searchFilter, orderByKey, orderByAsc, startTime and the
# lifecycle, model and dataset filters: MLflow 3.17's UI reads no other parameter), never its columns, which each
# browser keeps for itself: the line that gives the link says which to pick.
PICK_COLUMNS = "sorted by latency_ms; MLflow's runs table takes no columns from a link: pick Columns → Metrics → latency_ms there"
# A markdown table's cells get no padding in the MLflow UI ("vs cuDNNcorrect"): two no-break spaces end every cell
PAD = "&nbsp;&nbsp;"


def run_link(experiment_id: str, run_id: str, base: str = "") -> str:
    """A run's page in the UI (relative to the UI's root where `base` is empty, as links inside the UI are)."""
    return f"{base}#/experiments/{experiment_id}/runs/{run_id}?{VIEW}"


def runs_by_latency(experiment_id: str, parent_run_id: str, base: str = "") -> str:
    """The experiment's runs table showing this sweep's children, fastest first."""
    search = quote(f"tags.mlflow.parentRunId = '{parent_run_id}'")
    return (f"{base}#/experiments/{experiment_id}/runs?{VIEW}&searchFilter={search}"
            f"&orderByKey={quote('metrics.`' + Metric.LATENCY_MS + '`')}&orderByAsc=true")


def significant(v: Optional[float], digits: int = 4) -> str:
    """A number with `digits` significant digits (never "0.00" for a small non-zero value), or — for none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if v == 0:
        return "0"
    return f"{v:.0f}" if abs(v) >= 10 ** digits else f"{v:.{digits}g}"


def description(runs: Iterable[Any], experiment_id: str, parent_run_id: str, interpreted: bool,
                plots: Iterable[str] = ()) -> str:
    """The parent run's markdown: a heading, the interpreter's warning where it applies, the ranked table with the
    winner marked and each configuration linked to its run, the plots, and the sorted runs table's link."""
    views = ranked(runs)
    ok = [r for r in views if r.ok]
    device = next((r.tag(Tag.DEVICE) for r in views if r.tag(Tag.DEVICE)), "?")
    problem = next((r.problem for r in views if r.problem), "?")
    # the table first: the UI shows the first lines of a description before "Show more"
    lines = [f"**{problem} on {device}**: {len(ok)} of {len(views)} configurations correct, fastest first"
             + (" · *CPU host times through Triton's interpreter: for testing the pipeline, meaningless for a GPU*"
                if interpreted else ""), ""]
    lines += [_row(["rank", "configuration", "latency ms", "p20–p80 ms", "TFLOPS", "GB/s", "% of peak", "vs cuDNN",
                    "correct"]), "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(views, 1):
        m = r.metric
        p20, p80 = m(Metric.LATENCY_P20_MS), m(Metric.LATENCY_P80_MS)
        speedup = m(Metric.SPEEDUP_VS_CUDNN)
        correct = {Status.OK: "yes", Status.INCORRECT: "**no**"}.get(r.status, r.status)
        rank = ("★ 1" if r is ok[0] else str(i)) if r.ok else "—"
        lines.append(_row([
            rank, f"[{r.config_label()}]({run_link(experiment_id, r.run_id)})", significant(r.latency_ms),
            "—" if p20 is None or p80 is None else "one call" if p20 == p80 else f"{significant(p20)}–{significant(p80)}",
            significant(m(Metric.TFLOPS), 3), significant(m(Metric.GBPS), 3),
            significant(m(Metric.PCT_PEAK_TFLOPS), 3), "—" if speedup is None else f"{speedup:.2f}x", correct]))
    if ok:
        lines += ["", f"★ **Winner: {ok[0].config_label()}** at {significant(ok[0].latency_ms)} ms "
                      f"([its run]({run_link(experiment_id, ok[0].run_id)}), tagged `{WINNER}`)."]
    if interpreted:
        lines += ["", INTERPRETED]
    for name in plots:
        lines += ["", f"![{name}](get-artifact?path={quote(name)}&run_uuid={parent_run_id})"]
    lines += ["", f"[All of this sweep's runs, fastest first]({runs_by_latency(experiment_id, parent_run_id)}) "
                  f"({PICK_COLUMNS}) · the summary as a file: `summary.md` among this run's artifacts."]
    return "\n".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(f"{c}{PAD}" for c in cells) + " |"


def tags(runs: Iterable[Any], experiment_id: str, parent_run_id: str, interpreted: bool,
         plots: Iterable[str] = ()) -> tuple[dict[str, str], Optional[str]]:
    """(the parent's tags: its description; the winner's run id, or None)."""
    views = [r if isinstance(r, RunView) else RunView(r) for r in runs]
    ok = [r for r in ranked(views) if r.ok]
    return ({NOTE: description(views, experiment_id, parent_run_id, interpreted, plots)},
            ok[0].run_id if ok else None)
