"""MLflow, and only MLflow: experiments, runs, nested sweeps, reading runs back. Plain dicts in and out.

Never imports torch or triton. Uses MlflowClient with explicit run ids (no fluent active-run stack), so a
parent run opened by a Hydra callback and child runs opened by jobs never depend on global state.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import re
import socket
import sqlite3
from pathlib import Path
from typing import Any, Optional

from filelock import FileLock
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.time import get_current_time_millis

from convtune import interrupts
from convtune.errors import StoreError
from convtune.record import Status, Tag

PARENT_TAG = "mlflow.parentRunId"
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
# An unreachable tracking server took 254 s of MLflow's default retries to fail: one retry, 5 s a request.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
SCHEMES = "sqlite:///path/to/mlflow.db, http(s)://host:port (an MLflow server) or a database URI (postgresql://...)"
# The MLflow UI marks an experiment with this tag as model training (its runs table) rather than GenAI. The UI of
# MLflow 3.17, though, decides by its own "GenAI | Model training" switch (remembered in the browser, GenAI at
# first) and reads the tag only where that switch is off: in a real browser an experiment opened on the GenAI
# trace overview with the tag set (benchmarks/ui_check.py). The switch also follows the link's `workflowType`,
# so the links convtune prints carry it (ui_link).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
UI_DEFAULT = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def ui_link(experiment_id: str, base: str = UI_DEFAULT) -> str:
    """The MLflow UI's page of an experiment's runs, in the model-training view (see EXPERIMENT_KIND)."""
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def resolve_uri(uri: str, base_dir: Path) -> str:
    """Make a relative `sqlite:///path` absolute against base_dir and create its folder; others unchanged."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_absolute():
            path = base_dir / path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(uri, f"cannot create the folder {path.parent}: {e.strerror}") from None
        return f"sqlite:///{path}"
    return uri


def ensure_sqlite_store(uri: str) -> None:
    """Create a new SQLite store safely: under a file lock, into a temporary file (schema migrated, WAL mode for
    parallel writers on one host), renamed into place. Several processes creating one store at once, or a
    Ctrl-C in the ~2 s of its creation, left it unopenable before ("table _alembic_tmp_latest_metrics already
    exists"); now a store either does not exist or is complete. Other URIs: nothing to do."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri[len("sqlite:///"):])
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=600):
        if path.exists():
            return  # another process created it while this one waited
        for stale in path.parent.glob(f".{path.name}.creating-*"):  # left by a creator that was interrupted
            stale.unlink(missing_ok=True)
        tmp = path.with_name(f".{path.name}.creating-{os.getpid()}")
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments()  # creates the tables, migrated
        con = sqlite3.connect(tmp)
        try:
            con.execute("PRAGMA journal_mode=WAL")  # persistent: readers and writers of one host stop blocking
        finally:
            con.close()
        os.replace(tmp, path)


@functools.lru_cache(maxsize=None)  # registered once per process
def _close_sqlite_at_exit() -> None:
    atexit.register(_close_sqlite_connections)


def _close_sqlite_connections() -> None:
    """Close the SQLite connections MLflow keeps pooled, so that the last one folds the WAL into the database
    file and removes mlflow.db-wal/-shm, as collecting them at an ordinary exit does: the entry points end
    without that collection (interrupts.exit_now)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for engine in list(getattr(SqlAlchemyStore, "_engine_map", {}).values()):
        engine.dispose()


def this_process() -> dict[str, str]:
    """The host and process a run is recorded by: `pid:start` (the start time in clock ticks since boot, from
    /proc, tells a reused pid apart; without /proc, the pid alone)."""
    return {Tag.HOST: socket.gethostname(), Tag.PROCESS: f"{os.getpid()}:{_start_ticks(os.getpid()) or ''}"}


def _start_ticks(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]  # field 22, after the command name
    except (OSError, IndexError):
        return None


def _process_alive(process: str) -> bool:
    pid_text, _, start = process.partition(":")
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True  # unreadable or another user's: never reap what may be alive
    return not start or _start_ticks(pid) in (None, start)


def say_reaped(run_ids: list[str]) -> None:
    if run_ids:
        print(f"marked {len(run_ids)} run(s) KILLED whose process on this host is gone (kill -9 or a crash): "
              + ", ".join(run_ids), flush=True)


def _artifact_location(uri: str, experiment: str) -> Optional[str]:
    """For a SQLite store, keep artifacts beside the database: <db folder>/<experiment>/."""
    if not uri.startswith("sqlite:///"):
        return None  # a tracking server decides for itself
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", experiment).strip("_") or "experiment"
    return (Path(uri[len("sqlite:///"):]).parent / slug).as_uri()


