"""`hydra/sweeper=search` (convtune.launch.search): an Optuna study over the sweep's values with a budget of distinct
configurations, failed configurations as failed trials, nothing measured twice, and a study that resumes,
after an interrupt too. Real subprocesses of run.py, a real SQLite MLflow store, a real Optuna SQLite storage,
the Triton interpreter on the tiny problem."""

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests import preloaded
from tests.conftest import ROOT

SPACE = ("BLOCK_M=16,32", "num_warps=1,2")


def search(run_cli, tmp_path, *args, **kw):
    return run_cli("-m", "hydra/sweeper=search", "problem=tiny", "bench=fast",
                   f"hydra.sweeper.storage=sqlite:///{tmp_path / 'optuna.db'}", "hydra.sweeper.study_name=s", *args, **kw)


def study(tmp_path):
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def children(store):
    c = MlflowClient(store)
    exp = c.get_experiment_by_name("tiny [interpreter]")
    runs = c.search_runs([exp.experiment_id]) if exp is not None else []
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def config_of(run):
    return (run.data.params["BLOCK_M"], run.data.params["num_warps"])


@pytest.mark.slow
def test_a_search_runs_its_budget_of_distinct_configurations_and_resumes_to_the_end_of_the_space(run_cli, store, tmp_path):
    r = search(run_cli, tmp_path, "hydra.sweeper.n_trials=3", *SPACE)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "0 of 3 configurations run before; 3 to go, out of 4 in the space" in r.stdout
    runs = children(store)
    assert len(runs) == 3 and len({config_of(x) for x in runs}) == 3
    assert all(x.data.tags["status"] == "ok" for x in runs)
    trials = study(tmp_path).trials
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 3 and all(t.value > 0 for t in done)  # the latency each job returned
    assert sorted(t.value for t in done) == sorted(x.data.metrics["latency_ms"] for x in runs)
    c = MlflowClient(store)
    (parent,) = [x for x in c.search_runs([runs[0].info.experiment_id]) if "mlflow.parentRunId" not in x.data.tags]
    assert parent.data.tags["total_jobs"] == "3"  # the budget, once the search knows it (tagged "?" at the start)

    r = search(run_cli, tmp_path, "hydra.sweeper.n_trials=10", *SPACE)  # the same study, a larger budget
    assert r.returncode == 0, r.stderr[-3000:]
    assert "3 of 10 configurations run before; 1 to go, out of 4 in the space" in r.stdout
    assert "1 configuration(s) run by this sweep, 4 in the study (0 failed); the space is exhausted" in r.stdout
    runs = children(store)
    assert len(runs) == 4 and len({config_of(x) for x in runs}) == 4  # the fourth is the one left


@pytest.mark.slow
def test_a_failing_configuration_is_a_failed_trial_and_is_not_run_again(run_cli, store, tmp_path):
    r = search(run_cli, tmp_path, "hydra.sweeper.n_trials=5", "BLOCK_M=16,24")  # 24: refused by the kernel's checks
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 configuration(s) run by this sweep, 2 in the study (1 failed)" in r.stdout
    # BLOCK_M's values are numbers: an ordered dimension, whose trial param is the index of the value
    states = {("16", "24")[t.params["BLOCK_M"]]: t.state for t in study(tmp_path).trials if not t.user_attrs.get("repeat_of")}
    assert states == {"16": TrialState.COMPLETE, "24": TrialState.FAIL}
    assert {x.data.params["BLOCK_M"]: x.data.tags["status"] for x in children(store)} == {"16": "ok", "24": "failed"}
    r = search(run_cli, tmp_path, "hydra.sweeper.n_trials=5", "BLOCK_M=16,24")
    assert r.returncode == 0 and "2 of 5 configurations run before; 0 to go" in r.stdout and len(children(store)) == 2


@pytest.mark.slow
def test_a_configuration_the_store_holds_is_read_back_not_measured(run_cli, run_here, store, tmp_path):
    for block in (16, 32):  # measured first, by single runs in this process
        assert run_here("problem=tiny", "bench=fast", f"BLOCK_M={block}")[0] == 0
    c = MlflowClient(store)
    grid = {x.data.params["BLOCK_M"]: x.info.run_id
            for x in c.search_runs([c.get_experiment_by_name("tiny [interpreter]").experiment_id])}
    r = search(run_cli, tmp_path, "hydra.sweeper.n_trials=2", "BLOCK_M=16,32")
    assert r.returncode == 0, r.stderr[-3000:]
    searched = [x for x in children(store) if x.info.run_id not in grid.values()]
    assert len(searched) == 2
    assert {x.data.params["BLOCK_M"]: x.data.tags.get("resumed_from") for x in searched} == grid


