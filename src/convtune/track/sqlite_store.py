"""The SQLite store's own rules: a path read exactly as written, created whole or not at all, checked once a
process before anything is written into it, its pooled connections closed at exit.

Plain standard library, filelock and MLflow's client; never torch or triton.
"""

from __future__ import annotations

import atexit
import functools
import os
import sqlite3
import time
from pathlib import Path
from typing import Optional

from filelock import FileLock

from convtune.errors import StoreError

PREFIX = "sqlite:///"
# SQLAlchemy reads "?" as the start of a query string and "%XX" as an escape: `sqlite:///a?b/mlflow.db` sent every run
# to the file `a` and left an empty database at the named path (exit 0); `a%41b` named the folder `aAb`, which did
# not exist, and MLflow retried opening it for ~100 s. "#" starts a fragment. Such paths are refused, never
# reinterpreted.
RESERVED = {"?": "a query string", "%": "a percent-escape", "#": "a fragment"}
QUICK_CHECK_BOUND_S = 10.0  # PRAGMA quick_check is linear in the store's size: ~0.1 s for 10,000 runs here
_checked: set[str] = set()  # stores checked by this process


def path_of(uri: str) -> Path:
    return Path(uri[len(PREFIX):])


def validate(uri: str) -> None:
    """Refuse, in one line, a SQLite URI whose path SQLAlchemy would read as something other than the file named,
    and an in-memory database (`sqlite://`, `sqlite:///:memory:`): its runs would be gone when the process ends,
    after a run reported ok."""
    if not uri.startswith(PREFIX) or uri[len(PREFIX):] in ("", ":memory:") or uri.startswith("sqlite:///file::memory:"):
        raise StoreError(uri, "an in-memory SQLite database keeps nothing once the process ends; name a file: "
                              "sqlite:///path/to/mlflow.db")
    path = uri[len(PREFIX):]
    for char, what in RESERVED.items():
        if char in path:
            raise StoreError(uri, f"{char!r} in a SQLite path is read as {what} by SQLAlchemy, so the runs would go "
                                  "to another file than the one named; use a path without '?', '%' or '#'")


def ensure(uri: str) -> None:
    """Create a new SQLite store safely: under a file lock, into a temporary file (schema migrated, WAL mode for
    parallel writers on one host), renamed into place. Several processes creating one store at once, or a
    Ctrl-C in the ~2 s of its creation, left it unopenable before ("table _alembic_tmp_latest_metrics already
    exists"); now a store either does not exist or is complete. A creation that fails (a full disk) removes its
    temporary files: a 585 KB one left behind kept a full disk full."""
    from mlflow.tracking import MlflowClient

    path = path_of(uri)
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=600):
        if path.exists():
            return  # another process created it while this one waited
        for stale in path.parent.glob(f".{path.name}.creating-*"):  # left by a creator that was interrupted
            stale.unlink(missing_ok=True)
        tmp = path.with_name(f".{path.name}.creating-{os.getpid()}")
        try:
            MlflowClient(tracking_uri=f"{PREFIX}{tmp}").search_experiments()  # creates the tables, migrated
            _dispose_engine(f"{PREFIX}{tmp}")
            con = sqlite3.connect(tmp)
            try:
                con.execute("PRAGMA journal_mode=WAL")  # persistent: readers and writers of one host stop blocking
            finally:
                con.close()
            os.replace(tmp, path)
        except BaseException:
            for side in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
                side.unlink(missing_ok=True)
            raise
    _checked.add(str(path))  # just made whole: nothing to check


def check_once(uri: str) -> None:
    """`PRAGMA quick_check` on an existing store, once per process and within QUICK_CHECK_BOUND_S: a damaged page
    (an index, a table) is refused in one line before anything is written into the file. A check that runs out of
    time passes (the store is large, not known to be damaged)."""
    path = path_of(uri)
    if str(path) in _checked or not path.exists():
        return
    if path.is_dir():
        raise StoreError(uri, f"{path} is a folder, not a database file; name the file inside it "
                              f"(sqlite:///{path / 'mlflow.db'})")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=20)
    deadline = time.monotonic() + QUICK_CHECK_BOUND_S
    con.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)  # non-zero: interrupt the statement
    try:
        rows = con.execute("PRAGMA quick_check").fetchall()
    except sqlite3.OperationalError as e:
        if "interrupted" in str(e):
            rows = [("ok",)]
        else:
            raise StoreError(uri, f"SQLite cannot read it ({e}); restore it from a backup or point tracking.uri "
                                  "at a new store") from None
    except sqlite3.DatabaseError as e:
        what = "not an SQLite database" if "not a database" in str(e) else "the database is damaged"
        raise StoreError(uri, f"{what} ({e}); restore it from a backup or point tracking.uri at a new store; "
                              "nothing was written to it") from None
    finally:
        con.close()
    foreign = _foreign_tables(path)
    if foreign:
        raise StoreError(uri, f"an SQLite database that is not an MLflow store (it has tables {', '.join(foreign[:4])}"
                              f"{', ...' if len(foreign) > 4 else ''} and none of MLflow's); convtune adds nothing to "
                              "it: point tracking.uri at a new file or at an MLflow store")
    # one line each ("*** in database main ***" is a heading SQLite puts before the first)
    problems = [" ".join(str(r[0]).replace("*** in database main ***", "").split()) for r in rows if r and r[0] != "ok"]
    if problems:
        raise StoreError(uri, f"the database is damaged (quick_check: {problems[0][:160]}"
                              f"{f'; {len(problems) - 1} more' if len(problems) > 1 else ''}); restore it from a "
                              "backup or point tracking.uri at a new store; nothing was written to it")
    _checked.add(str(path))


# Tables every MLflow store has (its schema's migrations keep `alembic_version`; `experiments` and `runs` since 1.0)
MLFLOW_TABLES = ("alembic_version", "experiments", "runs")


def _foreign_tables(path: Path) -> list[str]:
    """The tables of a database that has tables and is not an MLflow store (none of MLFLOW_TABLES): MLflow would
    otherwise add its ~70 tables to someone else's database. An empty database (no tables) is MLflow's to make."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=20)
    try:
        names = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    finally:
        con.close()
    return [] if not names or set(MLFLOW_TABLES) & set(names) else names


def _dispose_engine(uri: str) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)
    if engine is not None:
        engine.dispose()


@functools.lru_cache(maxsize=None)  # registered once per process
def close_at_exit() -> None:
    atexit.register(_close_connections)


def _close_connections() -> None:
    """Close the SQLite connections MLflow keeps pooled, so that the last one folds the WAL into the database
    file and removes mlflow.db-wal/-shm, as collecting them at an ordinary exit does: the entry points end
    without that collection (interrupts.exit_now)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for engine in list(getattr(SqlAlchemyStore, "_engine_map", {}).values()):
        engine.dispose()


def explain(message: str) -> Optional[str]:
    """A plainer line for SQLite's terse errors about the disk, or None."""
    if "disk I/O error" in message:
        return ("disk I/O error: SQLite could not write the database or its side files (-wal, -shm) beside it; "
                "is the disk full or the folder read-only?")
    if "database or disk is full" in message:
        return "the disk is full (SQLite: database or disk is full)"
    if "No space left on device" in message:
        return "the disk is full (No space left on device)"
    if "readonly database" in message or "read-only" in message:
        return "the database is read-only (the file, its folder or the mount)"
    return None
