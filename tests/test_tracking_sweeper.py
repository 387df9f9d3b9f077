"""The MLflow layer against a real SQLite store, and the sweeper's job plan."""

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from convtune.errors import StoreError
from convtune.track import summary
from convtune.track.store import Tracker, resolve_uri
from hydra_plugins.convtune_sweeper.sweeper import plan_jobs
from tests import preloaded
from tests.conftest import ROOT


def test_resolve_uri_makes_relative_sqlite_paths_absolute(tmp_path):
    assert resolve_uri("sqlite:///mlruns/mlflow.db", tmp_path) == f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert (tmp_path / "mlruns").is_dir()
    assert resolve_uri("sqlite:////abs/x.db", tmp_path) == "sqlite:////abs/x.db"
    assert resolve_uri("http://localhost:5000", tmp_path) == "http://localhost:5000"


def test_runs_nest_and_read_back(store, tmp_path):
    t = Tracker(store)
    exp = t.experiment_id("tiny")
    assert t.experiment_id("tiny") == exp  # idempotent
    parent = t.start_run(exp, "sweep", {"status": "running"})
    kids = [t.start_run(exp, f"c{i}", {"status": "running"}, parent_id=parent) for i in range(2)]
    t.log(kids[0], params={"BLOCK_M": 32}, metrics={"latency_ms": 1.5, "skipped": None}, tags={"status": "ok"})
    t.log(kids[1], params={"BLOCK_M": 64}, tags={"status": "failed", "error.message": "boom"})
    t.end(kids[0], "FINISHED")
    t.end(kids[1], "FAILED")
    got = {r["run_name"]: r for r in t.children(parent)}
    assert set(got) == {"c0", "c1"}
    assert got["c0"]["status"] == "FINISHED" and got["c0"]["metrics"] == {"latency_ms": 1.5}
    assert got["c1"]["status"] == "FAILED" and got["c1"]["tags"]["error.message"] == "boom"
    t.log_text(parent, "hello", "summary.md")
    art = MlflowClient(store).list_artifacts(parent)
    assert [a.path for a in art] == ["summary.md"]
    assert str(tmp_path) in MlflowClient(store).get_experiment(exp).artifact_location  # beside the database


def test_summary_ranks_ok_runs_first_by_latency():
    def run(name, status, lat=None, **tags):
        return {"run_id": name, "params": {"BLOCK_M": name}, "metrics": {} if lat is None else {"latency_ms": lat},
                "tags": {"status": status, **tags}}
    runs = [run("a", "failed", **{"error.message": "bad"}), run("b", "ok", 2.0), run("c", "ok", 1.0),
            run("d", "incorrect")]
    assert [r.run_id for r in summary.ranked(runs)] == ["c", "b", "d", "a"]
    table = summary.markdown(runs)
    assert table.index("BLOCK_M=c") < table.index("BLOCK_M=b") < table.index("BLOCK_M=a") and "bad" in table
    assert summary.counts(runs) == {"ok": 2, "incorrect": 1, "failed": 1, "killed": 0}


def test_per_problem_table_takes_the_best_of_each_problem_and_layout_and_the_geomean_per_layout():
    def run(problem, lat, sp, layout="nchw", kernel="implicit_gemm"):
        return {"run_id": f"{problem}{lat}{layout}", "params": {"problem": problem, "problem.layout": layout,
                                                                "kernel": kernel, "BLOCK_M": "64"},
                "metrics": {"latency_ms": lat, "speedup_vs_cudnn": sp, "cudnn_nchw_ms": lat * sp,
                            "cudnn_channels_last_ms": 0.5 * lat * sp}, "tags": {"status": "ok"}}
    table = summary.per_problem([run("a", 1.0, 2.0), run("a", 2.0, 1.0), run("b", 1.0, 0.5),
                                 run("a", 0.5, 1.25, "channels_last", "nhwc_igemm")])
    lines = table.splitlines()
    assert lines[0] == ("| problem | layout | kernel | cuDNN NCHW ms | cuDNN CL ms | ours ms | speedup | TFLOPS | "
                        "% of floor | config |")
    assert lines[2].startswith("| a | nchw | implicit_gemm | 2.0000 | 1.0000 | 1.0000 | 2.00x")  # by problem, NCHW first
    assert lines[3].startswith("| a | channels_last | nhwc_igemm | 0.6250 | 0.3125 | 0.5000 | 1.25x")
    assert lines[4].startswith("| b |")
    assert "geometric mean speedup over cuDNN, nchw input: 1.00x (2 problems)" in table
    assert "geometric mean speedup over cuDNN, channels_last input: 1.25x (1 problems)" in table


