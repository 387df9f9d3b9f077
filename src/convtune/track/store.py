"""MLflow, and only MLflow: experiments, runs, nested sweeps, reading runs back. Plain dicts in and out.

Never imports torch or triton. Uses MlflowClient with explicit run ids (no fluent active-run stack), so a
parent run opened by a Hydra callback and child runs opened by jobs never depend on global state.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any, Optional

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.time import get_current_time_millis

from convtune import interrupts

PARENT_TAG = "mlflow.parentRunId"
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def resolve_uri(uri: str, base_dir: Path) -> str:
    """Make a relative `sqlite:///path` absolute against base_dir and create its folder; others unchanged."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_absolute():
            path = base_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    return uri


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
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)

    @_uninterrupted
    def experiment_id(self, name: str) -> str:
        """The experiment's id, creating it if needed (a concurrent creator is tolerated)."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=_artifact_location(self.uri, name))
        except MlflowException:
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    @_uninterrupted
    def start_run(self, experiment_id: str, run_name: str, tags: dict[str, Any],
                  parent_id: Optional[str] = None) -> str:
        all_tags = {k: str(v) for k, v in tags.items()}
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
