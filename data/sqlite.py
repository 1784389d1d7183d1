"""The one SQLite helper: connections, WAL setup and ``BEGIN IMMEDIATE`` transactions.

Three stores use it: the tournament leaderboard (``agents.tournament.leaderboard``), the nightly
registry (``app.nightly.registry``) and the paper-trading journal (``app.paper.journal``). Each is
one writer process plus readers (the dashboard) that must never block it or see half an update:

- writers open with :func:`connect` (autocommit: ``isolation_level=None``, so the only transactions
  are the ones :func:`transaction` opens) and switch to WAL with :func:`use_wal`, so readers read the
  last committed state while a write is in progress;
- every update is one :func:`transaction`: ``BEGIN IMMEDIATE`` takes the write lock up front (a
  second writer waits ``timeout`` seconds instead of failing half-way at its first write);
- readers open with ``read_only=True``: a read-only URI, which can never create the file, take the
  write lock or change it.

What differs between the stores is a parameter, not a copy: ``synchronous`` (``FULL`` for the
leaderboard and the registry, whose commits must survive a power cut; ``NORMAL`` for the journal),
``foreign_keys`` (the registry) and ``row_factory`` (the journal reads plain tuples).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

TIMEOUT_S = 30.0  # how long a connection waits for another one's lock before "database is locked"

RowFactory = Callable[[sqlite3.Cursor, tuple[Any, ...]], Any]


def connect(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    timeout: float = TIMEOUT_S,
    row_factory: RowFactory | None = sqlite3.Row,
) -> sqlite3.Connection:
    """A connection to ``path``.

    Writable (the parent folder is created): autocommit mode, so callers open their own
    transactions with :func:`transaction`. ``read_only``: a ``mode=ro`` URI connection, which raises
    if the file does not exist rather than creating it.
    """
    path = Path(path)
    if read_only:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    if row_factory is not None:
        conn.row_factory = row_factory
    return conn


def use_wal(
    conn: sqlite3.Connection,
    *,
    synchronous: Literal["FULL", "NORMAL"] | None = "FULL",
    foreign_keys: bool = False,
) -> sqlite3.Connection:
    """WAL journal mode (persistent: stored in the file), then this connection's ``synchronous`` level
    (None: SQLite's default) and, if asked, foreign-key enforcement (per connection too)."""
    conn.execute("PRAGMA journal_mode=WAL")
    if synchronous is not None:
        conn.execute(f"PRAGMA synchronous={synchronous}")
    if foreign_keys:
        conn.execute("PRAGMA foreign_keys=ON")
    return conn


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; on any exception (a failed COMMIT included) ``ROLLBACK``
    and re-raise. The rollback is skipped when SQLite already ended the transaction itself, so the
    original error is the one raised."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
