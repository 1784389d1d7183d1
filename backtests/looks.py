"""The looks ledger: ``<home>/looks.sqlite`` counts every look at a held-out window.

Each out-of-sample test spends some of the held-out window's credibility: a user who reruns tournaments
until the test window looks good has tried many strategies there, and the last test's p-value is no
longer what it says. So every backtest of a selected strategy on a test window is one row, one look:

``looks(id, run_id, strategy, market, start, end, num_sessions, sharpe, created_at)``, unique on
``(run_id, strategy, market, start, end)``; ``sharpe`` is the per-day Sharpe ratio of the strategy's
daily returns on the window (NULL when undefined). The out-of-sample test of a look is deflated for the
looks recorded **before its own first recording** on an overlapping window (one shared day is enough)
of the same market (``backtests.oos_test``):

- backtesting the same run again (same run, strategy, market, window) is not a new look: the row stays
  and the verdict is recomputed from the same earlier looks, so it comes out the same;
- the **market** is the identity of the data, not only its dates: two synthetic markets with different
  seeds (or signals, tickers, sessions) share calendar dates but not a single price, and a look at one
  says nothing about the other. The caller builds it (``app.workflows.backtest.market_identity``).

Rows are typed: :class:`Look` (what a caller records) and :class:`LookRow` (a recorded look, what
:func:`read_looks` returns), pydantic dataclasses validated on the way in and out; the ledger's schema
version is SQLite's ``user_version`` (:data:`SCHEMA_VERSION`): a newer one is refused in one line.

Written like the other stores (``data.sqlite``): WAL, one ``BEGIN IMMEDIATE`` transaction per look, so
two backtests at once each see the other's look or none of it, never half.
"""

from __future__ import annotations

import math
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pydantic
from pydantic import TypeAdapter, ValidationError

from data import sqlite
from data.errors import PodracerError

LEDGER_NAME = "looks.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS looks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    strategy TEXT NOT NULL,
    market TEXT NOT NULL,
    start TEXT NOT NULL,
    "end" TEXT NOT NULL,
    num_sessions INTEGER NOT NULL,
    sharpe REAL,
    created_at TEXT NOT NULL,
    UNIQUE (run_id, strategy, market, start, "end")
);
CREATE INDEX IF NOT EXISTS looks_by_market ON looks (market, start, "end");
"""


def ledger_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/looks.sqlite``."""
    return Path(home) / LEDGER_NAME


@pydantic.dataclasses.dataclass(frozen=True)
class Look:
    """One look: a selected strategy of a run backtested on a window of a market."""

    run_id: str
    strategy: str
    market: str
    start: str  # ISO date, first session
    end: str  # ISO date, last session
    num_sessions: int
    sharpe: float | None  # per day


@pydantic.dataclasses.dataclass(frozen=True)
class LookRow(Look):
    """A recorded look: a row of the ledger's ``looks`` table."""

    id: int = 0  # the look's number in the ledger: earlier looks have smaller ones
    created_at: str = ""  # UTC, ISO, when it was first recorded


_ROWS = TypeAdapter(list[LookRow])


@dataclass(frozen=True)
class LookCount:
    """A recorded look and the earlier looks it is deflated for."""

    look_id: int
    new: bool  # False: this run's look at this window was already recorded (a re-backtest)
    earlier_sharpes: tuple[float | None, ...]  # per day, oldest first

    @property
    def looks(self) -> int:
        """``K``: this look plus the earlier ones."""
        return 1 + len(self.earlier_sharpes)


class LedgerError(PodracerError):
    """The looks ledger is unreadable, corrupt, or from a newer podracer."""


def _open(path: Path) -> sqlite3.Connection:
    """A writable connection with the schema ensured (one transaction), or a one-line LedgerError."""
    try:
        conn = sqlite.connect(path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot open the looks ledger {path}: {err}") from None
    try:
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"looks ledger {path} has schema {version}; this podracer reads up to {SCHEMA_VERSION}"
            )
        # FULL, like the registry: a look that was reported must stay counted after a power cut.
        sqlite.use_wal(conn, synchronous="FULL")
        if version < SCHEMA_VERSION:
            with sqlite.transaction(conn):
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except sqlite3.DatabaseError as err:
        conn.close()
        raise LedgerError(f"cannot initialise the looks ledger {path}: {err}") from None
    except LedgerError:
        conn.close()
        raise
    return conn


def record_look(path: str | os.PathLike[str], look: Look) -> LookCount:
    """Record ``look`` (unless this run's look at this window is already there) and return the looks
    before its first recording at an overlapping window of the same market, in one transaction."""
    sharpe = look.sharpe if look.sharpe is not None and math.isfinite(look.sharpe) else None
    key = (look.run_id, look.strategy, look.market, look.start, look.end)
    conn = _open(Path(path))
    try:
        with sqlite.transaction(conn):
            row = conn.execute(
                'SELECT id FROM looks WHERE run_id=? AND strategy=? AND market=? AND start=? AND "end"=?',
                key,
            ).fetchone()
            new = row is None
            if new:
                cur = conn.execute(
                    'INSERT INTO looks (run_id, strategy, market, start, "end", num_sessions, sharpe, '
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, int(look.num_sessions), sharpe, datetime.now(UTC).isoformat(timespec="seconds")),
                )
                look_id = int(cur.lastrowid)
            else:
                look_id = int(row["id"])
            earlier = conn.execute(
                'SELECT sharpe FROM looks WHERE id < ? AND market = ? AND start <= ? AND "end" >= ? '
                "ORDER BY id",
                (look_id, look.market, look.end, look.start),
            ).fetchall()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot record a look in {path}: {err}") from None
    finally:
        conn.close()
    return LookCount(look_id, new, tuple(r["sharpe"] for r in earlier))


def read_looks(path: str | os.PathLike[str]) -> list[LookRow]:
    """Every recorded look, oldest first (empty when there is no ledger; never creates it); a row that
    does not fit :class:`LookRow` is a one-line LedgerError."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        conn = sqlite.connect(path, read_only=True)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"looks ledger {path} has schema {version}; this podracer reads up to {SCHEMA_VERSION}"
                )
            rows = [dict(r) for r in conn.execute("SELECT * FROM looks ORDER BY id").fetchall()]
        finally:
            conn.close()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the looks ledger {path}: {err}") from None
    try:
        return _ROWS.validate_python(rows)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise LedgerError(f"looks ledger {path}: row {where}: {first['msg'].lower()}") from None
