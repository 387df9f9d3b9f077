"""The server of tests/preloaded.py: imports the heavy libraries once, then forks a process for each command line.

    python tests/preload_server.py SOCKET

Each request on the Unix socket (one SOCK_SEQPACKET message: argv, cwd, env as JSON, with the caller's stdout and
stderr pipes as file descriptors) is served by a fork that runs the script (or `-c` code) as `python ...` would: its own
session and process group (so that a timeout kills the command with whatever it started, and nothing of it reaches
the server), stdin from /dev/null, the caller's environment and folder, sys.path[0] as Python sets it, the code run as
__main__, then the exit handlers and the exit status as Python reports it. A handler forked for the connection
forks that child, sends its pid, waits for it and sends its exit status, so that commands run side by side (the
tests that start four sweeps at once). Nothing of convtune is imported here: each command imports it fresh.
"""

import atexit
import json
import os
import runpy
import socket
import sys
import traceback

# What every command imports (~3.5 CPU-s a process on CI's machine); only libraries that start no thread on import
import hydra  # noqa: F401,E402
import hydra.main  # noqa: F401,E402
import mlflow  # noqa: F401,E402
import numpy  # noqa: F401,E402
import omegaconf  # noqa: F401,E402
import torch  # noqa: F401,E402
# Triton only where the command runs under TRITON_INTERPRET=1: its language is defined for one mode when it is
# imported, and a command without the variable settles the interpreter itself before Triton loads (setup.activate),
# as in a user's own process, where torch does not import Triton (0.1 s of imports).
if os.environ.get("TRITON_INTERPRET") == "1":
    import triton  # noqa: F401,E402
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401,E402  the SQLite store's engine and models (0.65 s)
import matplotlib  # noqa: E402  a sweep's pictures (convtune.track.plots, headless): 1.0 CPU-s to import
matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: F401,E402
from mlflow.tracking import MlflowClient  # noqa: F401,E402


def child(request: dict, fds: list[int]) -> None:
    """The command's process: never returns."""
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (null, *fds):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        try:
            if argv[1] == "-c":  # as `python -c CODE ARGS`: sys.path[0] is the working folder
                sys.argv = ["-c", *argv[3:]]
                sys.path[0] = ""
                exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            else:  # as `python SCRIPT ARGS`: sys.path[0] is the script's folder
                sys.argv = argv[1:]
                sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
                runpy.run_path(argv[1], run_name="__main__")
            code = 0
        except SystemExit as e:  # as the interpreter reports sys.exit(...)
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def handle(conn: socket.socket) -> None:
    """One connection, in a process of its own: never returns."""
    code = 1
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            conn.close()
            child(request, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(str(pid).encode())
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
        except OSError:  # the caller gave up (its timeout)
            pass
        code = 0
    finally:
        os._exit(code)


def main(path: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path + ".tmp")
    server.listen(16)
    os.rename(path + ".tmp", path)  # the client waits for this name: the imports are done
    while True:
        conn, _ = server.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            handle(conn)
        conn.close()
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # the handlers that are done
                pass
        except ChildProcessError:
            pass


if __name__ == "__main__":
    main(sys.argv[1])