@pytest.mark.slow
def test_a_trial_an_interrupt_left_open_is_run_again_when_the_study_resumes(run_cli, store, tmp_path):
    marker = tmp_path / "paused"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CONVTUNE_PAUSE_AT": "job_running:2",
           "CONVTUNE_PAUSE_FILE": str(marker)}
    cmd = [sys.executable, "run.py", "-m", "hydra/sweeper=search", "problem=tiny", "bench=fast",
           f"hydra.sweeper.storage=sqlite:///{tmp_path / 'optuna.db'}", "hydra.sweeper.study_name=s",
           "hydra.sweeper.n_trials=3", *SPACE, f"tracking.uri={store}", f"pins_file={tmp_path / 'pins.yaml'}",
           f"hydra.sweep.dir={tmp_path / 'sweep0'}"]
    sweep = preloaded.popen(cmd, cwd=ROOT, env=env, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the second trial never reached its pause point"
        sweep.send_signal(signal.SIGINT)
        out, _ = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 130, out[-3000:]
    open_trials = [t for t in study(tmp_path).trials if t.state == TrialState.RUNNING]
    assert len(open_trials) == 1
    interrupted = open_trials[0].params

    r = search(run_cli, tmp_path, "hydra.sweeper.n_trials=3", *SPACE)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 of 3 configurations run before, 1 left open by an interrupt run again; 2 to go" in r.stdout
    trials = [t for t in study(tmp_path).trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 3 and interrupted in [t.params for t in trials]
    statuses = sorted(x.data.tags["status"] for x in children(store))
    assert statuses == ["killed", "ok", "ok", "ok"]  # the interrupted run kept as KILLED, then measured again


@pytest.mark.slow
def test_a_search_fills_every_gpu_slot_of_the_gpus_launcher_in_batches(run_cli, store, tmp_path):
    r = search(run_cli, tmp_path, "hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]", "hydra.sweeper.batch_size=2",
               "hydra.sweeper.n_trials=3", *SPACE)
    assert r.returncode == 0, r.stderr[-3000:]
    said = r.stdout + r.stderr  # a batch of 2 on both slots, then the last trial alone
    assert said.count("Launching 2 jobs, one process each, on 2 GPU(s) (0, 1)") == 1
    assert said.count("Launching 1 jobs, one process each, on 2 GPU(s) (0, 1)") == 1
    runs = children(store)
    assert len(runs) == 3 and len({config_of(x) for x in runs}) == 3 and all(x.data.tags["status"] == "ok" for x in runs)
    assert {x.data.tags["gpu_slot"] for x in runs} == {"0", "1"}
    assert sum(t.state == TrialState.COMPLETE for t in study(tmp_path).trials) == 3
    assert (tmp_path / "sweep" / "multirun.yaml").exists()


def test_numeric_values_are_an_ordered_dimension_and_others_categorical():
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from convtune.launch.search import parse_space

    space = parse_space(["problem=tiny", "BLOCK_M=64,16,32", "precision=tf32,ieee", "num_warps=4"])
    assert space.fixed == ("problem=tiny", "num_warps=4") and space.size() == 6
    assert space.choices["BLOCK_M"] == ("16", "32", "64")  # sorted as numbers
    d = space.distributions()
    assert d["BLOCK_M"] == IntDistribution(0, 2) and d["precision"] == CategoricalDistribution(["tf32", "ieee"])
    assert space.decode({"BLOCK_M": 2, "precision": "ieee"}) == {"BLOCK_M": "64", "precision": "ieee"}
    assert space.encode({"BLOCK_M": "64", "precision": "ieee"}) == {"BLOCK_M": 2, "precision": "ieee"}
    assert space.overrides({"BLOCK_M": "64", "precision": "ieee"}) == ["problem=tiny", "num_warps=4", "BLOCK_M=64",
                                                                        "precision=ieee"]


def test_bad_search_settings_are_refused_in_one_line():
    """The checks themselves, in this process; the next test has the command line say one of them."""
    from dataclasses import replace

    from hydra_plugins.convtune_search.search import SearchSweeperConf

    from convtune.errors import ConfigError
    from convtune.launch.search import check_settings

    plain = SearchSweeperConf()
    for settings, args, says in ((replace(plain, sampler="grid"), SPACE, "hydra.sweeper.sampler='grid' is not allowed"),
                                 (replace(plain, n_trials=0), SPACE, "hydra.sweeper.n_trials=0 is not allowed"),
                                 (replace(plain, startup_trials=-1), SPACE,
                                  "hydra.sweeper.startup_trials=-1 is not allowed"),
                                 (replace(plain, storage="optuna.db"), SPACE,
                                  "hydra.sweeper.storage='optuna.db' is not allowed"),
                                 (plain, ("BLOCK_M=16",), "nothing to search"),
                                 (plain, ("BLOCK_M=interval(16,32)",), "not an interval")):
        with pytest.raises(ConfigError) as e:
            check_settings(settings, list(args))
        assert says in str(e.value), (settings, args, str(e.value))
    assert check_settings(plain, list(SPACE)).choices == {"BLOCK_M": ("16", "32"), "num_warps": ("1", "2")}


@pytest.mark.slow
def test_a_bad_search_is_one_line_on_the_command_line_before_any_run(run_cli, store, tmp_path):
    for args, says in ((("hydra.sweeper.n_trials=0", *SPACE), "hydra.sweeper.n_trials=0 is not allowed"),
                       (("BLOCK_M=16,abc",), "BLOCK_M='abc' is not allowed")):  # a value of the wrong type
        r = search(run_cli, tmp_path, *args)
        assert r.returncode == 2 and says in r.stderr, (args, r.stderr[-2000:])
        assert "Traceback" not in r.stderr
    assert children(store) == []
    assert not (tmp_path / "optuna.db").exists()
