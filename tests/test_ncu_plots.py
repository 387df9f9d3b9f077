"""NCU output parsing (a real capture from an H200) and the sweep plots, on the CPU."""

from pathlib import Path

import pytest

from convtune.measure import ncu
from convtune.track import plots

CAPTURE = Path(__file__).parent / "data" / "ncu_capture.csv"  # `ncu --set full` over the suite on an H200


def test_parse_a_captured_ncu_csv():
    got = ncu.parse_csv(CAPTURE.read_text())
    assert set(got) == set(ncu.COUNTERS)
    assert got["launch__grid_size"] == 6 and got["dram__bytes_read.sum"] == 30976  # "30,976" in the file
    assert got["lts__t_sector_hit_rate.pct"] == pytest.approx(92.60)
    assert ncu.metric_name("lts__t_sector_hit_rate.pct") == "ncu.lts__t_sector_hit_rate.pct"


def test_parse_ignores_profiler_chatter_and_foreign_metrics():
    text = ('==PROF== Connected to process 1\n"ID","Metric Name","Metric Unit","Metric Value"\n'
            '"0","gpu__time_duration.sum","ns","1,000"\n"0","launch__grid_size","","48,400"\n')
    assert ncu.parse_csv(text) == {"launch__grid_size": 48400.0}


def run(cfg, ms, tflops, warps, **metrics):
    return {"run_id": cfg, "params": {"BLOCK_M": cfg, "num_warps": warps, "problem": "p"},
            "metrics": {"latency_ms": ms, "latency_p20_ms": ms * 0.99, "latency_p80_ms": ms * 1.01, "tflops": tflops,
                        "arithmetic_intensity": 119.5, **metrics}, "tags": {"status": "ok"}}


def test_plots_draw_every_ok_configuration_and_both_roofs(tmp_path):
    runs = [run("64", 0.52, 104.0, "8", peak_tflops=494.7, peak_gbps=4800.0, measured_peak_tflops=411.0,
                measured_peak_gbps=4275.0, ncu_arithmetic_intensity=126.0),
            run("128", 0.53, 102.0, "4"), {"run_id": "x", "params": {}, "metrics": {}, "tags": {"status": "failed"}}]
    fig = plots.roofline(runs, "t")
    ax = fig.axes[0]
    assert len(ax.collections) == 2  # one point per ok run, none for the failed one
    assert sorted(line.get_label() for line in ax.get_lines()) == [
        "datasheet roof: 495 TFLOP/s, 4800 GB/s", "measured roof: 411 TFLOP/s, 4275 GB/s"]
    lat = plots.latency_by_config(runs, "t")
    assert len(lat.axes[0].patches) == 2
    assert lat.get_size_inches()[1] >= 3.5  # two configurations still get a readable height
    lat.canvas.draw()
    legend, bars = lat.axes[0].get_legend().get_window_extent(), lat.axes[0].get_window_extent()
    assert legend.x0 >= bars.x1  # the legend sits beside the bars, not over them
    fig.savefig(tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000
    assert plots.roofline([runs[2]], "t") is None


def test_the_rooflines_log_axes_are_labelled_in_plain_text():
    """The labels matplotlib places on the roofline's log axes, as plain numbers (plots._PlainLogFormatter: mathtext's
    parser was a third of a sweep's drawing time), distinct on a range narrower than a decade."""
    fig = plots.roofline([run("64", 0.52, 7.2e-6, "8"), run("128", 0.53, 7.9e-6, "4")], "t")
    fig.canvas.draw()
    ax = fig.axes[0]
    for labels in ([t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True)],
                   [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True)]):
        shown = [text for text in labels if text]
        assert shown and not any("$" in text for text in shown), labels
        assert len(shown) == len(set(shown)), shown
    assert "7.5e\u221206" in [t.get_text() for t in ax.get_yticklabels(minor=True)]


def test_the_profiled_process_compiles_at_the_measured_runs_level_so_its_first_launch_is_the_real_one(monkeypatch):
    # left on auto, a new binary's first launch is llvm_opt's one-time check on one image: ncu would profile that
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("CONVTUNE_LLVM_OPT", raising=False)
    env = ncu.profile_env({"llvm_opt": "O0"})
    assert env["CONVTUNE_LLVM_OPT"] == "O0" and "TRITON_INTERPRET" not in env
    assert "CONVTUNE_LLVM_OPT" not in ncu.profile_env({"llvm_opt": "none"})  # the interpreter: nothing to force


def test_the_importance_view_draws_latency_against_each_parameter_the_sweep_varied():
    runs = [run("64", 0.52, 104.0, "8"), run("64", 0.61, 90.0, "4"), run("128", 0.55, 99.0, "8"),
            run("128", 0.70, 80.0, "4")]
    fig = plots.latency_by_parameter(runs, "t")
    assert [ax.get_xlabel() for ax in fig.axes] == ["BLOCK_M", "num_warps"]  # the varied ones, in Meta's order
    warps = fig.axes[1]
    assert [t.get_text() for t in warps.get_xticklabels()] == ["4", "8"]
    assert list(warps.get_lines()[0].get_ydata()) == pytest.approx([0.655, 0.535])  # the median of each value
    assert plots.latency_by_parameter([run("64", 0.52, 104.0, "8")], "t") is None  # nothing varied


def test_every_plots_titles_lie_inside_its_picture():
    """The importance view of a sweep that varied one parameter was a 3.8-inch figure with its title cut at both
    ends in the PNG itself."""
    long = "kernelbench_l1_50 · NVIDIA H100 80GB HBM3 · tf32"
    runs = [run("64", 0.52, 104.0, "8"), run("64", 0.61, 90.0, "4")]  # num_warps alone varies
    for fig in (plots.latency_by_parameter(runs, long), plots.latency_by_config(runs, long),
                plots.roofline(runs, long)):
        fig.canvas.draw()
        renderer, box = fig.canvas.get_renderer(), fig.bbox
        titles = [t for t in [fig._suptitle] + [ax.title for ax in fig.axes] if t is not None and t.get_text()]
        assert titles
        for t in titles:
            e = t.get_window_extent(renderer)
            assert box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1, (t.get_text(), e, box)
