"""Python processes forked from a server that has imported torch, MLflow and Hydra once (multiprocessing's forkserver).

The gpus launcher's jobs (launch/pool.py) and tune_model's sweep of each shape (tune/model.py) are processes of
their own, each importing the same libraries before it does anything. On the NVIDIA H200's host a 4-job gpus sweep
took 32.5 s from this server against 52.3 s from fresh processes, and tune_model's shapes after the first 9-12 s
against 16-18 s (AlexNet, batch 256, Triton's cache warm; docs/PERFORMANCE.md). The server imports PRELOAD
when a process first needs it and never starts CUDA; each process forked from it then begins after those imports,
with the environment, working folder and output given to it, so CUDA_VISIBLE_DEVICES and the Triton interpreter's
switch are set before CUDA or Triton start.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
from typing import Any, Callable, Optional

# What the server imports: what every job and every `run.py` imports before it measures. None of it starts CUDA or
# imports Triton, whose mode (compiled or interpreted) is fixed when it is imported: each process settles that itself
# (device.activate), and Triton's import takes 0.2 s of the 7.
PRELOAD = ("torch", "mlflow", "hydra.core.utils", "omegaconf", "cloudpickle", "convtune.app")

_context: Any = None


class Forked:
    """The part of subprocess.Popen's handle its callers use, for a process forked by the server."""

    def __init__(self, process: Any, what: str) -> None:
        self._process = process
        self._what = what
        self.pid = process.pid

    @property
    def returncode(self) -> Optional[int]:
        return self._process.exitcode  # as Popen's: -N for a death by signal N

    def poll(self) -> Optional[int]:
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        self._process.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self._what, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(target: Callable[..., None], args: tuple, what: str) -> Forked:
    """`target(*args)` in a process forked from the server (started, and its imports done, on the first call);
    `what` names the process in a TimeoutExpired."""
    global _context
    if _context is None:
        import multiprocessing

        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(list(PRELOAD))
    process = _context.Process(target=target, args=args, daemon=False)
    process.start()
    return Forked(process, what)


def become(env: dict[str, str], cwd: str, stdout: str, stderr: Optional[str] = None) -> None:
    """Make this forked process what a fresh one started with `env` in `cwd` would be, its standard output written
    to the file `stdout` and its errors to `stderr` (None: the same file), its input empty."""
    out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = out if stderr is None else os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, to in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(fd, to)
    for fd in {out, err, devnull}:
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)


def run_script(script: str, argv: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> None:
    """The target that runs `python <script> <argv>` in a forked process (`become`'s arguments besides): the script
    runs as __main__, its folder first on sys.path, as Python starts it."""
    become(env, cwd, stdout, stderr)
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
