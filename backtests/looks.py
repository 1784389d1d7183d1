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
  says nothing about the other. The caller builds it (``app.evaluation.market_identity``).

Rows are typed: :class:`Look` (what a caller records) and :class:`LookRow` (a recorded look, what
:func:`read_looks` returns), pydantic dataclasses validated on the way in and out; the ledger's schema
version is SQLite's ``user_version`` (:data:`SCHEMA_VERSION`): a newer one is refused in one line.

Written like the other stores (``data.sqlite``): WAL, one ``BEGIN IMMEDIATE`` transaction per look, so
two backtests at once each see the other's look or none of it, never half.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pydantic
from pydantic import TypeAdapter, ValidationError

from backtests.metrics_model import LookKey, MetricsDocument
from backtests.verdict import LooksNow, looks_unknown, restate
from data import sqlite
from data.errors import PodracerError

LEDGER_NAME = "looks.sqlite"
SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS looks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    strategy TEXT NOT NULL,
    policy TEXT NOT NULL DEFAULT '',
    market TEXT NOT NULL,
    tickers TEXT NOT NULL DEFAULT '',
    start TEXT NOT NULL,
    "end" TEXT NOT NULL,
    num_sessions INTEGER NOT NULL,
    sharpe REAL,
    created_at TEXT NOT NULL,
    UNIQUE (run_id, strategy, policy, market, tickers, start, "end")
);
CREATE INDEX IF NOT EXISTS looks_by_market ON looks (market, start, "end");
CREATE TABLE IF NOT EXISTS ledger (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
#: Schema 2 had no ``ledger`` table (the ledger's identity): it gets one, its rows stay.
_MIGRATE_2 = """
CREATE TABLE IF NOT EXISTS ledger (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
#: Schema 3 named a market of exchange bars by the source it was loaded from ("stored", or
#: "real-sample" for the shipped sample): the same bars under two names were two markets. Its rows move
#: to the one identity of exchange bars (``app.evaluation.EXCHANGE_BARS``); a row that would then
#: repeat another (the same run, policy and window under both names) stays as it was, uncounted twice.
_MIGRATE_3 = """
UPDATE OR IGNORE looks SET market = 'exchange bars' WHERE market IN ('stored', 'real-sample');
"""
#: Schema 1 had no policy digest and no tickers: its rows move over with empty ones (which overlap
#: every ticker set: counted, never lost).
_MIGRATE_1 = (
    """
ALTER TABLE looks RENAME TO looks_v1;
DROP INDEX IF EXISTS looks_by_market;
"""
    + _SCHEMA
    + """
INSERT INTO looks (id, run_id, strategy, market, start, "end", num_sessions, sharpe, created_at)
    SELECT id, run_id, strategy, market, start, "end", num_sessions, sharpe, created_at FROM looks_v1;
DROP TABLE looks_v1;
"""
)


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
    policy: str = ""  # digest of the judged policy's weights and of its result (app.evaluation)
    tickers: tuple[str, ...] = ()  # the symbols traded
    ledger: str = ""  # the identity of the ledger it was recorded in (not part of the key)

    @property
    def key(self) -> tuple[str, ...]:
        """What makes two rows the same look."""
        return (
            self.run_id,
            self.strategy,
            self.policy,
            self.market,
            tickers_text(self.tickers),
            self.start,
            self.end,
        )


def tickers_text(tickers: tuple[str, ...] | list[str]) -> str:
    """The ledger's spelling of a ticker set: sorted, space-separated."""
    return " ".join(sorted({str(t) for t in tickers}))


@pydantic.dataclasses.dataclass(frozen=True)
class LookRow(Look):
    """A recorded look: a row of the ledger's ``looks`` table."""

    id: int = 0  # the look's number in the ledger: earlier looks have smaller ones
    created_at: str = ""  # UTC, ISO, when it was first recorded


_ROWS = TypeAdapter(list[LookRow])


@dataclasses.dataclass(frozen=True)
class LookCount:
    """A recorded look, the earlier looks it was first judged with and every overlapping look now."""

    look_id: int
    new: bool  # False: this look was already recorded (a re-backtest)
    earlier_sharpes: tuple[float | None, ...]  # per day, oldest first: recorded before this look
    all_sharpes: tuple[float | None, ...] = ()  # per day, oldest first: every overlapping look, this one too
    ledger: str = ""  # the ledger's identity, written with the look into metrics.json
    # A lower bound: a ledger that counted some of these looks is gone (``backtests.looks_memory``).
    lost: bool = False

    @property
    def looks(self) -> int:
        """``K`` when first judged: this look plus the earlier ones."""
        return 1 + len(self.earlier_sharpes)

    @property
    def now(self) -> LooksNow:
        """The looks counted now, for ``backtests.verdict.restate``."""
        return LooksNow(sharpes=self.all_sharpes, first=self.looks, lost=self.lost)


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
            script = {
                1: _MIGRATE_1 + _MIGRATE_2 + _MIGRATE_3,
                2: _MIGRATE_2 + _MIGRATE_3,
                3: _MIGRATE_3,
            }.get(version, _SCHEMA)
            with sqlite.transaction(conn):
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                # The ledger's identity: a report names the ledger its look was counted in, so a
                # deleted or rebuilt ledger reads "looks unknown" rather than a fresh count of 1.
                conn.execute(
                    "INSERT OR IGNORE INTO ledger (key, value) VALUES ('id', ?)", (uuid.uuid4().hex,)
                )
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except sqlite3.DatabaseError as err:
        conn.close()
        raise LedgerError(f"cannot initialise the looks ledger {path}: {err}") from None
    except LedgerError:
        conn.close()
        raise
    return conn


def _overlapping(conn: sqlite3.Connection, look: Look) -> list[sqlite3.Row]:
    """Every row at ``look``'s market whose window shares a day and whose tickers share a symbol with it."""
    rows = conn.execute(
        'SELECT id, sharpe, tickers FROM looks WHERE market = ? AND start <= ? AND "end" >= ? ORDER BY id',
        (look.market, look.end, look.start),
    ).fetchall()
    mine = set(look.tickers)
    return [r for r in rows if not mine or not r["tickers"] or mine & set(r["tickers"].split())]


def _ledger_id(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM ledger WHERE key = 'id'").fetchone()
    return str(row["value"]) if row is not None else ""


def _count(conn: sqlite3.Connection, look: Look, look_id: int, new: bool) -> LookCount:
    rows = _overlapping(conn, look)
    earlier = tuple(r["sharpe"] for r in rows if r["id"] < look_id)
    return LookCount(look_id, new, earlier, tuple(r["sharpe"] for r in rows), _ledger_id(conn))


_FIND = (
    "SELECT id FROM looks WHERE run_id=? AND strategy=? AND policy=? AND market=? AND tickers=? "
    'AND start=? AND "end"=?'
)


def record_look(path: str | os.PathLike[str], look: Look) -> LookCount:
    """Record ``look`` (unless it is already there) and count the overlapping looks before its first
    recording and now, in one transaction."""
    sharpe = look.sharpe if look.sharpe is not None and math.isfinite(look.sharpe) else None
    conn = _open(Path(path))
    try:
        with sqlite.transaction(conn):
            row = conn.execute(_FIND, look.key).fetchone()
            new = row is None
            if new:
                cur = conn.execute(
                    'INSERT INTO looks (run_id, strategy, policy, market, tickers, start, "end", num_sessions, '
                    "sharpe, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *look.key,
                        int(look.num_sessions),
                        sharpe,
                        datetime.now(UTC).isoformat(timespec="seconds"),
                    ),
                )
                look_id = int(cur.lastrowid)
            else:
                look_id = int(row["id"])
            count = _count(conn, look, look_id, new)
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot record a look in {path}: {err}") from None
    finally:
        conn.close()
    return count


def looks_now(path: str | os.PathLike[str], look: Look) -> LookCount | None:
    """The count of a recorded ``look`` as it stands now (read-only; None when the ledger or the look is
    not there: a report from before looks were keyed this way states its own count)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        conn = sqlite.connect(path, read_only=True)
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                return None
            row = conn.execute(_FIND, look.key).fetchone()
            return None if row is None else _count(conn, look, int(row["id"]), False)
        finally:
            conn.close()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the looks ledger {path}: {err}") from None


def look_fields(look: Look) -> LookKey:
    """The ``oos_test.look`` block of metrics.json: the key a reader finds the look by."""
    return LookKey(
        run_id=look.run_id,
        strategy=look.strategy,
        policy=look.policy,
        market=look.market,
        tickers=sorted(look.tickers),
        start=look.start,
        end=look.end,
        num_sessions=look.num_sessions,
        ledger=look.ledger,
    )


def restated(doc: MetricsDocument, home: str | os.PathLike[str]) -> MetricsDocument:
    """``doc`` (a metrics.json document) with its verdict stated for the looks ``<home>/looks.sqlite``
    counts now (``backtests.verdict.restate``); ``doc`` as it is when it names no recorded look."""
    key = doc.oos_test.look if doc.oos_test is not None else None
    if key is None:
        return doc
    look = Look(
        run_id=key.run_id,
        strategy=key.strategy,
        market=key.market,
        start=key.start,
        end=key.end,
        num_sessions=key.num_sessions,
        sharpe=None,
        policy=key.policy,
        tickers=tuple(key.tickers),
    )
    count = looks_now(ledger_path(home), look)
    if key.ledger and (count is None or count.ledger != key.ledger):
        # The ledger this look was counted in is gone (deleted, or rebuilt since): the looks are unknown.
        return looks_unknown(doc)
    if count is None:
        return doc
    oos = doc.oos_test
    if oos is not None and oos.looks_unknown:
        # The document's count is a lower bound (a ledger that counted some of its looks is gone,
        # ``backtests.looks_memory``): the ledger's count replaces it only when larger, still a bound.
        if count.now.count <= (oos.looks or 1):
            return doc
        return restate(doc, dataclasses.replace(count.now, lost=True))
    return restate(doc, count.now)


def read_looks(path: str | os.PathLike[str]) -> list[LookRow]:
    """Every recorded look, oldest first (empty when there is no ledger; never creates it); a ledger
    from a newer schema, or a row that does not fit :class:`LookRow`, is a one-line LedgerError."""
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
    for row in rows:  # stored as tickers_text; a schema-1 ledger has no such column
        row["tickers"] = tuple(str(row.get("tickers") or "").split())
    try:
        return _ROWS.validate_python(rows)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise LedgerError(f"looks ledger {path}: row {where}: {first['msg'].lower()}") from None
