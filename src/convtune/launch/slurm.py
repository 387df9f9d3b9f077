"""What `hydra/launcher=slurm` and `slurm_local` do (the plugin, src/hydra_plugins/convtune_launcher/slurm.py,
only names these functions): submit a sweep's jobs through submitit, one SLURM array task and one GPU per
configuration (slurm_local: the same jobs as processes of this machine, through submitit's local executor),
print each job's lines as it ends, and record a job that could not record itself.

The submitting process needs no GPU: the sweep's device is planned from the config (setup.planned_device)
and each job checks it on its own node (setup.sweep_device_for_job). A task that the scheduler ends (time
limit, node failure, out of memory, scancel) or that dies becomes a FAILED run with SLURM's reason, and the
sweep goes on. A Ctrl-C cancels the jobs not yet ended, which record their runs KILLED.
`hydra.launcher.dry_run=true` writes and prints the batch script the array would be submitted with, and
submits nothing.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from omegaconf import open_dict

from convtune import interrupts
from convtune.errors import ConfigError
from convtune.record import Status, Tag
from convtune.sweep_state import SweepState, close_lost_job

POLL_S = 1.0  # how often the submitter looks at its jobs (SLURM's sacct is asked at most this often)
GRACE_S = 30.0  # after a Ctrl-C, how long cancelled jobs have to record their runs KILLED
BATCH_SCRIPT = "slurm_array.sbatch"  # the dry run's batch script, in the sweep folder
# hydra-submitit-launcher's keys that every submitit executor takes (its BaseQueueConf); the others are
# SLURM's own (partition, account, gres, ...) and go to sbatch as they are.
GENERIC = ("timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name",
           "stderr_to_stdout")


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """The launcher's launch: `launcher` is the plugin (its submitit params, dry_run, parallelism)."""
    config = launcher.config
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    numbers = [initial_job_idx + i for i in range(len(job_overrides))]
    args = [(list(o), "hydra.sweep.dir", n, f"job_id_for_{n}", Singleton.get_state())
            for n, o in zip(numbers, job_overrides)]
    if launcher.dry_run:
        script = sweep_dir / BATCH_SCRIPT
        script.write_text(batch_script(launcher.params, len(args)))
        print(f"the batch script for {len(args)} array tasks (written to {script}; nothing submitted):\n")
        print(script.read_text(), flush=True)
        return []
    state = SweepState.of_this_sweep(sweep_dir)
    executor = make_executor(launcher.executor, launcher.params)
    total = state.total_jobs if state and state.total_jobs else len(args)
    pending = list(zip(numbers, job_overrides, args))
    running: list[tuple[int, Sequence[str], Any]] = []
    returns: dict[int, JobReturn] = {}
    try:
        if launcher.executor == "slurm":  # one array; SLURM runs at most array_parallelism of it at once
            jobs = executor.map_array(launcher, *zip(*args)) if len(args) > 1 else [executor.submit(launcher, *args[0])]
            running = [(n, o, j) for (n, o, _), j in zip(pending, jobs)]
            pending = []
            print(f"submitted {len(jobs)} SLURM job(s) {jobs[0].job_id.split('_')[0]}: output in "
                  f"{jobs[0].paths.folder}", flush=True)
        while pending or running:
            while pending and len(running) < launcher.parallelism:  # slurm_local: at most that many at once
                n, o, a = pending.pop(0)
                running.append((n, o, executor.submit(launcher, *a)))
            for item in [r for r in running if r[2].done()]:
                running.remove(item)
                returns[item[0]] = _ended(state, item[0], item[1], item[2], total, launcher.executor)
            time.sleep(POLL_S)
    except (interrupts.Interrupted, KeyboardInterrupt):
        _cancel(state, running, pending)
        raise
    return [returns[n] for n in numbers]


def _ended(state: Optional[SweepState], number: int, overrides: Sequence[str], job: Any, total: int,
           kind: str) -> JobReturn:
    """A job ended: show what it printed; record it if it could not (the scheduler ended it, it died, or the
    task raised), so that it is in the sweep's summary with the reason."""
    lines = (job.stdout() or "").splitlines()
    own = {ln.split(" - ", 1)[-1] for ln in lines if ln.startswith("submitit ")}  # submitit's log, also echoed
    printed = [ln for ln in lines if ln.strip() and not ln.startswith("submitit ") and ln not in own]  # plain
    if printed:
        print("\n".join(printed), flush=True)
    failure: Optional[tuple[str, str]] = None
    ret: Optional[JobReturn] = None
    try:
        if kind == "local" and not job.paths.result_pickle.exists():
            # a local task writes its result before its process ends, so none will come: submitit's result()
            # would wait 15 s for it (time a shared file system on a cluster may need), for each dead job
            from submitit.core.utils import UncompletedJobError

            raise UncompletedJobError(f"job {job.job_id} ended without a result")
        ret: JobReturn = job.result()
        if ret.status == JobStatus.FAILED:
            failure = (type(ret._return_value).__name__, str(ret._return_value).strip().splitlines()[0])
    except Exception as e:  # noqa: BLE001 - submitit: the task left no result (UncompletedJobError, FailedJobError)
        said = [ln.strip() for ln in (job.stderr() or "").splitlines() if ln.strip() and not ln.startswith("submitit ")]
        # SLURM's state says why (TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, CANCELLED, ...); a local job's is its
        # controller's, FINISHED even when the task was killed
        why = f" (SLURM state {job.state})" if kind == "slurm" else ""
        failure = (type(e).__name__, f"{kind} job {job.job_id} left no result{why}"
                                     + (f"; its last line: {said[-1]}" if said else ""))
    if failure is None:
        return ret  # type: ignore[return-value]
    tags = {Tag.BATCH_JOB: str(job.job_id)}
    if kind == "slurm":  # what the scheduler says became of the task: CANCELLED by <uid>, TIMEOUT, FAILED, ...
        tags[Tag.SLURM_STATE] = str(job.state)
        if "SLURM state" not in failure[1]:
            failure = (failure[0], f"{failure[1]} (SLURM state {job.state})")
    run_id = None if state is None else close_lost_job(state, number, list(overrides), None, Status.FAILED,
                                                       failure[0], f"{failure[1]} (its output: {job.paths.stderr})",
                                                       tags, overrule=kind == "slurm")
    shown = [o for o in filter_overrides(overrides) if state is None or o.split("=", 1)[0].lstrip("+~") in state.varied]
    print(f"[{number + 1}/{total}] {' '.join(shown) or f'job {number}'} → {Status.FAILED}: {failure[0]}: "
          f"{failure[1]}" + (f" (run {run_id})" if run_id else ""), flush=True)
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None)


