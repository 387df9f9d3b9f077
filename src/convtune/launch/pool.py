"""The gpus launcher's pool: every job of a sweep in a process of its own (convtune.launch.job_process), one at a time
on each GPU slot, the slot's GPU given to the process through CUDA_VISIBLE_DEVICES before CUDA starts.

A job's process is forked from a server that has done the imports once (convtune.forked); each job then begins
where a fresh `python -m convtune.launch.job_process` would be after its imports, with its own environment, working
folder, process group and log.

A job that hangs past the timeout is killed with everything it started; a job whose process dies (a crash,
a sticky CUDA error that ends it, the OOM killer) ends there. Either way `on_end` hears why, the slot takes
the next job in a new process, and the sweep goes on. The pool knows nothing of MLflow: the launcher
records what a lost job leaves behind (convtune.sweep.close_lost_job).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from convtune import forked
from convtune.errors import ConfigError

GPU_ID = re.compile(r"\d+|(GPU|MIG)-[\w-]+")  # an entry of CUDA_VISIBLE_DEVICES
POLL_S = 0.05  # how often the pool looks at its processes
GRACE_S = 15.0  # after a Ctrl-C, how long a job has to record its run KILLED before it is killed outright


@dataclass
class Job:
    number: int  # Hydra's job number (hydra.job.num)
    overrides: list[str]
    job_file: Path  # what convtune.launch.job_process runs (pickled)
    result_file: Path
    log_file: Path  # the process's stdout and stderr


@dataclass
class Outcome:
    slot: Optional[str]  # the CUDA_VISIBLE_DEVICES value the job ran with (None: left as it was)
    return_value: Optional[float] = None
    failure: Optional[tuple[str, str]] = None  # (error type, message) when the process gave no result
    killed: bool = False  # ended by an interrupt of the sweep, not by its own failure


def check_settings(gpus: Optional[list[Any]], timeout_s: Any) -> None:
    """The launcher's keys (hydra.launcher.gpus, .timeout_s), refused in one line (ConfigError)."""
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ConfigError("hydra.launcher.timeout_s", timeout_s, "a positive number of seconds")
    if gpus is not None and (not gpus or not all(GPU_ID.fullmatch(str(g)) for g in gpus)):
        raise ConfigError("hydra.launcher.gpus", [str(g) for g in gpus], "a non-empty list of CUDA_VISIBLE_DEVICES "
                          "entries (GPU indices such as 0, or GPU-/MIG- UUIDs), or null for every visible GPU")


def visible_gpus() -> list[str]:
    """The GPUs a job can be given: CUDA_VISIBLE_DEVICES's entries if it is set, else one per GPU that
    `nvidia-smi -L` lists; none on a machine without NVIDIA's driver. CUDA is not started here."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in listed.splitlines() if line.startswith("GPU "))]


def last_line(log_file: Path) -> str:
    try:
        lines = [ln.strip() for ln in log_file.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def run(jobs: list[Job], slots: list[Optional[str]], timeout_s: float,
        on_end: Callable[[Job, Outcome], None]) -> dict[int, Outcome]:
    """Run `jobs` on `slots` (one process per job, one job per slot at a time); `on_end` is called in this
    process as each ends. An interrupt (convtune.interrupts) stops the jobs that run: each gets SIGTERM and
    GRACE_S to record its run KILLED, then SIGKILL; on_end hears of each (killed=True); the interrupt goes on."""
    waiting = deque(jobs)
    running: dict[Optional[str], tuple[Job, forked.Forked, float]] = {}
    done: dict[int, Outcome] = {}
    try:
        while waiting or running:
            for slot in slots:
                if slot not in running and waiting:
                    job = waiting.popleft()
                    running[slot] = (job, _start(job, slot), time.monotonic())
            for slot, (job, proc, started) in list(running.items()):
                code = proc.poll()
                late = code is None and time.monotonic() - started > timeout_s
                if code is None and not late:
                    continue
                if late:
                    _kill_group(proc, signal.SIGKILL)
                    proc.wait()
                del running[slot]
                done[job.number] = _outcome(job, proc, slot, timeout_s if late else None)
                on_end(job, done[job.number])
            time.sleep(POLL_S)
    finally:
        for job, proc, _ in running.values():  # an interrupt: stop what runs, say so
            _kill_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for slot, (job, proc, _) in running.items():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc, signal.SIGKILL)
                proc.wait()
            outcome = Outcome(slot, killed=True,
                              failure=("Interrupted", "the sweep was interrupted while this job ran"))
            done[job.number] = outcome
            on_end(job, outcome)
    return done


def _start(job: Job, slot: Optional[str]) -> forked.Forked:
    env = dict(os.environ)
    if slot is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot
        env["CONVTUNE_GPU_SLOT"] = slot
    job.result_file.unlink(missing_ok=True)
    # in a process group of its own (job_process.forked makes it): a timeout kills the job's whole tree (ncu,
    # compilers), and a Ctrl-C in the terminal reaches the launcher, which stops its jobs in order (run's finally)
    from convtune.launch import job_process

    return forked.start(job_process.forked, ([str(job.job_file), str(job.result_file)], env, os.getcwd(),
                                             str(job.log_file)), "convtune.launch.job_process")


def _kill_group(proc: forked.Forked, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):  # its group not made yet (or the job gone): the job alone
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _outcome(job: Job, proc: forked.Forked, slot: Optional[str], timed_out_after: Optional[float]) -> Outcome:
    out = Outcome(slot)
    where = f"GPU slot {slot}" if slot is not None else "this machine"
    if timed_out_after is not None:
        out.failure = ("Timeout", f"no result after {timed_out_after:g} s on {where}: the job's processes were "
                                  "killed (hydra.launcher.timeout_s)")
        return out
    code = proc.returncode
    if code == 0 and job.result_file.exists():
        out.return_value = json.loads(job.result_file.read_text()).get("return_value")
        return out
    tail = last_line(job.log_file)
    if code < 0:
        out.failure = ("ProcessDied", f"the job's process on {where} died of {signal.Signals(-code).name}"
                                      + (f"; its last line: {tail}" if tail else ""))
    else:
        out.failure = ("ProcessFailed", f"the job's process on {where} exited with code {code} and no result"
                                        + (f"; its last line: {tail}" if tail else ""))
    return out
