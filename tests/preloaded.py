"""The tests' command lines (`python run.py ...`, `promote.py`, `tune_model.py`) started from a preloaded Python.

A CLI process spends ~3.5 CPU-s importing torch and mlflow before it does anything; the suite starts dozens, and on
CI's two cores that was half the suite's time. `run` here behaves as `subprocess.run(cmd,
capture_output=True, text=True)`, and `popen` as `subprocess.Popen` with piped output for the tests that signal a
sweep or start several at once: each command is still a process of its own, with its own output, exit status,
working folder, environment and arguments, running the script as `python <script>` does. The process is forked
from a server (tests/preload_server.py, one per test process) that has imported those libraries once and nothing of
convtune, so the command imports the project fresh.

Only what such a start can serve goes through it: a script of SCRIPTS or of tests/, or `python -c CODE`, with the
test process's own PYTHONPATH (the server's sys.path). There is a server for each of Triton's modes, with and
without TRITON_INTERPRET: Triton's own library is defined for one mode when it is imported (a Gluon import without
TRITON_INTERPRET fails in a server imported with it). Anything else runs as a plain subprocess, and so do the
processes the product starts itself (the launchers' job processes).
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
    proc = Preloaded(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.close(kill=True)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def popen(cmd: list[str], *, env: dict[str, str], cwd: Optional[Path] = None, stderr: int = subprocess.PIPE,
          start_new_session: bool = False) -> "subprocess.Popen | Preloaded":
    """subprocess.Popen(cmd, cwd=cwd, env=env, stdout=PIPE, stderr=stderr, text=True, start_new_session=...),
    started preloaded where it can be (the module docstring): the tests that signal a sweep, or start several at
    once. A preloaded command always leads a session of its own."""
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    if not _servable(cmd, cwd, env):
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=start_new_session)
    return Preloaded(cmd, cwd=cwd, env=env, stderr=stderr)


class Preloaded:
    """The part of subprocess.Popen's handle the tests use, for a command forked by the server: pid, poll, wait,
    communicate, send_signal, terminate, kill, returncode. The command leads its own session and process group
    (as with start_new_session=True); its exit status comes over the connection, since the server's handler, not
    this process, is its parent."""

    def __init__(self, cmd: list[str], *, cwd: Path, env: dict[str, str], stderr: int):
        self.args = cmd
        self.returncode: Optional[int] = None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe() if stderr == subprocess.PIPE else (None, out_w)
        self._chunks: dict[int, list[bytes]] = {fd: [] for fd in (out_r, err_r) if fd is not None}
        self._out, self._err = out_r, err_r
        self._done: set[int] = set()  # the pipes read to their end, closed
        request = json.dumps({"argv": [str(a) for a in cmd], "cwd": str(cwd), "env": env}).encode()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._conn.connect(_server_path(env.get("TRITON_INTERPRET") == "1"))
            socket.send_fds(self._conn, [request], [out_w, err_w])
        finally:
            os.close(out_w)
            if err_r is not None:
                os.close(err_w)
        self.pid = int(self._conn.recv(64).decode())

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self._conn.setblocking(False)
            try:
                self._exited(self._conn.recv(64))
            except BlockingIOError:
                pass
            finally:
                self._conn.setblocking(True)
            if self.returncode is not None:
                self._conn.close()  # the handler's last word is in
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._exited(self._conn.recv(64))
            except socket.timeout:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            finally:
                self._conn.settimeout(None)
            self._conn.close()  # the handler's last word is in
        return self.returncode  # type: ignore[return-value]

    def communicate(self, timeout: Optional[float] = None) -> tuple[str, Optional[str]]:
        """Both pipes to their end (every writer closed), then the exit status, as Popen.communicate; what was read
        before a TimeoutExpired is kept for the next call."""
        deadline = None if timeout is None else time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        for fd in self._chunks:
            if fd not in self._done:
                sel.register(fd, selectors.EVENT_READ)
        try:
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        self._chunks[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
                        self._done.add(key.fd)
        finally:
            sel.close()
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 1))  # the exit status follows
        text = {fd: b"".join(c).decode(errors="replace") for fd, c in self._chunks.items()}
        return text[self._out], (text[self._err] if self._err is not None else None)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self, kill: bool = False) -> None:
        """The pipes and the connection closed; with kill, the command's process group killed first."""
        if kill and self.poll() is None:
            _kill(self.pid)
        for fd in self._chunks:
            if fd not in self._done:
                os.close(fd)
                self._done.add(fd)
        self._conn.close()

    def _exited(self, message: bytes) -> None:
        if not message:  # the handler is gone without a word: it was killed
            raise RuntimeError(f"the preloaded server lost the command {self.args[:3]} (pid {self.pid})")
        self.returncode = int(message.decode())

    def __del__(self) -> None:  # a test that never read the output to its end leaves no descriptor open
        try:
            self.close()
        except (AttributeError, OSError):  # half made (the server did not answer) or closed already
            pass


def _servable(cmd: list[str], cwd: Path, env: dict[str, str]) -> bool:
    path = (cwd / cmd[1]).resolve() if len(cmd) >= 2 else None
    script = path is not None and ((path.parent == ROOT and path.name in SCRIPTS)
                                   or (path.parent == ROOT / "tests" and path.suffix == ".py"))
    code = len(cmd) >= 3 and cmd[1] == "-c"
    return (os.environ.get(OFF_ENV) != "1" and cmd[0] == sys.executable and (script or code)
            and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"))


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