def test_plan_is_a_product_by_default():
    jobs = plan_jobs({"num_stages": "1,2"}, None, ["num_warps=2,4,8"])
    assert len(jobs) == 6 and ["num_stages=1", "num_warps=2"] in jobs


def test_an_empty_config_list_is_refused_not_run_as_the_default_configuration():
    with pytest.raises(ValueError, match=r"^hydra.sweeper.configs is an empty list: no configuration to run"):
        plan_jobs(None, [], ["num_warps=2,4"])


def test_config_list_times_product_and_command_line_wins():
    jobs = plan_jobs(None, [{"BLOCK_M": 32, "num_warps": 4}, {"BLOCK_M": 64, "num_warps": 4}], ["num_warps=8", "precision=tf32,ieee"])
    assert len(jobs) == 4
    assert ["BLOCK_M=32", "num_warps=8", "precision=tf32"] in jobs  # num_warps from the command line replaces 4
    assert all(sum(o.startswith("num_warps=") for o in j) == 1 for j in jobs)


def test_a_job_composed_when_the_sweeps_values_are_checked_is_not_composed_again(monkeypatch):
    """sweep.check_sweep_values composes the jobs a one-key sweep is made of, and the diagonal of a product, as those
    jobs (the command line's single values too) and records them for this sweep alone (sweeper.COMPOSED); the
    sweeper's own check composes only the jobs not recorded. Real Hydra: the config composed as run.py would, and the
    sweeper's check with no Hydra context, so that any job it passed on to Hydra would fail."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from convtune.config import register_configs
    from convtune.errors import ConfigError
    from convtune.sweep import check_sweep_values
    from hydra_plugins.convtune_sweeper import sweeper

    register_configs()
    monkeypatch.setattr(sweeper, "COMPOSED", set())
    task = ["problem=tiny", "bench=fast", "num_warps=2,4", "BLOCK_K=16,32"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose("config", overrides=task[:2], return_hydra_config=True)
        with open_dict(config):
            config.hydra.overrides.task = task
        with pytest.raises(ConfigError, match="BLOCK_M='abc' is not allowed"):
            check_sweep_values(config, plan_jobs(None, None, task[:2] + ["BLOCK_M=16,abc"]))
        assert sweeper.COMPOSED == {frozenset(task[:2] + ["BLOCK_M=16"])}  # the job that composes, not the other
        one_key = plan_jobs(None, None, task[:3])
        check_sweep_values(config, one_key)  # another sweep: the one before is forgotten
        assert sweeper.COMPOSED == {frozenset(job) for job in one_key}
        two_keys = plan_jobs(None, None, task)  # 4 jobs; its 2 columns (each key's i-th value) are 2 of them
        check_sweep_values(config, two_keys)
        diagonal = [job for job in two_keys if {"num_warps=2", "BLOCK_K=16"} <= set(job)
                    or {"num_warps=4", "BLOCK_K=32"} <= set(job)]
        assert len(diagonal) == 2 and sweeper.COMPOSED == {frozenset(job) for job in diagonal}

    check = sweeper.ConvtuneSweeper()  # no Hydra context: a job it composes raises
    check.validate_batch_is_legal(diagonal)
    with pytest.raises(AttributeError):
        check.validate_batch_is_legal(two_keys)


@pytest.mark.slow
def test_four_sweeps_started_at_once_in_the_default_folder_never_cross(tmp_path, new_store):
    """Before the store was created under a lock into a temporary file, 4 sweeps at once broke a new store
    for good ("table _alembic_tmp_latest_metrics already exists") and 2-3 lost whole sweeps. And before each sweep
    had a folder of its own, sweeps started in the same second shared Hydra's default folder and its
    state file: one parent collected 12 children of 4 sweeps, 4 of 6 parents stayed RUNNING, all exited 0. Here no
    hydra.sweep.dir is given: every sweep takes the default."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    procs = [preloaded.popen([sys.executable, str(ROOT / "run.py"), "-m", "problem=tiny", "bench=fast",
                              "num_warps=2,4", f"tracking.uri={new_store}", f"pins_file={tmp_path / 'pins.yaml'}"],
                             cwd=tmp_path, env=env)
             for _ in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs if "Error" in err]
    c = MlflowClient(new_store)
    runs = c.search_runs([c.get_experiment_by_name("tiny [interpreter]").experiment_id], max_results=1000)
    parents = {r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags}
    children = [r for r in runs if r.info.run_id not in parents]
    assert len(parents) == 4 and len(children) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert all(r.data.tags["status"] == "ok" for r in children)
    per_parent = {p: sum(r.data.tags["mlflow.parentRunId"] == p for r in children) for p in parents}
    assert sorted(per_parent.values()) == [2] * 4, per_parent
    folders = {r.data.tags["sweep_dir"] for r in runs if r.info.run_id in parents}
    assert len(folders) == 4 and all(Path(f).parts[:2] == ("outputs", "sweeps") for f in folders)
    assert all((tmp_path / f / "convtune_sweep.json").exists() for f in folders)
    for out, _ in outs:  # each printed summary lists its own two runs only
        table = out[out.index("| rank"):] if "| rank" in out else out
        assert sum(line.startswith("| ") and "num_warps=" in line for line in table.splitlines()) == 2, out
    path = new_store[len("sqlite:///"):]
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_experiments_open_on_the_runs_table_in_the_mlflow_ui(store):
    t = Tracker(store)
    exp = t.client.get_experiment(t.experiment_id("fresh"))
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    old = t.client.create_experiment("made elsewhere")  # no kind: the UI's GenAI view
    assert t.experiment_id("made elsewhere") == old
    assert t.client.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"


