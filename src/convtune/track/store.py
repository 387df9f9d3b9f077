"""MLflow, and only MLflow: experiments, runs, nested sweeps, reading runs back. Plain dicts in and out.

Never imports torch or triton. Uses MlflowClient with explicit run ids (no fluent active-run stack), so a
parent run opened by a Hydra callback and child runs opened by jobs never depend on global state.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import socket
from pathlib import Path
from typing import Any, Optional

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.time import get_current_time_millis

from convtune import interrupts
from convtune.errors import ConfigError, StoreError
from convtune.track import sqlite_store
from convtune.record import Metric as RecordMetric, Status, Tag

PARENT_TAG = "mlflow.parentRunId"
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
# An unreachable tracking server took 254 s of MLflow's default retries to fail: one retry, 5 s a request.
# A frozen server (SIGSTOP) accepts connections and never answers: each request then ends after the timeout, twice.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
HTTP_BOUND_S = 15  # one request at most: 2 tries of 5 s and the backoff between them
SCHEMES = "sqlite:///path/to/mlflow.db, http(s)://host:port (an MLflow server) or a database URI (postgresql://...)"
# The MLflow UI marks an experiment with this tag as model training (its runs table) rather than GenAI. The UI of
# MLflow 3.17, though, decides by its own "GenAI | Model training" switch (remembered in the browser, GenAI at
# first) and reads the tag only where that switch is off: in a real browser an experiment opened on the GenAI
# trace overview with the tag set (benchmarks/ui_check.py). The switch also follows the link's `workflowType`,
# so the links convtune prints carry it (ui_link).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
UI_DEFAULT = "http://127.0.0.1:5000"
# MLflow logs a database error with its whole traceback before raising it; convtune says it in one line (StoreError).
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)  # where `mlflow ui` serves by default
# urllib3 warns of each retry of an unreachable server ("Retrying ... NewConnectionError") before MLflow gives up;
# convtune then says it in one line (one_line), so the retries' own lines are noise
logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def ui_link(experiment_id: str, base: str = UI_DEFAULT) -> str:
    """The MLflow UI's page of an experiment's runs, in the model-training view (see EXPERIMENT_KIND)."""
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def resolve_uri(uri: str, base_dir: Path) -> str:
    """Make a relative `sqlite:///path` absolute against base_dir and create its folder; others unchanged. An
    in-memory SQLite store is refused (sqlite_store.validate)."""
    if uri.startswith("sqlite:"):
        sqlite_store.validate(uri)
        path = Path(uri[len("sqlite:///"):])
        if not path.is_absolute():
            path = base_dir / path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(uri, f"cannot create the folder {path.parent}: {e.strerror}") from None
        return f"sqlite:///{path}"
    return uri


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


def process_alive(process: str) -> bool:
    """Whether the process a run recorded (Tag.PROCESS, `pid:start`) is alive on this host."""
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


def one_line(uri: str, e: BaseException) -> StoreError:
    """Any failure of the store (MLflow, SQLAlchemy, requests, OS errors) as one StoreError line."""
    text = e.strerror if isinstance(e, OSError) and e.strerror else str(e).strip()
    # the first line, without the "(sqlite3.DatabaseError) " prefix SQLAlchemy puts before it
    first = re.sub(r"^\([\w.]+\) ", "", (text.splitlines() or [type(e).__name__])[0])
    if "unsupported URI" in first or "Could not find a registered" in first:
        first = f"unsupported scheme; use {SCHEMES}"
    elif any(w in text for w in ("Max retries exceeded", "ReadTimeout", "ConnectTimeout")) or "timed out" in text.lower():
        first = (f"no MLflow server answers there within {HTTP_BOUND_S} s (is `mlflow server` running, not stopped, "
                 "and is the address right?)")
    else:
        first = sqlite_store.explain(text) or first
    return StoreError(uri, first[:300])


DATABASE_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}
CONNECT_BOUND_S = 5.0


def check_database_port(uri: str) -> None:
    """A database URI (postgresql://host:port/...) whose port takes no connection is refused at once, in one line:
    MLflow retries creating its engine 10 times with a doubling sleep (~102 s), and a closed port took 118 s to
    fail. A server that accepts the connection is MLflow's to judge; a URI without a host (a Unix socket) is too."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in DATABASE_PORTS or not parts.hostname:
        return
    try:
        port = parts.port or DATABASE_PORTS[scheme]
    except ValueError:
        raise StoreError(uri, "its port is not a number") from None
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_BOUND_S).close()
    except OSError as e:
        why = e.strerror or ("no answer within %g s" % CONNECT_BOUND_S if isinstance(e, socket.timeout) else str(e))
        raise StoreError(uri, f"no database server takes connections at {parts.hostname}:{port} ({why}); is it "
                              "running, and is the address right?") from None


