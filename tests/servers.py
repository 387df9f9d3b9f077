"""Real servers on 127.0.0.1 for the tests whose subject is the shared store: a PostgreSQL cluster made with
initdb in a temporary folder, and `mlflow server` over it. Each is a context manager that stops what it
started, whatever happens in the test."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return versions[-1].parent if versions else None


def _as_db_user(cmd: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root: run them as Debian's `postgres` user then
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def postgres():
    """A fresh PostgreSQL cluster on 127.0.0.1 with a database `mlflow`; yields its SQLAlchemy URI
    (postgresql+psycopg://, psycopg 3)."""
    bin_dir = postgres_bin()
    assert bin_dir is not None, "PostgreSQL's initdb is not installed (Debian: apt-get install postgresql)"
    home = Path(tempfile.mkdtemp(prefix="convtune-pg-"))
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
    data, port = home / "data", free_port()
    run = lambda *cmd: subprocess.run(_as_db_user([str(bin_dir / cmd[0]), *cmd[1:]]), check=True,  # noqa: E731
                                      capture_output=True, text=True, timeout=120)
    try:
        run("initdb", "-D", str(data), "-U", "convtune", "--auth=trust", "-E", "UTF8")
        run("pg_ctl", "-D", str(data), "-l", str(home / "log"), "-w", "-t", "60", "start",
            "-o", f"-p {port} -c listen_addresses=127.0.0.1 -k {home}")
        run("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "convtune", "mlflow")
        yield f"postgresql+psycopg://convtune@127.0.0.1:{port}/mlflow"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_db_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                           capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts: Path):
    """`mlflow server` on 127.0.0.1 over `backend_uri`, serving artifacts from `artifacts`; yields its URL once
    /health answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(artifacts.parent / "mlflow-server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--backend-store-uri", backend_uri, "--artifacts-destination", artifacts.as_uri(),
                               "--workers", "1"],
                              # no job runner (MLflow's huey consumers, which tracking does not use): ~38 CPU-s a
                              # start on two cores, about half of the shared-store test's CPU time
                              env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (artifacts.parent / "mlflow-server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not answer /health within 180 s"
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
