"""`hydra/launcher=gpus` (convtune.launch.pool): one process per job, one job per GPU slot at a time, and a job
that hangs or dies becomes a FAILED run with the reason while the sweep goes on. On the CPU the slots are
given explicitly (hydra.launcher.gpus=[0,1]): each job's process still gets its CUDA_VISIBLE_DEVICES, and runs
on the interpreter. Real subprocesses and a real SQLite store; hangs come from convtune.interrupts' pause
points (a job waits there for a signal), and a crash is a SIGKILL the test sends once the job is paused."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests import preloaded
from tests.conftest import ROOT


pytestmark = pytest.mark.slow  # every test here starts real processes (CI runs them all)

GPUS = ("hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]", "problem=tiny", "bench=fast")


def children(store):
    c = MlflowClient(store)
    exp = c.get_experiment_by_name("tiny [interpreter]")
    runs = c.search_runs([exp.experiment_id]) if exp is not None else []
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parent, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


@contextlib.contextmanager
def paused_sweep(tmp_path, store, *args):
    """A gpus-launcher sweep whose every job waits at its pause point, with its run open, for a signal; yields
    (the sweep's process, the pause marker) and never leaves the process behind."""
    marker = tmp_path / "paused"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CONVTUNE_PAUSE_AT": "job_running", "CONVTUNE_PAUSE_FILE": str(marker)}
    cmd = [sys.executable, "run.py", "-m", *GPUS, *args, f"tracking.uri={store}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
           f"pins_file={tmp_path / 'pins.yaml'}"]
    sweep = preloaded.popen(cmd, cwd=ROOT, env=env, stderr=subprocess.STDOUT)
    try:
        yield sweep, marker
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()


def wait_paused(sweep, marker):
    deadline = time.monotonic() + 300
    while not marker.exists() and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), "no job reached its pause point"
    marker.unlink()


def test_jobs_spread_over_the_slots_one_process_each_and_every_run_is_kept(run_cli, store):
    # three jobs on two slots (one slot runs two, one after the other), device=interpreter without TRITON_INTERPRET
    # in the environment, as a user without a GPU runs it: each job settles the interpreter in its own process
    r = run_cli("-m", *GPUS, "device=interpreter", "num_warps=1,2,4", interpret_env=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Launching 3 jobs, one process each, on 2 GPU(s) (0, 1)" in r.stdout + r.stderr
    (parent,), runs = children(store)
    assert len(runs) == 3 and all(run.data.tags["status"] == "ok" for run in runs)
    assert {run.data.tags["gpu_slot"] for run in runs} == {"0", "1"}
    assert len({run.data.tags["process"] for run in runs}) == 3  # a fresh process per job
    assert parent.data.tags["summary_rows"] == "3" and parent.info.status == "FINISHED"
    assert r.stdout.count(" ok (interpreter: CPU host time") == 3  # each job's own line, printed when it ends


def test_a_job_that_hangs_is_killed_at_the_timeout_and_recorded_failed(run_cli, store, tmp_path):
    # every job waits at its pause point (up to 120 s) for a signal that never comes: a hang
    env = {"CONVTUNE_PAUSE_AT": "job_running", "CONVTUNE_PAUSE_FILE": str(tmp_path / "paused")}
    r = run_cli("-m", *GPUS, "hydra.launcher.gpus=[0]", "hydra.launcher.timeout_s=3", "num_warps=2,4", env_extra=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (parent,), runs = children(store)
    assert len(runs) == 2 and parent.data.tags["summary_rows"] == "2" and parent.info.status == "FINISHED"
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"
        assert run.data.tags["error.type"] == "Timeout"
        assert run.data.tags["error.message"] == ("no result after 3 s on GPU slot 0: the job's processes were "
                                                  "killed (hydra.launcher.timeout_s)")
    assert r.stdout.count("→ failed: Timeout: no result after 3 s") == 2


def test_a_job_whose_process_dies_is_recorded_failed_and_the_next_job_runs(tmp_path, store):
    killed = []
    with paused_sweep(tmp_path, store, "hydra.launcher.gpus=[0]", "num_warps=2,4") as (sweep, marker):
        for _ in range(2):  # each job in turn: wait until it is paused with its run open, then kill it outright
            wait_paused(sweep, marker)
            _, runs = children(store)
            (open_run,) = [run for run in runs if run.info.status == "RUNNING"]
            pid = int(open_run.data.tags["process"].split(":")[0])
            # the job's process was forked from the pool's server, which imported the heavy libraries once
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            server = Path(f"/proc/{parent}/cmdline").read_bytes().decode()
            assert "multiprocessing.forkserver" in server and "'torch'" in server and "'mlflow'" in server, server
            os.kill(pid, signal.SIGKILL)
            killed.append(open_run.info.run_id)
        out, _ = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, out[-3000:]
    (parent,), runs = children(store)
    assert sorted(run.info.run_id for run in runs) == sorted(killed)  # the runs the jobs made, closed
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["error.type"] == "ProcessDied"
        assert run.data.tags["error.message"].startswith("the job's process on GPU slot 0 died of SIGKILL")
    assert parent.data.tags["summary_rows"] == "2" and parent.info.status == "FINISHED"


def test_ctrl_c_stops_the_running_jobs_and_every_open_run_is_closed_killed(tmp_path, store):
    with paused_sweep(tmp_path, store, "num_warps=2,4,8") as (sweep, marker):
        wait_paused(sweep, marker)
        sweep.send_signal(signal.SIGINT)  # what Ctrl-C sends the launcher (its jobs run in sessions of their own)
        out, _ = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, out[-3000:]
    (parent,), runs = children(store)
    assert parent.info.status == "KILLED"
    assert runs and all(run.info.status == "KILLED" and run.data.tags["status"] == "killed" for run in runs), \
        [(run.info.status, run.data.tags.get("error.message")) for run in runs]
    assert len(runs) <= 2  # the jobs that had started: the third configuration never ran


def test_the_launchers_own_keys_are_refused_in_one_line_before_anything_is_recorded(run_cli, store):
    r = run_cli("-m", *GPUS, "hydra.launcher.gpus=[abc]", "num_warps=2,4")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "error: hydra.launcher.gpus=['abc'] is not allowed: a non-empty list of CUDA_VISIBLE_DEVICES entries (GPU "
        "indices such as 0, or GPU-/MIG- UUIDs), or null for every visible GPU")
    assert children(store) == ([], [])


def test_check_settings_names_the_key_the_value_and_what_is_allowed():
    from convtune.launch.pool import check_settings

    check_settings(["0", "GPU-8a1b2c3d-0000-1111-2222-333344445555"], 600)
    check_settings(None, 0.5)
    for gpus, timeout, said in ((None, 0, "hydra.launcher.timeout_s=0 is not allowed: a positive number of seconds"),
                                (None, "x", "hydra.launcher.timeout_s='x' is not allowed"),
                                ([], 600, "hydra.launcher.gpus=[] is not allowed: a non-empty list"),
                                (["0", "1;rm"], 600, "hydra.launcher.gpus=['0', '1;rm'] is not allowed")):
        with pytest.raises(ValueError) as e:
            check_settings(gpus, timeout)
        assert str(e.value).startswith(said)