@pytest.mark.parametrize("make_uri,why", [
    (lambda d: "bogus://x", "unsupported scheme; use sqlite:///path/to/mlflow.db"),
    (lambda d: (d / "garbage.db").write_text("not a database") and f"sqlite:///{d / 'garbage.db'}",
     "not an SQLite database (file is not a database)"),
    (lambda d: "http://127.0.0.1:9", "no MLflow server answers there"),  # port 9 (discard): nothing listens
    # a closed database port: refused at once, where MLflow's engine retries took 118 s; the password is not shown
    (lambda d: "postgresql://convtune:secret@127.0.0.1:9/mlflow", "no database server takes connections at "
                                                                  "127.0.0.1:9 (Connection refused)"),
], ids=["scheme", "garbage-file", "unreachable-server", "closed-database-port"])
def test_a_store_that_cannot_be_used_fails_at_once_in_one_line(tmp_path, make_uri, why):
    uri = make_uri(tmp_path)
    start = time.monotonic()
    with pytest.raises(StoreError) as e:
        Tracker(uri)
    shown = uri.replace(":secret@", ":***@")
    assert str(e.value).startswith(f"tracking.uri={shown!r} cannot be used: {why}") and "\n" not in str(e.value)
    # MLflow's own retries took 254 s against an unreachable server; one retry at 5 s a request is ~1.5 s here.
    # The bound is loose on purpose: it catches the retry storm, not a slow machine.
    assert time.monotonic() - start < 90


def test_an_unwritable_sqlite_folder_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match=r"cannot be used: cannot create the folder .*/file/sub"):
        resolve_uri(f"sqlite:///{blocker}/sub/mlflow.db", tmp_path)


def test_a_sweeps_run_name_says_what_it_varies_then_when():
    from convtune.sweep import browse_hint, sweep_run_name

    noon = time.mktime((2026, 11, 22, 12, 5, 0, 0, 0, -1))
    assert sweep_run_name(["problem=tiny", "num_warps=2,4", "BLOCK_M=48,32", "tracking.uri=sqlite:///x"], noon) == \
        "num_warps=2,4 BLOCK_M=48,32 · 11-22 12:05"
    assert sweep_run_name(["+experiment=seed_configs", "problem=tiny"], noon) == "+experiment=seed_configs · 11-22 12:05"
    assert sweep_run_name(["problem=tiny"], noon) == "sweep · 11-22 12:05"
    assert sweep_run_name(["+experiment=candidates", "problem=tiny", "problem.name=resnet50_layer1_0_conv1",
                           "problem.batch=32"], noon) == "resnet50_layer1_0_conv1 +experiment=candidates · 11-22 12:05"
    assert browse_hint("http://10.0.0.5:5000/", "7") == \
        "browse: http://10.0.0.5:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert browse_hint("http://10.0.0.5:5000/", "7", "abc").splitlines() == [
        "browse: http://10.0.0.5:5000/#/experiments/7/runs/abc?workflowType=machine_learning",
        "runs by latency: http://10.0.0.5:5000/#/experiments/7/runs?workflowType=machine_learning&searchFilter="
        "tags.mlflow.parentRunId%20%3D%20%27abc%27&orderByKey=metrics.%60latency_ms%60&orderByAsc=true",
        # MLflow's runs table reads sort and filter from a link, never columns: the line says which to pick
        "  (sorted by latency_ms; MLflow's runs table takes no columns from a link: pick Columns → Metrics → "
        "latency_ms there)"]
    # a path with a space is quoted, so the printed command runs as it is pasted
    assert browse_hint("sqlite:////data/my runs/mlflow.db", "7").startswith(
        "browse: mlflow ui --backend-store-uri 'sqlite:////data/my runs/mlflow.db'   then http://127.0.0.1:5000/")


