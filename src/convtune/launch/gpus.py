"""What `hydra/launcher=gpus` does (the plugin, src/hydra_plugins/convtune_launcher, only names this): compose
each job's config as Hydra's basic launcher does, hand each to its own process on a GPU slot (convtune.launch.pool,
convtune.launch.job_process), print each job's lines as it ends, and record a job that could not record itself."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional, Sequence

import cloudpickle
from hydra import version
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from omegaconf import open_dict

from convtune.launch import pool as gpu_pool
from convtune.record import Status
from convtune.sweep_state import SweepState, close_lost_job

log = logging.getLogger(__name__)


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """The gpus launcher's launch (its `gpus`, `timeout_s`, and what Hydra gave its setup)."""
    base = launcher.config
    setup_globals()
    configure_log(base.hydra.hydra_logging, base.hydra.verbose)
    gpu_pool.check_settings(launcher.gpus, launcher.timeout_s)  # the sweep's callback did, if it runs
    sweep_dir = Path(str(base.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    slots: list[Optional[str]] = list(launcher.gpus if launcher.gpus is not None else gpu_pool.visible_gpus()) or [None]
    where = f"{len(slots)} GPU(s) ({', '.join(map(str, slots))})" if slots != [None] else "no GPU visible: one at a time"
    log.info(f"Launching {len(job_overrides)} jobs, one process each, on {where}")
    jobs, configs = [], {}
    for i, overrides in enumerate(job_overrides):
        number = initial_job_idx + i
        config = launcher.hydra_context.config_loader.load_sweep_config(base, list(overrides))
        with open_dict(config):
            config.hydra.job.id = number
            config.hydra.job.num = number
        job_dir = sweep_dir / str(config.hydra.sweep.subdir)
        job_dir.mkdir(parents=True, exist_ok=True)
        job_file = job_dir / ".convtune_job.pkl"
        job_file.write_bytes(cloudpickle.dumps({"hydra_context": launcher.hydra_context, "config": config,
                                                "task_function": launcher.task_function,
                                                "version_base": str(version.getbase())}))
        jobs.append(gpu_pool.Job(number, list(overrides), job_file, job_dir / ".convtune_result.json",
                                 job_dir / "job_process.log"))
        configs[number] = config
    state = SweepState.of_this_sweep(sweep_dir)
    outcomes = gpu_pool.run(jobs, slots, launcher.timeout_s, lambda job, out: _ended(state, job, out, len(job_overrides)))
    return [JobReturn(overrides=job.overrides, cfg=configs[job.number], hydra_cfg=configs[job.number],
                      working_dir=str(job.log_file.parent), task_name=str(base.hydra.job.name),
                      status=JobStatus.COMPLETED, _return_value=outcomes[job.number].return_value)
            for job in jobs]


def _ended(state: Optional[SweepState], job: gpu_pool.Job, out: gpu_pool.Outcome, total: int) -> None:
    """A job ended: show what it printed; record a job that could not record itself (a timeout, a crash, an
    interrupt), so that it is in the sweep's summary with the reason."""
    if out.failure is None:
        try:
            printed = job.log_file.read_text(errors="replace").strip()
        except OSError:
            printed = ""
        if printed:
            print(printed, flush=True)
        return
    error_type, message = out.failure
    status = Status.KILLED if out.killed else Status.FAILED
    run_id = None if state is None else close_lost_job(state, job.number, job.overrides, out.slot, status,
                                                       error_type, message)
    print(f"[{job.number + 1}/{total}] {' '.join(filter_overrides(job.overrides))} → {status}: {error_type}: "
          f"{message}" + (f" (run {run_id}; the job's output: {job.log_file})" if run_id else ""), flush=True)
