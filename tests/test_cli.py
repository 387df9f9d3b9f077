"""Real `python run.py` subprocesses (Triton interpreter) writing to a temp SQLite store, read back with MLflow."""

import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from convtune import record
from tests.conftest import ROOT

# candidates runs in tests/test_tune_model.py, once per shape of a model, with what it swept and promoted checked
PRESETS = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml") if p.stem != "candidates")


def runs_of(store, experiment="tiny [interpreter]"):
    c = MlflowClient(store)
    exp = c.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r}"
    return c, c.search_runs([exp.experiment_id], max_results=1000)


def every_run(store):
    c = MlflowClient(store)
    return c.search_runs([e.experiment_id for e in c.search_experiments()], max_results=1000)


@pytest.mark.slow
def test_single_run_logs_params_metrics_tags_and_config(run_cli, store):
    r = run_cli("problem=tiny", "bench=fast", "BLOCK_M=16", "precision=ieee")
    assert r.returncode == 0, r.stderr
    # BLOCK_M as given; the rest is implicit_gemm's default for tiny's class (20 channels → BLOCK_N=64)
    assert "[1/1] BLOCK_M=16 BLOCK_N=64 BLOCK_K=32 num_warps=4 num_stages=3 →" in r.stdout and "ok" in r.stdout
    c, runs = runs_of(store)
    (run,) = runs
    assert run.info.status == "FINISHED"
    p, m, t = run.data.params, run.data.metrics, run.data.tags
    assert (p["BLOCK_M"], p["BLOCK_N"], p["num_warps"], p["precision"], p["kernel"]) == ("16", "64", "4", "ieee", "implicit_gemm")
    assert (p["problem.batch"], p["problem.stride"], p["problem.out_h"], p["bench.rounds"]) == ("2", "[2, 1]", "10", "1")
    assert m["rel_err"] < 1e-5 and m["latency_ms"] > 0 and m["latency_p20_ms"] <= m["latency_ms"] <= m["latency_p80_ms"]
    assert {"tflops", "gbps", "latency_cv", "compile_s"} <= set(m)
    assert "speedup_vs_cudnn" not in m and "pct_peak_tflops" not in m  # no GPU: no cuDNN, no peak
    assert (t["status"], t["device"], t["compute_capability"]) == ("ok", "interpreter", "none")
    assert len(t["kernel_source_hash"]) == 12 and t["git_dirty"] in ("True", "False", "unknown")
    assert {"torch_version", "triton_version", "git_commit", "problem_key"} <= set(t)
    assert "config.yaml" in [a.path for a in c.list_artifacts(run.info.run_id)]
    assert_declared(run)


def assert_declared(run):
    """Every name a run wrote is declared by the run record (convtune/record.py), so readers can rely on it."""
    for kind, names in (("tags", run.data.tags), ("params", run.data.params), ("metrics", run.data.metrics)):
        assert record.undeclared(kind, names) == [], (kind, record.undeclared(kind, names))