def _cancel(state: Optional[SweepState], running: list[tuple[int, Sequence[str], Any]],
            pending: list[tuple[int, Sequence[str], Any]]) -> None:
    """An interrupt of the sweep: cancel what was submitted and has not ended, give it GRACE_S to record its
    run KILLED, then record KILLED whatever did not (a job still queued has no run yet)."""
    with interrupts.deferred():
        for _, _, job in running:
            job.cancel(check=False)
        deadline = time.monotonic() + GRACE_S
        while any(not j.done() for _, _, j in running) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if state is None:
            return
        for number, overrides, _ in running + pending:
            close_lost_job(state, number, list(overrides), None, Status.KILLED, "Interrupted",
                           "the sweep was interrupted before this job ended; its job was cancelled")


def run_one(launcher: Any, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
            singleton_state: dict) -> JobReturn:
    """One job, in its array task (or local process): as hydra-submitit-launcher runs it, with convtune's
    interrupt handling (a scancel records the run KILLED) and the scheduler's job id on the run."""
    import signal

    import submitit

    # submitit's handler of SLURM's warning signal ends the task at once (requeued, or "timed-out"), before its time
    # limit; a configuration's run goes on until it ends or SLURM ends it (SIGTERM: the run is closed, then the
    # launcher records it FAILED with SLURM's state, TIMEOUT)
    signal.signal(signal.SIGUSR2, _time_limit_near)
    os.environ["CONVTUNE_BATCH_JOB"] = submitit.JobEnvironment().job_id
    Singleton.set_state(singleton_state)
    setup_globals()
    config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, sweep_overrides)
    with open_dict(config.hydra.job) as job:
        job.id = os.environ["CONVTUNE_BATCH_JOB"]
        job.num = job_num
    return interrupts.guard(lambda: run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                                            config=config, job_dir_key=job_dir_key,
                                            job_subdir_key="hydra.sweep.subdir"))  # type: ignore[return-value]


def _time_limit_near(signum: int, frame: Any) -> None:
    print("SLURM's warning signal (SIGUSR2): the task's time limit is near; its run goes on until it ends or SLURM "
          "ends it", file=sys.stderr, flush=True)


def check_settings(parallelism: Any) -> None:
    """hydra/launcher=slurm_local's own key, refused in one line (ConfigError) before the parent run."""
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ConfigError("hydra.launcher.parallelism", parallelism, "a positive number of jobs run at once")


def _split(params: dict[str, Any]) -> tuple[str, int, dict[str, Any], dict[str, Any]]:
    """hydra-submitit-launcher's params as (folder, max_num_timeout, generic, specific), None meaning unset."""
    rest = {k: v for k, v in params.items() if v is not None}
    folder = str(rest.pop("submitit_folder"))
    max_num_timeout = int(rest.pop("max_num_timeout", 0))
    generic = {k: rest.pop(k) for k in GENERIC if k in rest}
    return folder, max_num_timeout, generic, rest


def make_executor(kind: str, params: dict[str, Any]) -> Any:
    """submitit's SLURM or local executor with the launcher's params, as hydra-submitit-launcher sets them."""
    from submitit import LocalExecutor, SlurmExecutor

    folder, max_num_timeout, generic, specific = _split(params)
    cls = SlurmExecutor if kind == "slurm" else LocalExecutor
    executor = cls(folder, max_num_timeout=max_num_timeout)
    executor.update_parameters(**executor._convert_parameters(generic), **specific)
    return executor


def batch_script(params: dict[str, Any], tasks: int) -> str:
    """The sbatch script submitit would submit for an array of `tasks` jobs with these params; no cluster
    needed (submitit's own renderer, given what its SLURM executor would hold)."""
    from submitit.slurm.slurm import SlurmExecutor, _convert_mem, _make_sbatch_string

    folder, _, generic, specific = _split(params)
    converted = {SlurmExecutor._equivalence_dict().get(k, k): v for k, v in generic.items()}
    if "mem" in converted:
        converted["mem"] = _convert_mem(converted["mem"])
    folder = str(Path(folder).expanduser().absolute())  # as submitit's executor holds it
    command = " ".join([shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(folder)])
    return _make_sbatch_string(command=command, folder=folder, map_count=tasks if tasks > 1 else None,
                               **converted, **specific)