def _uninterrupted(method: Any) -> Any:
    """A store write is never cut in half by Ctrl-C: a signal waits until the call returns (interrupts.deferred)."""
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with interrupts.deferred():
            return method(*args, **kwargs)
    return wrapper


class Tracker:
    def __init__(self, uri: str) -> None:
        """Opens the store and reads from it once, so that a store that cannot be used fails here, in one line
        (StoreError), and not in the middle of a run."""
        self.uri = uri
        if uri.startswith(("http://", "https://")):
            for k, v in HTTP_DEFAULTS.items():
                os.environ.setdefault(k, v)
        try:
            ensure_sqlite_store(uri)
            if uri.startswith("sqlite:///"):
                _close_sqlite_at_exit()
            self.client = MlflowClient(tracking_uri=uri)
            self.client.search_experiments(max_results=1)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - MLflow, SQLAlchemy, requests, OS errors: all mean "unusable"
            # the first line, without the "(sqlite3.DatabaseError) " prefix SQLAlchemy puts before it
            first = re.sub(r"^\([\w.]+\) ", "", (str(e).strip().splitlines() or [type(e).__name__])[0])
            if "unsupported URI" in first or "Could not find a registered" in first:
                first = f"unsupported scheme; use {SCHEMES}"
            elif "Max retries exceeded" in first or "timed out" in first.lower():
                first = "no MLflow server answers there (is `mlflow server` running, and is the address right?)"
            raise StoreError(uri, first[:300]) from None

    @_uninterrupted
    def experiment_id(self, name: str) -> str:
        """The experiment's id, creating it if needed (a concurrent creator is tolerated)."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.tags.get(EXPERIMENT_KIND[0]) is None:  # made before convtune set it: the UI's view, too
                self.client.set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
            return exp.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=_artifact_location(self.uri, name),
                                                 tags=dict([EXPERIMENT_KIND]))
        except MlflowException:
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    @_uninterrupted
    def start_run(self, experiment_id: str, run_name: str, tags: dict[str, Any],
                  parent_id: Optional[str] = None) -> str:
        all_tags = {k: str(v) for k, v in {**this_process(), **tags}.items()}
        if parent_id:
            all_tags[PARENT_TAG] = parent_id
        return self.client.create_run(experiment_id, run_name=run_name, tags=all_tags).info.run_id

    @_uninterrupted
    def log(self, run_id: str, params: Optional[dict[str, Any]] = None,
            metrics: Optional[dict[str, Optional[float]]] = None, tags: Optional[dict[str, Any]] = None) -> None:
        now = get_current_time_millis()
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()
                     if v is not None and not (isinstance(v, float) and math.isnan(v))],
            params=[Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )

    @_uninterrupted
    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, text, artifact_file)

    @_uninterrupted
    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        self.client.log_figure(run_id, figure, artifact_file)

    @_uninterrupted
    def end(self, run_id: str, status: str) -> None:
        """status: FINISHED, FAILED or KILLED."""
        self.client.set_terminated(run_id, status=status)

    def reap_orphans(self) -> list[str]:
        """Mark KILLED the RUNNING runs that this host's processes recorded and that are gone (a `kill -9`, a
        crash, a lost machine): every other run, and every process still alive, is left alone."""
        host = socket.gethostname()
        reaped = []
        for r in self.search(f"attributes.status = 'RUNNING' AND tags.`{Tag.HOST}` = '{host}'"):
            process = r["tags"].get(Tag.PROCESS)
            if not process or _process_alive(process):
                continue
            self.log(r["run_id"], tags={Tag.STATUS: Status.KILLED, Tag.ERROR_TYPE: "ProcessGone",
                                        Tag.ERROR_MESSAGE: f"process {process.split(':')[0]} on {host} ended "
                                                           "without recording this run's outcome"})
            self.end(r["run_id"], "KILLED")
            reaped.append(r["run_id"])
        return reaped

    def get(self, run_id: str) -> dict[str, Any]:
        return _as_dict(self.client.get_run(run_id))

    def search(self, filter_string: str) -> list[dict[str, Any]]:
        """Runs of every experiment matching an MLflow filter (AND only)."""
        ids = [e.experiment_id for e in self.client.search_experiments()]
        runs = self.client.search_runs(ids, filter_string=filter_string, max_results=50000) if ids else []
        return [_as_dict(r) for r in runs]

    def children(self, parent_id: str) -> list[dict[str, Any]]:
        parent = self.client.get_run(parent_id)
        runs = self.client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'",
                                       max_results=50000)
        return [_as_dict(r) for r in runs]


def _as_dict(run: Any) -> dict[str, Any]:
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "status": run.info.status,
        "experiment_id": run.info.experiment_id,
        "start_time": run.info.start_time,
        "params": dict(run.data.params),
        "metrics": dict(run.data.metrics),
        "tags": dict(run.data.tags),
    }
