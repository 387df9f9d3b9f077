"""`hydra/launcher=slurm` and `slurm_local` (convtune.launch.slurm, through submitit): the batch script of an
array rendered without a cluster, and the same jobs run through submitit's local executor, where the device is
decided in each job, a job that dies or is planned for a GPU it lacks becomes a FAILED run with the reason, and
a Ctrl-C leaves nothing RUNNING. Real `python run.py` subprocesses, real submitit processes, a real SQLite store;
a crash is a SIGKILL the test sends once the job waits at its pause point (convtune.interrupts)."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests import preloaded
from tests.conftest import ROOT
from tests.test_gpus_launcher import wait_paused


pytestmark = pytest.mark.slow  # every test here starts real processes (CI runs them all)

LOCAL = ("hydra/launcher=slurm_local", "problem=tiny", "bench=fast")


def sweep(tmp_path, store, *args, interpret=True, env_extra=None, popen=False):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({"HYDRA_FULL_ERROR": "0", **({"TRITON_INTERPRET": "1"} if interpret else {}), **(env_extra or {})})
    cmd = [sys.executable, "run.py", "-m", *args, f"tracking.uri={store}", f"pins_file={tmp_path / 'pins.yaml'}",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    if popen:
        return preloaded.popen(cmd, cwd=ROOT, env=env, stderr=subprocess.STDOUT)
    return preloaded.run(cmd, cwd=ROOT, env=env, timeout=600)


def runs_of(store, experiment):
    c = MlflowClient(store)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id]) if exp is not None else []
    nested = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return [r for r in runs if r not in nested], nested


def test_the_batch_script_of_an_array_is_rendered_without_a_cluster_or_a_gpu(tmp_path, store):
    # no TRITON_INTERPRET and no GPU here: a submitting machine without one plans the sweep for the GPU
    r = sweep(tmp_path, store, "hydra/launcher=slurm", "hydra.launcher.dry_run=true", "hydra.launcher.partition=gpu",
              "hydra.launcher.account=kernels", "hydra.launcher.mem_gb=32", "hydra.launcher.array_parallelism=2",
              "num_warps=2,4", "BLOCK_M=64,128", interpret=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dry run: 4 jobs of kernelbench_l1_50 on cuda; nothing is submitted or recorded" in r.stdout
    script = (tmp_path / "sweep" / "slurm_array.sbatch").read_text()
    assert script in r.stdout
    folder = tmp_path / "sweep" / ".submitit"
    for line in ("#SBATCH --array=0-3%2", "#SBATCH --gpus-per-node=1", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --nodes=1", "#SBATCH --partition=gpu", "#SBATCH --account=kernels", "#SBATCH --mem=32GB",
                 "#SBATCH --time=20", "#SBATCH --job-name=convtune", "#SBATCH --signal=USR2@120",
                 f"#SBATCH --output={folder}/%A_%a/%A_%a_0_log.out"):
        assert line in script.splitlines(), line
    assert script.splitlines()[-1].endswith(f"-u -m submitit.core._submit {folder}/%j")
    assert MlflowClient(store).search_runs([e.experiment_id for e in MlflowClient(store).search_experiments()]) == []
    assert not any(folder.glob("**/*.pkl"))  # nothing pickled for submission


def test_the_same_configurations_run_through_submitits_local_executor(tmp_path, store):
    r = sweep(tmp_path, store, *LOCAL, "hydra.launcher.parallelism=2", "num_warps=2,4", "BLOCK_M=32")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "device: interpreter in every job, checked on the job's own node" in r.stdout
    (parent,), runs = runs_of(store, "tiny [interpreter]")
    assert len(runs) == 2 and all(run.data.tags["status"] == "ok" for run in runs)
    assert {(run.data.params["num_warps"], run.data.params["BLOCK_M"]) for run in runs} == {("2", "32"), ("4", "32")}
    assert sorted(run.data.tags["job"] for run in runs) == ["0", "1"]
    assert len({run.data.tags["batch_job"] for run in runs}) == 2  # submitit's job id: where each job's log is
    assert parent.data.tags["summary_rows"] == "2" and parent.info.status == "FINISHED"
    assert r.stdout.count(" ok (interpreter: CPU host time") == 2  # each job's own line, printed when it ends
    assert "Job completed successfully" not in r.stdout  # submitit's own log stays in the job's files


def test_the_launchers_own_keys_are_refused_in_one_line_before_anything_is_recorded(tmp_path, store):
    r = sweep(tmp_path, store, *LOCAL, "hydra.launcher.parallelism=0", "num_warps=2,4")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "error: hydra.launcher.parallelism=0 is not allowed: a positive number of jobs run at once")
    assert runs_of(store, "tiny [interpreter]") == ([], [])
    r = sweep(tmp_path, store, *LOCAL, "hydra.launcher.dry_run=true", "num_warps=2,4")  # only SLURM has a script
    assert r.returncode != 0 and "dry_run" in r.stderr and runs_of(store, "tiny [interpreter]") == ([], [])


def test_a_job_planned_for_the_gpu_fails_in_one_line_on_a_node_without_one(tmp_path, store):
    r = sweep(tmp_path, store, *LOCAL, "num_warps=4", interpret=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "device: cuda in every job" in r.stdout
    (parent,), runs = runs_of(store, "tiny")  # the GPU's experiment: a job never drifts to the interpreter
    assert len(runs) == 1 and parent.info.status == "FINISHED"
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["error.type"] == "ConfigError"
        message = run.data.tags["error.message"]
        assert message.startswith("device='cuda' is not allowed: no CUDA device is visible in this job (host ")
        assert "the sweep was started for cuda" in message
    assert runs_of(store, "tiny [interpreter]") == ([], [])


@contextlib.contextmanager
def paused_sweep(tmp_path, store, *args):
    """A slurm_local sweep whose every job waits at its pause point, with its run open, for a signal; yields
    (the sweep's process, the pause marker) and never leaves the process behind."""
    marker = tmp_path / "paused"
    env = {"CONVTUNE_PAUSE_AT": "job_running", "CONVTUNE_PAUSE_FILE": str(marker)}
    proc = sweep(tmp_path, store, *LOCAL, *args, env_extra=env, popen=True)
    try:
        yield proc, marker
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def open_run(store):
    _, runs = runs_of(store, "tiny [interpreter]")
    (run,) = [r for r in runs if r.info.status == "RUNNING"]
    return run


def test_a_job_killed_outright_is_recorded_failed_and_the_next_job_runs(tmp_path, store):
    with paused_sweep(tmp_path, store, "num_warps=2,4") as (proc, marker):
        killed = []
        for _ in range(2):  # each job in turn: paused with its run open, then killed outright
            wait_paused(proc, marker)
            run = open_run(store)
            os.kill(int(run.data.tags["process"].split(":")[0]), signal.SIGKILL)
            killed.append(run.info.run_id)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    (parent,), runs = runs_of(store, "tiny [interpreter]")
    assert sorted(r.info.run_id for r in runs) == sorted(killed)  # the runs the jobs made, closed
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["error.type"] == "UncompletedJobError"
        assert run.data.tags["error.message"].startswith(f"local job {run.data.tags['batch_job']} left no result")
    assert parent.data.tags["summary_rows"] == "2" and parent.info.status == "FINISHED"
    assert out.count("→ failed: UncompletedJobError: local job ") == 2


def test_ctrl_c_cancels_the_jobs_and_every_configuration_is_recorded_killed(tmp_path, store):
    with paused_sweep(tmp_path, store, "num_warps=2,4,8") as (proc, marker):
        wait_paused(proc, marker)
        running = open_run(store).info.run_id
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    (parent,), runs = runs_of(store, "tiny [interpreter]")
    assert parent.info.status == "KILLED"
    assert len(runs) == 3 and all(r.info.status == "KILLED" and r.data.tags["status"] == "killed" for r in runs)
    assert running in {r.info.run_id for r in runs}  # the job that ran closed its own run
    assert sorted(r.data.tags["job"] for r in runs) == ["0", "1", "2"]  # the two never started: named, not lost