@pytest.mark.slow
def test_multirun_gives_one_parent_and_a_child_per_config(run_cli, new_store):
    store = new_store  # the sweep's callback creates the store, once, before any job starts
    r = run_cli("-m", "problem=tiny", "bench=fast", "num_warps=2,4", uri=store)
    assert r.returncode == 0, r.stderr
    folder = Path(store[len("sqlite:///"):]).parent  # a WAL store: its last connection, closed, folds the WAL in
    assert (folder / "mlflow.db").exists() and not list(folder.glob("mlflow.db-*"))  # no -wal, no -shm left
    assert "[1/2]" in r.stdout and "[2/2]" in r.stdout
    c, runs = runs_of(store)
    parents = [x for x in runs if "mlflow.parentRunId" not in x.data.tags]
    children = [x for x in runs if x.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == 2 and len(runs) == 3
    assert sorted(x.data.params["num_warps"] for x in children) == ["2", "4"]
    # what the sweep varies first: the MLflow UI shows ~13 characters of a child's name
    assert sorted(x.info.run_name for x in children) == ["w2 · M128-N64-K32-s3", "w4 · M128-N64-K32-s3"]
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.metrics["n_ok"] == 2
    assert re.fullmatch(r"num_warps=2,4 · \d\d-\d\d \d\d:\d\d", parent.info.run_name)  # what it varies, first
    eid, pid = parent.info.experiment_id, parent.info.run_id
    assert (f"browse: mlflow ui --backend-store-uri {store}   then http://127.0.0.1:5000/#/experiments/{eid}/runs/"
            f"{pid}?workflowType=machine_learning\nruns by latency: http://127.0.0.1:5000/#/experiments/{eid}/runs?"
            "workflowType=machine_learning&searchFilter=tags.mlflow.parentRunId%20%3D%20%27") in r.stdout
    assert "&orderByKey=metrics.%60latency_ms%60&orderByAsc=true" in r.stdout
    assert parent.data.tags["best_run_id"] in {x.info.run_id for x in children}
    # the parent's Overview is the dashboard: the ranked table, the winner marked and tagged, the interpreter said
    note = parent.data.tags["mlflow.note.content"]
    best = parent.data.tags["best_run_id"]
    assert "CPU host times through Triton's interpreter" in note and "| ★ 1&nbsp;&nbsp; | [" in note
    assert f"(#/experiments/{eid}/runs/{best}?workflowType=machine_learning)" in \
        note.split("| ★ 1&nbsp;&nbsp; |")[1].split("\n")[0]
    # every cell ends with two no-break spaces: the MLflow UI pads no table cell ("vs cuDNNcorrect")
    assert ("| latency ms&nbsp;&nbsp; | p20–p80 ms&nbsp;&nbsp; | TFLOPS&nbsp;&nbsp; | GB/s&nbsp;&nbsp; |" in note
            and "| vs cuDNN&nbsp;&nbsp; | correct&nbsp;&nbsp; |" in note and "![latency.png](get-artifact?path=" in note)
    assert [x.data.tags.get("convtune.winner") for x in children if x.info.run_id == best] == ["true"]
    assert [x.data.tags.get("convtune.winner") for x in children if x.info.run_id != best] == [None]
    assert {"summary.md", "multirun.yaml", "roofline.png", "latency.png"} <= {a.path for a in c.list_artifacts(parent.info.run_id)}
    summary = Path(c.download_artifacts(parent.info.run_id, "summary.md")).read_text()
    assert summary.count("| ok ") == 2 and "num_warps=2" in summary and "| rank " in r.stdout
    for run in runs:
        assert_declared(run)


@pytest.mark.slow
def test_a_bad_config_fails_alone_and_the_sweep_goes_on(run_cli, store):
    r = run_cli("-m", "problem=tiny", "bench=fast", "BLOCK_M=48,16")
    assert r.returncode == 0, r.stderr
    assert "BLOCK_M=48 is not allowed: a power of two" in r.stdout
    _, runs = runs_of(store)
    by_m = {x.data.params.get("BLOCK_M"): x for x in runs if "mlflow.parentRunId" in x.data.tags}
    assert by_m["48"].info.status == "FAILED" and by_m["48"].data.tags["status"] == "failed"
    assert by_m["48"].data.tags["error.type"] == "ConfigError"
    assert by_m["48"].data.tags["error.message"].startswith("BLOCK_M=48 is not allowed")
    assert by_m["16"].info.status == "FINISHED" and by_m["16"].data.tags["status"] == "ok"


@pytest.mark.slow
def test_a_single_bad_run_exits_nonzero_with_one_clear_line(run_cli, store):
    r = run_cli("problem=tiny", "bench=fast", "BLOCK_M=48")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == "error: BLOCK_M=48 is not allowed: a power of two from 16 to 256 (tl.dot needs >= 16)"
    assert "Traceback" not in r.stderr
    _, runs = runs_of(store)
    assert [x.info.status for x in runs] == ["FAILED"]


BRIEF_NINE = sorted([(32, 32, 32, 4, 1), (32, 32, 32, 4, 2), (64, 32, 32, 4, 1), (64, 32, 32, 4, 2), (32, 64, 32, 4, 1),
                     (32, 64, 32, 4, 2), (64, 64, 32, 4, 1), (64, 64, 32, 4, 2), (64, 64, 16, 4, 3)])


GPU_PRESETS = {"vs_cudnn"}


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_runs_on_tiny(run_cli, store, preset):
    # A GPU preset is refused without a GPU (test_config.py; a refusal in the sweep's callback is one line, exit 2,
    # nothing started: the typo and wrong-type tests below); with requires_gpu=false it still runs, as before.
    gpu_only = preset in GPU_PRESETS
    # without TRITON_INTERPRET, as a user without a GPU runs it: the command settles the interpreter itself
    r = run_cli(f"+experiment={preset}", "problem=tiny", "bench=fast", *(["requires_gpu=false"] if gpu_only else []),
                timeout=900, interpret_env=False)
    assert r.returncode == 0, r.stderr
    experiment = re.search(r"MLflow experiment '([^']+)'", r.stdout).group(1)
    assert experiment.endswith(" [interpreter]")
    _, runs = runs_of(store, experiment)
    children = [x for x in runs if "mlflow.parentRunId" in x.data.tags]
    assert children and all(x.info.status == "FINISHED" for x in children), [x.data.tags.get("error.message") for x in children]
    if preset == "seed_configs":  # exactly the nine configurations of the brief's autotune list
        got = sorted(tuple(int(x.data.params[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))
                     for x in children)
        assert got == BRIEF_NINE


def test_a_typo_added_with_plus_is_refused_before_a_sweep_starts(run_cli, store):
    r = run_cli("-m", "+num_warp=2,8", "problem=tiny")  # Hydra's own advice for an unknown key is the `+`
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == ("error: num_warp='2,8' is not allowed: not a convtune key (did you "
                                                 "mean num_warps?); see the configuration keys in docs/CONFIGURATION.md")
    assert every_run(store) == []  # nothing started, nothing left RUNNING


@pytest.mark.slow
def test_a_rerun_sweep_resumes_what_was_measured_alike_unless_resume_is_false(run_cli, run_here, store):
    assert run_here("problem=tiny", "bench=fast", "num_warps=4")[0] == 0  # measured once, here, by a single run
    c, (first,) = runs_of(store)
    r = run_cli("-m", "problem=tiny", "bench=fast", "num_warps=4,2")
    assert r.returncode == 0, r.stderr
    assert f"resumed: measured alike in run {first.info.run_id} (resume=false measures it again)" in r.stderr + r.stdout
    assert "1 of 2 configuration(s) resumed" in r.stdout and f"resumed from {first.info.run_id[:8]}" in r.stdout
    (again,) = [x for x in runs_of(store)[1] if x.data.tags.get("resumed_from") == first.info.run_id]
    assert again.info.status == "FINISHED" and again.data.metrics["latency_ms"] == first.data.metrics["latency_ms"]
    assert again.data.params == first.data.params and again.data.tags["status"] == "ok"
    newest_parent = c.get_run(again.data.tags["mlflow.parentRunId"])
    assert newest_parent.data.metrics["n_resumed"] == 1 and newest_parent.data.metrics["n_ok"] == 2
    assert_declared(again)
    r = run_cli("-m", "problem=tiny", "bench=fast", "num_warps=4", "resume=false")
    assert r.returncode == 0 and "resumed" not in r.stdout + r.stderr
    measured = [x for x in runs_of(store)[1] if x.data.params.get("num_warps") == "4" and "resumed_from" not in x.data.tags]
    assert len(measured) == 2  # the first run's and this sweep's


@pytest.mark.slow
def test_a_store_that_cannot_be_used_is_one_line_for_a_run_and_stops_a_sweep_before_it_starts(run_cli, tmp_path):
    line = ("error: tracking.uri='bogus://x' cannot be used: unsupported scheme; use sqlite:///path/to/mlflow.db, "
            "http(s)://host:port (an MLflow server) or a database URI (postgresql://...)")
    r = run_cli("problem=tiny", uri="bogus://x")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == line and "Traceback" not in r.stderr
    r = run_cli("-m", "problem=tiny", "num_warps=2,4", uri="bogus://x")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == line and "#0" not in r.stdout + r.stderr
    r = run_cli("problem=tiny", uri="http://127.0.0.1:9")  # port 9 (discard): nothing listens
    assert r.returncode == 1 and (r.stdout + r.stderr).strip().splitlines() == [
        "error: tracking.uri='http://127.0.0.1:9' cannot be used: no MLflow server answers there within 15 s (is "
        "`mlflow server` running, not stopped, and is the address right?)"]  # no urllib3 "Retrying ..." line


def test_a_sweep_value_of_the_wrong_type_is_refused_before_any_job(run_cli, store):
    r = run_cli("-m", "problem=tiny", "bench=fast", "num_warps=2,4", "BLOCK_M=16,abc")  # abc composed with num_warps=4 first
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == ("error: BLOCK_M='abc' is not allowed: the sweep cannot run it (Value "
                                                 "'abc' of type 'str' could not be converted to Integer)")
    assert every_run(store) == []  # before: the parent was left RUNNING
