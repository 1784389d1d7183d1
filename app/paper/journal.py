"""The paper-trading journal: every decision, order, fill, reconciliation, P&L snapshot and error.

One SQLite file, ``<home>/paper/journal.sqlite``, in WAL mode so the dashboard can read while a cycle
writes; each cycle's rows go in short transactions. Rows are append-only except ``orders``, which is
keyed by ``client_order_id`` (a retried cycle updates its order's status instead of duplicating it).

API keys never reach this file: every text value is scrubbed of the values of ``APCA_API_KEY_ID`` and
``APCA_API_SECRET_KEY`` before it is written (belt and braces: no caller puts them in a message).

``read_journal(home)`` returns the tables as pandas DataFrames for the dashboard (see docs/paper.md).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from data import sqlite

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,      -- wall clock (UTC) when the row was written
    decision_ts TEXT NOT NULL,      -- UTC start of the bar the decision was taken on
    bundle_id TEXT NOT NULL,
    dry_run INTEGER NOT NULL,
    equity REAL, cash REAL,
    tickers TEXT NOT NULL,          -- JSON list
    current_weights TEXT NOT NULL,  -- JSON list, same order as tickers
    target_weights TEXT NOT NULL,   -- JSON list (after risk limits)
    policy_weights TEXT NOT NULL,   -- JSON list (raw policy output)
    skipped TEXT NOT NULL,          -- JSON list of tickers skipped (missing bars)
    note TEXT
);
CREATE TABLE IF NOT EXISTS orders (
    client_order_id TEXT PRIMARY KEY,
    recorded_at TEXT NOT NULL,
    decision_ts TEXT NOT NULL,
    bundle_id TEXT NOT NULL,
    ticker TEXT NOT NULL,
    side TEXT NOT NULL,
    qty REAL NOT NULL,
    est_price REAL, est_notional REAL,
    status TEXT NOT NULL,           -- planned|dry_run|blocked|rejected|error|<alpaca status>
    broker_order_id TEXT,
    filled_qty REAL DEFAULT 0,
    filled_avg_price REAL,
    message TEXT
);
CREATE TABLE IF NOT EXISTS fills (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    client_order_id TEXT NOT NULL,
    ticker TEXT NOT NULL,
    side TEXT NOT NULL,
    filled_qty REAL NOT NULL,       -- cumulative filled quantity reported by the broker
    filled_avg_price REAL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS positions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    decision_ts TEXT,
    ticker TEXT NOT NULL,
    qty REAL NOT NULL,
    market_value REAL,
    expected_qty REAL,              -- what our orders imply (NULL when not reconciled)
    diff REAL                       -- qty - expected_qty
);
CREATE TABLE IF NOT EXISTS pnl (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    decision_ts TEXT,
    equity REAL NOT NULL,
    cash REAL NOT NULL,
    last_equity REAL,
    day_pnl REAL,
    day_return REAL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    level TEXT NOT NULL,            -- info|warning|error
    kind TEXT NOT NULL,             -- market_closed|kill_switch|risk|missing_bars|reconcile|error|...
    message TEXT NOT NULL
);
"""

TABLES = ("decisions", "orders", "fills", "positions", "pnl", "events")
_SECRET_ENVS = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY")


def journal_path(home: str | os.PathLike[str]) -> Path:
    return Path(home) / "paper" / "journal.sqlite"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _scrub(value: Any) -> Any:
    """Replace any API key value found in a string with ``***``."""
    if not isinstance(value, str):
        return value
    for name in _SECRET_ENVS:
        secret = os.environ.get(name, "")
        if len(secret) >= 4 and secret in value:
            value = value.replace(secret, "***")
    return value


