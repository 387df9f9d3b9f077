"""`hydra/launcher=slurm` on a real SLURM cluster (tests/slurm_cluster.py: one node on this machine, accounting
included): a sweep's runs land in the store; a task that scancel ends, one over its time limit and one that dies
each become a FAILED run with SLURM's state; a Ctrl-C of the submitting sweep leaves nothing RUNNING. Real
`python run.py` processes submitting real array jobs, a real SQLite store; the jobs run through the interpreter.

`.ci/run` installs and starts the cluster and requires this test (CONVTUNE_REQUIRE_SLURM=1); elsewhere it starts
an installed cluster for the test session, and skips with the reason where it cannot."""

import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest
from mlflow.tracking import MlflowClient

from tests import preloaded, slurm_cluster
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.slurm_cluster]
REQUIRED = os.environ.get("CONVTUNE_REQUIRE_SLURM") == "1"


@pytest.fixture(scope="module")
def cluster():
    """The cluster: already running, or started here (and stopped after) where SLURM is installed and this is root."""
    if slurm_cluster.status(quiet=True):
        yield
        return
    why = ("SLURM is not installed (python -m tests.slurm_cluster install; .ci/run installs it)"
           if not slurm_cluster.installed() else "starting a cluster needs root" if os.geteuid() != 0 else None)
    if why is not None:
        if REQUIRED:
            pytest.fail(f"CONVTUNE_REQUIRE_SLURM=1 and {why}")
        pytest.skip(why)
    r = subprocess.run([sys.executable, "-m", "tests.slurm_cluster", "start"], cwd=ROOT, capture_output=True,
                       text=True, timeout=180)
    if r.returncode != 0:
        (pytest.fail if REQUIRED else pytest.skip)(f"the SLURM cluster did not start: {(r.stdout + r.stderr).strip()}")
    try:
        yield
    finally:
        subprocess.run([sys.executable, "-m", "tests.slurm_cluster", "stop"], cwd=ROOT, capture_output=True,
                       timeout=180)


def sweep(folder, *args, env_extra=None):
    """`python run.py -m hydra/launcher=slurm ...` into `folder` (its store, sweep folder and pins), on the CPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({"HYDRA_FULL_ERROR": "0", **(env_extra or {})})
    cmd = [sys.executable, "run.py", "-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=null",
           "problem=tiny", "bench=fast", "device=interpreter", f"tracking.uri=sqlite:///{folder / 'mlflow.db'}",
           f"hydra.sweep.dir={folder / 'sweep'}", f"pins_file={folder / 'pins.yaml'}", *args]
    return preloaded.popen(cmd, cwd=ROOT, env=env, stderr=subprocess.STDOUT)


def pausing(folder, tasks):
    """hydra.launcher.setup: the batch script's lines before the task; the array tasks `tasks` wait at their pause
    point with their run open (convtune.interrupts), each leaving the marker paused-<task>."""
    script = folder / "setup.sh"
    script.write_text(f'case " {" ".join(map(str, tasks))} " in *" $SLURM_ARRAY_TASK_ID "*)\n'
                      f'  export CONVTUNE_PAUSE_AT=job_running CONVTUNE_PAUSE_FILE={folder}/paused-$SLURM_ARRAY_TASK_ID'
                      f' CONVTUNE_PAUSE_S=600;;\nesac\n')
    return f"hydra.launcher.setup=['source {script}']"


def wait_for(done, what, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not done():
        assert proc.poll() is None, f"the sweep ended before {what}: {proc.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.2)


def end_now(task):
    """Set a running array task's end time to now, so that slurmctld's next time-limit pass ends it TIMEOUT.
    scontrol's exit status is not the verdict: for an array task it has returned 1 while slurmctld logged the
    update complete. So the task's end time is read back, and the update repeated until it holds."""
    deadline = time.monotonic() + 60
    while True:
        r = subprocess.run(["scontrol", "update", f"JobId={task}", "EndTime=now"], capture_output=True, text=True,
                           timeout=30)
        shown = subprocess.run(["scontrol", "-o", "show", "job", task], capture_output=True, text=True,
                               timeout=30).stdout
        end = re.search(r"\bEndTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b", shown)
        if end and end.group(1) <= datetime.now().isoformat(timespec="seconds"):
            return
        assert time.monotonic() < deadline, f"{task}'s end time is not now: {r.stdout}{r.stderr}{shown}"
        time.sleep(1)


