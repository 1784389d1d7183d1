"""data.sqlite: the one connection / WAL / BEGIN IMMEDIATE helper of the three SQLite stores."""

from __future__ import annotations

import sqlite3

import pytest

from data import sqlite


def _pragma(conn: sqlite3.Connection, name: str):
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def test_writer_is_autocommit_wal_and_creates_its_folder(tmp_path):
    path = tmp_path / "sub" / "db.sqlite"
    conn = sqlite.use_wal(sqlite.connect(path))
    try:
        assert conn.isolation_level is None and conn.row_factory is sqlite3.Row
        assert _pragma(conn, "journal_mode") == "wal"
        assert _pragma(conn, "synchronous") == 2  # FULL
        assert _pragma(conn, "foreign_keys") == 0
        assert _pragma(conn, "busy_timeout") == 30_000
    finally:
        conn.close()
    conn = sqlite.use_wal(sqlite.connect(path, row_factory=None), synchronous="NORMAL", foreign_keys=True)
    try:
        assert conn.row_factory is None
        assert _pragma(conn, "synchronous") == 1 and _pragma(conn, "foreign_keys") == 1
    finally:
        conn.close()


def test_transaction_commits_or_rolls_back(tmp_path):
    conn = sqlite.use_wal(sqlite.connect(tmp_path / "db.sqlite"))
    conn.execute("CREATE TABLE t (x INTEGER)")
    with sqlite.transaction(conn) as tx:
        assert tx is conn and conn.in_transaction
        conn.execute("INSERT INTO t VALUES (1)")
    assert not conn.in_transaction
    with pytest.raises(RuntimeError, match="boom"), sqlite.transaction(conn):
        conn.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("boom")
    assert not conn.in_transaction
    assert [r[0] for r in conn.execute("SELECT x FROM t")] == [1]
    conn.close()


def test_transaction_holds_the_write_lock_from_begin(tmp_path):
    path = tmp_path / "db.sqlite"
    first = sqlite.use_wal(sqlite.connect(path))
    second = sqlite.connect(path, timeout=0.05)
    try:
        with sqlite.transaction(first), pytest.raises(sqlite3.OperationalError, match="locked"):
            second.execute("BEGIN IMMEDIATE")
        with sqlite.transaction(second):  # free again once the first one committed
            pass
    finally:
        first.close()
        second.close()


def test_transaction_keeps_the_original_error_when_sqlite_already_rolled_back(tmp_path):
    conn = sqlite.connect(tmp_path / "db.sqlite")
    with pytest.raises(ValueError, match="original"), sqlite.transaction(conn):
        conn.execute("ROLLBACK")  # the transaction ended under the helper's feet
        raise ValueError("original")
    assert not conn.in_transaction
    conn.close()


def test_read_only_never_creates_and_never_writes(tmp_path):
    path = tmp_path / "odd name #1" / "db.sqlite"
    path.parent.mkdir()
    with pytest.raises(sqlite3.OperationalError):
        sqlite.connect(path, read_only=True).execute("SELECT 1 FROM sqlite_master")
    assert not path.exists()
    writer = sqlite.use_wal(sqlite.connect(path))
    writer.execute("CREATE TABLE t (x INTEGER)")
    writer.execute("INSERT INTO t VALUES (7)")
    reader = sqlite.connect(path, read_only=True)
    try:
        assert reader.execute("SELECT x FROM t").fetchone()["x"] == 7
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.execute("INSERT INTO t VALUES (8)")
    finally:
        reader.close()
        writer.close()