def _store_call(method: Any) -> Any:
    """A store call is never cut in half by Ctrl-C (a signal waits until it returns: interrupts.deferred), and any
    failure of the store in it (a full disk, a damaged table, a server gone or frozen) is one StoreError line."""
    @functools.wraps(method)
    def wrapper(self: "Tracker", *args: Any, **kwargs: Any) -> Any:
        with interrupts.deferred():
            try:
                return method(self, *args, **kwargs)
            except StoreError:
                raise
            except Exception as e:  # noqa: BLE001 - MLflow, SQLAlchemy, requests, OS errors: all mean "unusable"
                raise one_line(self.uri, e) from None
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
            check_database_port(uri)
            if uri.startswith("sqlite:"):
                sqlite_store.validate(uri)
                sqlite_store.ensure(uri)
                sqlite_store.check_once(uri)  # a damaged store is refused before anything is written to it
                sqlite_store.close_at_exit()
            self.client = MlflowClient(tracking_uri=uri)
            self.client.search_experiments(max_results=1)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - MLflow, SQLAlchemy, requests, OS errors: all mean "unusable"
            raise one_line(uri, e) from None

    @_store_call
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

    @_store_call
    def start_run(self, experiment_id: str, run_name: str, tags: dict[str, Any],
                  parent_id: Optional[str] = None) -> str:
        all_tags = {k: str(v) for k, v in {**this_process(), **tags}.items()}
        if parent_id:
            all_tags[PARENT_TAG] = parent_id
        return self.client.create_run(experiment_id, run_name=run_name, tags=all_tags).info.run_id

    @_store_call
    def log(self, run_id: str, params: Optional[dict[str, Any]] = None,
            metrics: Optional[dict[str, Optional[float]]] = None, tags: Optional[dict[str, Any]] = None) -> None:
        now = get_current_time_millis()
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in _shown_first(metrics or {})
                     if v is not None and not (isinstance(v, float) and math.isnan(v))],
            params=[Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )

    @_store_call
    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, text, artifact_file)

    @_store_call
    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        self.client.log_figure(run_id, figure, artifact_file)

    @_store_call
    def reopen(self, run_id: str, process_tags: dict[str, str]) -> None:
        """Mark an ended run RUNNING again, as this process's (tune_model.py going on in a model's run): the process
        tags are this one's, so that reap_orphans leaves it alone while this process lives."""
        self.client.update_run(run_id, status="RUNNING")
        self.log(run_id, tags=process_tags)

    @_store_call
    def end(self, run_id: str, status: str) -> None:
        """status: FINISHED, FAILED or KILLED."""
        self.client.set_terminated(run_id, status=status)

    @_store_call
    def reap_orphans(self) -> list[str]:
        """Mark KILLED the RUNNING runs that this host's processes recorded and that are gone (a `kill -9`, a
        crash, a lost machine): every other run, and every process still alive, is left alone."""
        host = socket.gethostname()
        reaped = []
        for r in self.search(f"attributes.status = 'RUNNING' AND tags.`{Tag.HOST}` = '{host}'"):
            process = r["tags"].get(Tag.PROCESS)
            if not process or process_alive(process):
                continue
            self.log(r["run_id"], tags={Tag.STATUS: Status.KILLED, Tag.ERROR_TYPE: "ProcessGone",
                                        Tag.ERROR_MESSAGE: f"process {process.split(':')[0]} on {host} ended "
                                                           "without recording this run's outcome"})
            self.end(r["run_id"], "KILLED")
            reaped.append(r["run_id"])
        return reaped

    @_store_call
    def get(self, run_id: str) -> dict[str, Any]:
        return _as_dict(self.client.get_run(run_id))

    @_store_call
    def search(self, filter_string: str) -> list[dict[str, Any]]:
        """Runs of every experiment matching an MLflow filter (AND only)."""
        ids = [e.experiment_id for e in self.client.search_experiments()]
        runs = self.client.search_runs(ids, filter_string=filter_string, max_results=50000) if ids else []
        return [_as_dict(r) for r in runs]

    @_store_call
    def children(self, parent_id: str) -> list[dict[str, Any]]:
        parent = self.client.get_run(parent_id)
        runs = self.client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'",
                                       max_results=50000)
        return [_as_dict(r) for r in runs]


def outer_run(tracker: Tracker, run_id: Optional[str], experiment_id: str) -> Optional[str]:
    """tracking.parent_run, checked: a run of this store and of the experiment the sweep writes to (the MLflow UI
    nests runs within one experiment only)."""
    if not run_id:
        return None
    try:
        run = tracker.get(run_id)
    except ValueError:
        run = None
    if run is None or run["experiment_id"] != experiment_id:
        raise ConfigError("tracking.parent_run", run_id, f"the id of a run in {tracker.uri}, in the experiment written to "
                          f"(id {experiment_id}; tracking.experiment names it)")
    return run_id


def _shown_first(metrics: dict[str, Any]) -> list[tuple[str, Any]]:
    """A run's metrics with latency, TFLOPS and GB/s first (record.Metric.SHOWN_FIRST: why), the rest as given."""
    first = RecordMetric.SHOWN_FIRST
    return sorted(metrics.items(), key=lambda kv: first.index(kv[0]) if kv[0] in first else len(first))


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
