"""The tests' command lines (`python run.py ...`, `promote.py`, `tune_model.py`) started from a preloaded Python.

A CLI process spends ~3.5 CPU-s importing torch and mlflow before it does anything; the suite starts dozens, and on
CI's two cores that was half the suite's time (issue 43). `run` here behaves as `subprocess.run(cmd,
capture_output=True, text=True)`: each command is still a process of its own, with its own output, exit status,
working folder, environment and arguments, running the script as `python <script>` does. The process is forked
from a server (tests/preload_server.py, one per test process) that has imported those libraries once and nothing of
convtune, so the command imports the project fresh.

Only what such a start can serve goes through it: a script of SCRIPTS or of tests/, or `python -c CODE`, with the
test process's own PYTHONPATH (the server's sys.path). There is a server for each of Triton's modes, with and
without TRITON_INTERPRET: Triton's own library is defined for one mode when it is imported (a Gluon import without
TRITON_INTERPRET fails in a server imported with it). Anything else (and the tests of signals, which start their own
processes) runs as a plain subprocess.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("run.py", "promote.py", "tune_model.py")
OFF_ENV = "CONVTUNE_TESTS_UNPRELOADED"  # 1: every command line a plain subprocess (to compare, or to rule this out)
_servers: dict[bool, tuple[subprocess.Popen, str]] = {}  # by Triton's mode: interpreted or compiled


def run(cmd: list[str], *, env: dict[str, str], timeout: float,
        cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout), started preloaded
    where it can be (the module docstring)."""
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    if not _servable(cmd, cwd, env):
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    request = json.dumps({"argv": [str(a) for a in cmd], "cwd": str(cwd), "env": env}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(_server_path(env.get("TRITON_INTERPRET") == "1"))
        socket.send_fds(conn, [request], [out_w, err_w])
        os.close(out_w)
        os.close(err_w)
        pid = int(conn.recv(64).decode())
        deadline = time.monotonic() + timeout
        out, err = _read_until_closed(out_r, err_r, deadline)
        if out is None:
            _kill(pid)
            raise subprocess.TimeoutExpired(cmd, timeout)
        conn.settimeout(max(deadline - time.monotonic(), 1))
        try:
            code = int(conn.recv(64).decode())
        except (socket.timeout, ValueError):
            _kill(pid)
            raise subprocess.TimeoutExpired(cmd, timeout) from None
    return subprocess.CompletedProcess(cmd, code, out, err)


def _servable(cmd: list[str], cwd: Path, env: dict[str, str]) -> bool:
    path = (cwd / cmd[1]).resolve() if len(cmd) >= 2 else None
    script = path is not None and ((path.parent == ROOT and path.name in SCRIPTS)
                                   or (path.parent == ROOT / "tests" and path.suffix == ".py"))
    code = len(cmd) >= 3 and cmd[1] == "-c"
    return (os.environ.get(OFF_ENV) != "1" and cmd[0] == sys.executable and (script or code)
            and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"))


def _read_until_closed(out_fd: int, err_fd: int, deadline: float) -> tuple[Optional[str], Optional[str]]:
    """Both pipes to their end (every writer closed, as subprocess.run's communicate), or (None, None) past the
    deadline."""
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None, None
            for key, _ in sel.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        for fd in chunks:
            os.close(fd)
    return tuple(b"".join(chunks[fd]).decode(errors="replace") for fd in (out_fd, err_fd))  # type: ignore[return-value]


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the command leads its own process group (preload_server: why)
    except ProcessLookupError:
        pass


def _server_path(interpret: bool) -> str:
    """The socket of this test process's server for Triton's mode, started on first use and stopped at exit."""
    running = _servers.get(interpret)
    if running is not None and running[0].poll() is None:
        return running[1]
    path = os.path.join(tempfile.mkdtemp(prefix="convtune-preload-"), "socket")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "preload_server.py"), path], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL)
    ready = time.monotonic() + 120
    while not os.path.exists(path):  # the server binds its socket once its imports are done
        if proc.poll() is not None or time.monotonic() > ready:
            raise RuntimeError(f"the preloaded Python did not start (exit status {proc.poll()})")
        time.sleep(0.05)
    _servers[interpret] = (proc, path)
    import atexit

    atexit.register(_stop, proc)
    return path


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
