"""The paper-trading journal: every decision, order, fill, reconciliation, P&L snapshot and error.

One SQLite file, ``<home>/paper/journal.sqlite``, in WAL mode so the dashboard can read while a cycle
writes; each cycle's rows go in short transactions. Rows are append-only except ``orders``, which is
keyed by ``client_order_id`` (a retried cycle updates its order's status instead of duplicating it).

Re-running a decision bar is idempotent: an order row is upserted by a rule that never downgrades
(``STATUS_RANK``: a final status stays final, ``filled_qty`` only grows), and a fill row is written
only when the cumulative filled quantity grew. An order journaled ``submitted`` that the broker does
not know after the submit window (a kill -9 between the journal and the POST, or a POST that never
arrived) is closed as ``not_submitted`` and never looked up again. ``order_counts`` counts orders by
their final status (what the dashboard shows).

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
    status TEXT NOT NULL,           -- dry_run|blocked|not_sent|not_submitted|submitted|<alpaca status>
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

# How far along an order row is. A write never lowers it (a re-run of the same decision bar journals
# "submitted" again before the broker answers with the existing, filled order), and a final status
# (rank 4) never changes. Rank 0: journaled, never sent (a later run of the same bar may send it).
OPEN_STATUSES = ("submitted", "new", "accepted", "pending_new", "partially_filled", "accepted_for_bidding")
FINAL_STATUSES = (
    "filled",
    "canceled",
    "rejected",
    "expired",
    "done_for_day",
    "replaced",
    "stopped",
    "suspended",
)
STATUS_RANK: dict[str, int] = {
    **dict.fromkeys(("dry_run", "blocked", "not_sent", "error", "not_submitted", "planned"), 0),
    "submitted": 1,
    **dict.fromkeys(("new", "accepted", "pending_new", "accepted_for_bidding", "pending_cancel"), 2),
    "partially_filled": 3,
    **dict.fromkeys(FINAL_STATUSES, 4),
}
_SECRET_ENVS = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY")


def journal_path(home: str | os.PathLike[str]) -> Path:
    return Path(home) / "paper" / "journal.sqlite"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def journal_ts(ts: pd.Timestamp | datetime | None) -> str:
    """A bar's time as the journal writes it (``decision_ts``): ISO 8601, ``""`` for none."""
    return "" if ts is None else pd.Timestamp(ts).isoformat()


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
        """Insert or update the order row of ``client_order_id``: never a duplicate, never a downgrade."""
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
        with self.transaction() as conn:
            old = conn.execute(
                "SELECT status, broker_order_id, filled_qty, filled_avg_price, message FROM orders "
                "WHERE client_order_id=?",
                (client_order_id,),
            ).fetchone()
            if old is None:
                cols = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                conn.execute(f"INSERT INTO orders ({cols}) VALUES ({marks})", tuple(row.values()))
                return
            self._merge(conn, client_order_id, old, row)

    @staticmethod
    def _merge(conn: sqlite3.Connection, cid: str, old: tuple[Any, ...], new: dict[str, Any]) -> None:
        """Apply ``new`` to the stored order row ``old`` without lowering its status or fill."""
        old_status, old_broker_id, old_filled, old_price, old_message = old
        old_rank, new_rank = STATUS_RANK.get(old_status, 2), STATUS_RANK.get(new["status"], 2)
        status = new["status"] if new_rank >= old_rank and old_rank < 4 else old_status
        new_filled = float(new.get("filled_qty") or 0.0)
        filled, price = (
            (new_filled, new.get("filled_avg_price"))
            if new_filled > (old_filled or 0.0)
            else (old_filled, old_price)
        )
        broker_id = new.get("broker_order_id") or old_broker_id
        message = new.get("message") or old_message
        if (status, filled, price, broker_id, message) == (
            old_status,
            old_filled,
            old_price,
            old_broker_id,
            old_message,
        ):
            return  # nothing new: recorded_at keeps the time of the last real change
        conn.execute(
            "UPDATE orders SET recorded_at=?, status=?, filled_qty=?, filled_avg_price=?, broker_order_id=?, "
            "message=? WHERE client_order_id=?",
            (_now(), status, filled, price, broker_id, _scrub(message), cid),
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
        """Update an existing order row after a later look-up (fills, cancel); never a downgrade."""
        with self.transaction() as conn:
            old = conn.execute(
                "SELECT status, broker_order_id, filled_qty, filled_avg_price, message FROM orders "
                "WHERE client_order_id=?",
                (client_order_id,),
            ).fetchone()
            if old is not None:
                new = {
                    "status": status,
                    "filled_qty": filled_qty,
                    "filled_avg_price": filled_avg_price,
                    "broker_order_id": broker_order_id,
                    "message": "",
                }
                self._merge(conn, client_order_id, old, new)

    def mark_not_submitted(self, client_order_id: str, message: str) -> None:
        """Close a ``submitted`` row the broker does not know: the order never reached it."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE orders SET recorded_at=?, status='not_submitted', message=? "
                "WHERE client_order_id=? AND status='submitted'",
                (_now(), _scrub(message), client_order_id),
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
    ) -> bool:
        """Record the cumulative fill of an order, only if it grew (a re-run never repeats a fill)."""
        with self.transaction() as conn:
            (seen,) = conn.execute(
                "SELECT MAX(filled_qty) FROM fills WHERE client_order_id=?", (client_order_id,)
            ).fetchone()
        if seen is not None and float(filled_qty) <= seen + 1e-12:
            return False
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
        return True

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
        """Orders we submitted whose last known status is still open at the broker (or unknown)."""
        marks = ", ".join("?" for _ in OPEN_STATUSES)
        cur = self._conn.execute(
            "SELECT client_order_id, ticker, side, qty, filled_qty, status, recorded_at FROM orders "
            f"WHERE status IN ({marks})",
            OPEN_STATUSES,
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise ValueError(f"unknown journal table {name!r}")
        return pd.read_sql_query(f"SELECT * FROM {name} ORDER BY rowid", self._conn)


def order_counts(orders: pd.DataFrame) -> dict[str, int]:
    """Orders by final outcome, one per ``client_order_id`` (the dashboard's counts).

    ``filled``; ``partial`` (some shares filled, then canceled or expired); ``canceled`` (nothing
    filled); ``rejected``; ``not_submitted`` (never reached the broker); ``not_sent`` (journaled but
    held back: kill switch, halt, a spent retry budget); ``dry_run``; ``open`` (still working or not
    yet reconciled). Counting rows of ``fills`` instead would count cumulative updates, not orders.
    """
    counts = dict.fromkeys(
        ("filled", "partial", "canceled", "rejected", "not_submitted", "not_sent", "dry_run", "open"), 0
    )
    for row in orders.drop_duplicates("client_order_id", keep="last").itertuples(index=False):
        status, filled = str(row.status), float(row.filled_qty or 0.0)
        if status == "filled":
            key = "filled"
        elif status in FINAL_STATUSES and status != "rejected":
            key = "partial" if filled > 0 else "canceled"
        elif status in ("rejected", "not_submitted", "dry_run"):
            key = status
        elif status in ("blocked", "not_sent", "error"):
            key = "not_sent"
        else:
            key = "open"
        counts[key] += 1
    return counts


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