class Journal:
    """Append-mostly SQLite journal (WAL). Use as a context manager or call ``close()``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite.connect(self.path, row_factory=None)
        # NORMAL (WAL): a power cut may lose the last commits but never corrupts the file.
        sqlite.use_wal(self._conn, synchronous="NORMAL")
        self._conn.executescript(SCHEMA)

    @classmethod
    def for_home(cls, home: str | os.PathLike[str]) -> Journal:
        return cls(journal_path(home))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE ... COMMIT (rolled back on error)."""
        with sqlite.transaction(self._conn) as conn:
            yield conn

    def _insert(self, table: str, row: dict[str, Any]) -> None:
        row = {"recorded_at": _now(), **{k: _scrub(v) for k, v in row.items()}}
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as conn:
            conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))

    # -- writers --
    def event(self, kind: str, message: str, level: str = "info") -> None:
        self._insert("events", {"level": level, "kind": kind, "message": message})

    def decision(
        self,
        *,
        decision_ts: str,
        bundle_id: str,
        dry_run: bool,
        equity: float,
        cash: float,
        tickers: list[str],
        current_weights: list[float],
        target_weights: list[float],
        policy_weights: list[float],
        skipped: list[str],
        note: str = "",
    ) -> None:
        self._insert(
            "decisions",
            {
                "decision_ts": decision_ts,
                "bundle_id": bundle_id,
                "dry_run": int(dry_run),
                "equity": equity,
                "cash": cash,
                "tickers": json.dumps(tickers),
                "current_weights": json.dumps([float(x) for x in current_weights]),
                "target_weights": json.dumps([float(x) for x in target_weights]),
                "policy_weights": json.dumps([float(x) for x in policy_weights]),
                "skipped": json.dumps(skipped),
                "note": note,
            },
        )

    def order(
        self,
        *,
        client_order_id: str,
        decision_ts: str,
        bundle_id: str,
        ticker: str,
        side: str,
        qty: float,
        est_price: float | None,
        status: str,
        broker_order_id: str | None = None,
        filled_qty: float = 0.0,
        filled_avg_price: float | None = None,
        message: str = "",
    ) -> None:
        """Insert or update the order row of ``client_order_id`` (a re-run never duplicates it)."""
        row = {
            "recorded_at": _now(),
            "client_order_id": client_order_id,
            "decision_ts": decision_ts,
            "bundle_id": bundle_id,
            "ticker": ticker,
            "side": side,
            "qty": float(qty),
            "est_price": est_price,
            "est_notional": None if est_price is None else float(qty) * float(est_price),
            "status": status,
            "broker_order_id": broker_order_id,
            "filled_qty": float(filled_qty),
            "filled_avg_price": filled_avg_price,
            "message": _scrub(message),
        }
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        updates = ", ".join(
            f"{c}=excluded.{c}"
            for c in ("recorded_at", "status", "broker_order_id", "filled_qty", "filled_avg_price", "message")
        )
        with self.transaction() as conn:
            conn.execute(
                f"INSERT INTO orders ({cols}) VALUES ({marks}) ON CONFLICT(client_order_id) DO UPDATE SET {updates}",
                tuple(row.values()),
            )

    def update_order(
        self,
        client_order_id: str,
        *,
        status: str,
        filled_qty: float,
        filled_avg_price: float | None,
        broker_order_id: str,
    ) -> None:
        """Update an existing order row after a later look-up (fills, cancel)."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE orders SET recorded_at=?, status=?, filled_qty=?, filled_avg_price=?, broker_order_id=? "
                "WHERE client_order_id=?",
                (_now(), status, float(filled_qty), filled_avg_price, broker_order_id, client_order_id),
            )

    def fill(
        self,
        *,
        client_order_id: str,
        ticker: str,
        side: str,
        filled_qty: float,
        filled_avg_price: float | None,
        status: str,
    ) -> None:
        self._insert(
            "fills",
            {
                "client_order_id": client_order_id,
                "ticker": ticker,
                "side": side,
                "filled_qty": float(filled_qty),
                "filled_avg_price": filled_avg_price,
                "status": status,
            },
        )

    def position(
        self,
        *,
        decision_ts: str | None,
        ticker: str,
        qty: float,
        market_value: float | None,
        expected_qty: float | None,
    ) -> None:
        diff = None if expected_qty is None else float(qty) - float(expected_qty)
        self._insert(
            "positions",
            {
                "decision_ts": decision_ts,
                "ticker": ticker,
                "qty": float(qty),
                "market_value": market_value,
                "expected_qty": expected_qty,
                "diff": diff,
            },
        )

    def pnl(self, *, decision_ts: str | None, equity: float, cash: float, last_equity: float | None) -> None:
        day_pnl = None if last_equity is None else equity - last_equity
        day_ret = None if not last_equity else equity / last_equity - 1.0
        self._insert(
            "pnl",
            {
                "decision_ts": decision_ts,
                "equity": equity,
                "cash": cash,
                "last_equity": last_equity,
                "day_pnl": day_pnl,
                "day_return": day_ret,
            },
        )

    # -- readers --
    def open_orders(self) -> list[dict[str, Any]]:
        """Orders we submitted whose last known status is still open at the broker."""
        cur = self._conn.execute(
            "SELECT client_order_id, ticker, side, qty, filled_qty FROM orders "
            "WHERE status IN ('new', 'accepted', 'pending_new', 'partially_filled', 'submitted')"
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise ValueError(f"unknown journal table {name!r}")
        return pd.read_sql_query(f"SELECT * FROM {name} ORDER BY rowid", self._conn)


def read_journal(home: str | os.PathLike[str]) -> dict[str, pd.DataFrame]:
    """All journal tables as DataFrames: ``decisions, orders, fills, positions, pnl, events``.

    Timestamps (``recorded_at``, ``decision_ts``) are parsed to tz-aware UTC; JSON list columns of
    ``decisions`` stay strings. A missing journal gives empty frames with the right columns.
    """
    path = journal_path(home)
    if not path.is_file():
        conn = sqlite3.connect(":memory:")
        conn.executescript(SCHEMA)
    else:
        # read-only URI: the dashboard must never create or lock the trader's journal
        conn = sqlite.connect(path, read_only=True, row_factory=None)
    try:
        out = {}
        for name in TABLES:
            frame = pd.read_sql_query(f"SELECT * FROM {name} ORDER BY rowid", conn)
            for col in ("recorded_at", "decision_ts"):
                if col in frame.columns:
                    frame[col] = pd.to_datetime(frame[col], utc=True, format="ISO8601")
            out[name] = frame
        return out
    finally:
        conn.close()