def test_a_childs_run_name_puts_what_the_sweep_varies_first():
    from convtune.resolve import resolve
    from convtune.sweep import varied_keys
    from tests.conftest import compose

    jobs = [["problem=tiny", "num_warps=2", "precision=ieee"], ["problem=tiny", "num_warps=4", "precision=ieee"],
            ["problem=tiny", "num_warps=2", "+precision=tf32"]]
    assert varied_keys(jobs) == ["num_warps", "precision"]
    setup = resolve(compose("problem=tiny", "num_warps=2", "precision=ieee"))
    assert setup.run_name(["num_warps", "precision"]) == "w2-ieee · M128-N64-K32-s3"
    assert setup.run_name(["problem", "BLOCK_K"]) == "tiny-K32 · M128-N64-w2-s3"
    assert setup.run_name() == "M128-N64-K32-w2-s3"  # a single run: the configuration as Triton spells it


def _state(store, status="RUNNING"):
    from convtune.sweep_state import SweepState

    t = Tracker(store)
    exp = t.experiment_id("tiny [interpreter]")
    parent = t.start_run(exp, "a sweep", {})  # this process's tags: alive while the test runs
    if status != "RUNNING":
        t.end(parent, status)
    return SweepState(parent, exp, "tiny [interpreter]", store, 2)


def test_a_sweep_folder_in_use_by_a_running_sweep_is_refused_and_an_ended_ones_is_taken(tmp_path, store):
    from convtune.sweep import _still_running
    from convtune.sweep_state import STATE_FILE, SweepCrossed, claim_folder

    running = _state(store)
    running.save(tmp_path / "busy")
    with pytest.raises(SweepCrossed, match=rf"sweep folder .*busy is in use by sweep {running.parent_run_id}, still "
                                           r"running: give this sweep another hydra.sweep.dir"):
        claim_folder(tmp_path / "busy", _still_running)
    assert json.loads((tmp_path / "busy" / STATE_FILE).read_text())["parent_run_id"] == running.parent_run_id
    ended = _state(store, "FINISHED")
    ended.save(tmp_path / "rerun")
    claim_folder(tmp_path / "rerun", _still_running)  # a rerun into the folder of a sweep that has ended
    assert (tmp_path / "rerun" / STATE_FILE).read_text() == "{}"
    with pytest.raises(SweepCrossed, match="claimed by another sweep starting at the same moment"):
        claim_folder(tmp_path / "rerun", _still_running)  # a fresh claim not yet filled: another sweep starting


def test_a_job_refuses_a_state_file_of_another_sweep(tmp_path, store, monkeypatch):
    from convtune.sweep_state import SWEEP_ENV, SweepCrossed, SweepState

    theirs = _state(store)
    theirs.save(tmp_path)
    monkeypatch.setenv(SWEEP_ENV, "my-parent-run")
    with pytest.raises(SweepCrossed, match=rf"holds sweep {theirs.parent_run_id}'s state, not this job's sweep "
                                           r"my-parent-run: two sweeps share one folder"):
        SweepState.of_this_sweep(tmp_path)
    monkeypatch.setenv(SWEEP_ENV, theirs.parent_run_id)
    assert SweepState.of_this_sweep(tmp_path) == theirs


def test_latency_tflops_and_gbps_are_a_runs_first_metrics_as_mlflow_lists_them(store):
    """MLflow's compare view colours its parallel-coordinates plot by a run's first metric (it was rel_err)."""
    t = Tracker(store)
    run = t.start_run(t.experiment_id("order"), "r", {})
    t.log(run, metrics={"rel_err": 1e-4, "compile_s": 2.0, "gbps": 3.0, "latency_ms": 0.29, "tflops": 185.0})
    assert list(t.client.get_run(run).data.metrics)[:3] == ["latency_ms", "tflops", "gbps"]


def test_a_sweep_folder_that_cannot_be_made_or_written_is_refused_in_one_line(tmp_path):
    """A file, a path through a file, or a folder this process cannot make there: one line (exit 2 from the sweep's
    callback), where Hydra's sweeper gave a traceback of 20 lines."""
    from convtune.errors import ConfigError
    from convtune.sweep import check_sweep_dir

    (tmp_path / "a-file").write_text("")
    for where, why in ((tmp_path / "a-file", "File exists"), (tmp_path / "a-file" / "sub", "Not a directory"),
                       (Path("/proc/convtune-sweep"), "No such file or directory")):
        with pytest.raises(ConfigError) as e:
            check_sweep_dir(where)
        assert str(e.value) == (f"hydra.sweep.dir='{where}' is not allowed: a folder this process can make and write "
                                f"in ({why}: {where})")
    check_sweep_dir(tmp_path / "new" / "sweep")
    assert list((tmp_path / "new" / "sweep").iterdir()) == []  # made, and its probe file gone
