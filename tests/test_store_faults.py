"""Stores that are checked: paths read exactly as written, damaged files refused before any write, a
store that stops taking writes is one line, and nothing temporary is left behind. In-process, on real SQLite
files; benchmarks/fault_campaign.py runs the cases that need a real full disk or a frozen server."""

import errno
import hashlib
import os
import sqlite3

import pytest
from sqlalchemy import event

from convtune.errors import StoreError
from convtune.track import sqlite_store
from convtune.track.store import Tracker, resolve_uri


@pytest.mark.parametrize("name,what", [("a?b", "a query string"), ("a%41b", "a percent-escape"),
                                       ("a#b", "a fragment")])
def test_a_sqlite_path_sqlalchemy_would_reinterpret_is_refused_in_one_line(tmp_path, name, what):
    """`?` sent every run to another file (exit 0) and `%41` cost ~100 s of MLflow's retries."""
    uri = f"sqlite:///{tmp_path / name / 'mlflow.db'}"
    for attempt in (lambda: resolve_uri(uri, tmp_path), lambda: Tracker(uri)):
        with pytest.raises(StoreError, match=rf"read as {what} by SQLAlchemy, so the runs would go to another file"):
            attempt()
    assert list(tmp_path.iterdir()) == []  # nothing created anywhere


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _damage_a_page(db, table_or_index):
    """Overwrite the b-tree header of `table_or_index`'s root page (its first bytes) with an invalid page type."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table_or_index,)).fetchone()[0]
    con.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\x07" * 8)  # page type 7 does not exist


@pytest.mark.parametrize("damaged", ["index_latest_metrics_run_uuid", "metrics"])
def test_a_damaged_page_is_refused_before_anything_is_written(tmp_path, store, damaged):
    t = Tracker(store)
    run = t.start_run(t.experiment_id("e"), "r", {})
    t.log(run, metrics={"latency_ms": 1.0})
    t.end(run, "FINISHED")
    db = tmp_path / "mlruns" / "mlflow.db"
    indexes = [r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")]
    assert damaged in indexes
    _damage_a_page(db, damaged)
    sqlite_store._checked.discard(str(db))  # as a new process would
    before = _sha(db)
    with pytest.raises(StoreError, match=r"the database is damaged \((quick_check: .*|database disk image is malformed)\); restore it from a backup or "
                                         r"point tracking.uri at a new store; nothing was written to it"):
        Tracker(store)
    assert _sha(db) == before


def test_a_store_whose_creation_fails_leaves_no_temporary_file(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    real = os.replace

    def full(src, dst):
        if ".creating-" in str(src):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(StoreError, match=r"cannot be used: the disk is full \(No space left on device\)$"):
        Tracker(uri)
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["mlflow.db.lock"]


def test_a_store_that_fills_up_mid_sweep_is_one_line(tmp_path, store):
    """A real SQLite 'database or disk is full', made by capping the file's pages on every connection MLflow opens."""
    t = Tracker(store)
    exp = t.experiment_id("e")
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engine = SqlAlchemyStore._engine_map[store]
    pages = sqlite3.connect(store[len("sqlite:///"):]).execute("PRAGMA page_count").fetchone()[0]

    def cap(con, _):
        con.execute(f"PRAGMA max_page_count = {pages}")
    event.listen(engine, "connect", cap)
    engine.dispose()  # new connections, each capped
    try:
        with pytest.raises(StoreError) as e:
            for i in range(200):
                t.log(t.start_run(exp, f"r{i}", {"pad": "x" * 2000}), params={"p": "y" * 2000})
        assert str(e.value) == f"tracking.uri={store!r} cannot be used: the disk is full (SQLite: database or disk is full)"
    finally:
        event.remove(engine, "connect", cap)
        engine.dispose()


@pytest.mark.parametrize("uri", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_store_is_refused_since_its_runs_would_be_gone_at_exit(tmp_path, uri):
    for attempt in (lambda: resolve_uri(uri, tmp_path), lambda: Tracker(uri)):
        with pytest.raises(StoreError, match=r"an in-memory SQLite database keeps nothing once the process ends"):
            attempt()


def test_a_database_that_is_not_an_mlflow_store_is_refused_and_left_as_it_was(tmp_path):
    db = tmp_path / "theirs.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE people (id INTEGER, name TEXT)")
    con.execute("INSERT INTO people VALUES (1, 'a')")
    con.commit()
    con.close()
    before = _sha(db)
    with pytest.raises(StoreError, match=r"not an MLflow store \(it has tables people and none of MLflow's\)"):
        Tracker(f"sqlite:///{db}")
    assert _sha(db) == before
    tables = [r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == ["people"]
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # a file with no tables yet: MLflow's to make
    Tracker(f"sqlite:///{empty}").experiment_id("e")


def test_a_folder_named_as_the_store_is_called_a_folder(tmp_path):
    with pytest.raises(StoreError, match=rf"{tmp_path} is a folder, not a database file; name the file inside it"):
        Tracker(f"sqlite:///{tmp_path}")