def runs(folder):
    c = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = c.get_experiment_by_name("tiny [interpreter]")
    every = c.search_runs([exp.experiment_id]) if exp is not None else []
    return [r for r in every if "mlflow.parentRunId" not in r.data.tags], \
        {r.data.tags["job"]: r for r in every if "mlflow.parentRunId" in r.data.tags}


def running_of(folder, job):
    _, jobs = runs(folder)
    r = jobs.get(str(job))
    return r if r is not None and r.info.status == "RUNNING" else None


def test_a_real_array_sweep_lands_and_what_slurm_ends_is_recorded_failed_with_its_state(cluster, tmp_path):
    from convtune.track.store import Tracker

    ended, interrupted = tmp_path / "ended", tmp_path / "interrupted"
    for folder in (ended, interrupted):
        Tracker(f"sqlite:///{folder / 'mlflow.db'}")  # made whole before the test reads it while a sweep runs
    # five tasks: 0 and 4 run through; 1 is cancelled with scancel, 2 dies (SIGKILL) with its run open, and 3 is
    # made to be over its time limit (scontrol: its end time now), each while it waits at its pause point
    proc = sweep(ended, "num_warps=1,2,4,8,16", pausing(ended, [1, 2, 3]))
    # meanwhile (slurmctld looks at time limits every 30 s), a sweep of three waiting tasks is interrupted with Ctrl-C
    stopped = sweep(interrupted, "num_warps=1,2,4", pausing(interrupted, [0, 1, 2]))
    try:
        wait_for(lambda: all(running_of(ended, j) for j in (1, 2, 3)), "tasks 1 to 3 waiting", proc)
        array = running_of(ended, 1).data.tags["batch_job"].split("_")[0]
        subprocess.run(["scancel", f"{array}_1"], check=True, timeout=30)
        os.kill(int(running_of(ended, 2).data.tags["process"].split(":")[0]), signal.SIGKILL)
        end_now(f"{array}_3")
        wait_for(lambda: all(running_of(interrupted, j) for j in (0, 1, 2)), "three tasks waiting", stopped)
        stopped.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
        interrupted_out, _ = stopped.communicate(timeout=180)
    finally:
        for p in (proc, stopped):
            if p.poll() is None:
                p.kill()
    assert proc.returncode == 0, out[-3000:]
    assert f"submitted 5 SLURM job(s) {array}" in out
    (parent,), jobs = runs(ended)
    assert parent.info.status == "FINISHED" and parent.data.tags["summary_rows"] == "5"
    assert sorted(jobs) == ["0", "1", "2", "3", "4"]
    for job in ("0", "4"):  # the runs land in the store, from the cluster's own tasks
        run = jobs[job]
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "ok" and run.data.metrics["latency_ms"] > 0
        assert run.data.tags["batch_job"] == f"{array}_{job}"
    for job, state in (("1", "CANCELLED by "), ("2", "FAILED"), ("3", "TIMEOUT")):
        run = jobs[job]
        assert run.info.status == "FAILED" and run.data.tags["status"] == "failed", (job, run.data.tags)
        assert run.data.tags["slurm_state"].startswith(state), (job, run.data.tags["slurm_state"])
        assert f"(SLURM state {run.data.tags['slurm_state']})" in run.data.tags["error.message"]
    assert out.count("→ failed: ") == 3

    # the Ctrl-C: every task cancelled, every run closed KILLED, none left RUNNING
    assert stopped.returncode == 130, interrupted_out[-3000:]
    (parent,), jobs = runs(interrupted)
    assert parent.info.status == "KILLED" and sorted(jobs) == ["0", "1", "2"]
    assert all(r.info.status == "KILLED" and r.data.tags["status"] == "killed" for r in jobs.values())
