"""The paper journal's schema, its order-status ranks, row types and the migration of older journals.

Schema version 1 (``PRAGMA user_version``) adds what ties every row to the bundle that decided it
and what the per-champion record needs (``app.paper.attribution``):

- ``decisions``: ``session`` (the exchange date the cycle ran in), ``account_equity`` and
  ``holdings`` (the broker's equity and positions before the orders: ``{symbol: [qty, price]}``),
  ``prices`` (the decision bar's close per ticker, in ``tickers`` order);
- ``fills``: ``bundle_id`` and ``decision_ts`` of the order filled;
- ``positions``, ``events``: ``bundle_id``;
- ``pnl``: ``bundle_id`` and ``holdings`` (the broker's positions after the orders);
- ``sessions`` (new): one row per session traded, naming the bundle in charge of it (its first
  cycle's), where that bundle lives and, for a registry champion, its run.

Schema version 2 adds ``opening_books``: the offsets the books start from (``app.paper.books``), one
row each time they are set (the first book check of a journal, an operator's ``podracer reconcile
--accept``); the newest row is in force.

Schema version 3 adds ``daily``: one summary row per day compacted out of the full tables
(``app.paper.compact``).

Schema version 4 adds ``orders.model_price``: the fill price the execution model predicted for the
order (``app.paper.slippage``); NULL for orders journaled before it, or without the model's inputs.

Schema version 5 adds ``events.session``: the exchange date of the session the cycle that wrote the
event ran in (NULL outside an open-market cycle, and for events journaled before it), so a session's
outcomes are read by the session they belong to, not by the wall clock of their rows.

A journal written before (version 0 to 4) is migrated on open, in ONE transaction: the missing columns
are added (``ALTER TABLE ... ADD COLUMN``; the old rows read NULL) and the version set, so a crash
leaves either the old file or the migrated one.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from typing import Any

from data import sqlite

SCHEMA_VERSION = 5

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
    note TEXT,
    session TEXT,                   -- exchange date (YYYY-MM-DD) of the session the cycle ran in
    account_equity REAL,            -- the broker's equity before the orders
    holdings TEXT,                  -- JSON {symbol: [qty, price]}: the broker's positions before the orders
    prices TEXT                     -- JSON list: the decision bar's close per ticker
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
    message TEXT,
    model_price REAL                -- the execution model's predicted fill price (NULL: not priced)
);
CREATE TABLE IF NOT EXISTS fills (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    client_order_id TEXT NOT NULL,
    ticker TEXT NOT NULL,
    side TEXT NOT NULL,
    filled_qty REAL NOT NULL,       -- cumulative filled quantity reported by the broker
    filled_avg_price REAL,
    status TEXT NOT NULL,
    bundle_id TEXT,                 -- the order's
    decision_ts TEXT                -- the order's
);
CREATE TABLE IF NOT EXISTS positions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    decision_ts TEXT,
    ticker TEXT NOT NULL,
    qty REAL NOT NULL,
    market_value REAL,
    expected_qty REAL,              -- what our orders imply (NULL when not reconciled)
    diff REAL,                      -- qty - expected_qty
    bundle_id TEXT
);
CREATE TABLE IF NOT EXISTS pnl (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    decision_ts TEXT,
    equity REAL NOT NULL,
    cash REAL NOT NULL,
    last_equity REAL,
    day_pnl REAL,
    day_return REAL,
    bundle_id TEXT,
    holdings TEXT                   -- JSON {symbol: [qty, price]}: the broker's positions after the orders
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    level TEXT NOT NULL,            -- info|warning|error
    kind TEXT NOT NULL,             -- market_closed|kill_switch|risk|missing_bars|reconcile|error|...
    message TEXT NOT NULL,
    bundle_id TEXT,                 -- the bundle of the cycle that wrote it (NULL outside a cycle)
    session TEXT                    -- exchange date of the session its cycle ran in (NULL: none)
);
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,       -- exchange date (YYYY-MM-DD)
    recorded_at TEXT NOT NULL,
    bundle_id TEXT NOT NULL,        -- the bundle in charge of the session (its first cycle's)
    bundle_path TEXT,
    run_id TEXT,                    -- the registry champion's run (NULL for paper --bundle)
    source TEXT NOT NULL            -- champion | bundle
);
CREATE TABLE IF NOT EXISTS opening_books (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    reason TEXT NOT NULL,           -- first book check | accepted by the operator
    book TEXT NOT NULL              -- JSON {symbol: qty}: broker qty less fill-implied qty when set
);
CREATE TABLE IF NOT EXISTS daily (
    session TEXT PRIMARY KEY,       -- exchange date (YYYY-MM-DD) of a compacted day
    recorded_at TEXT NOT NULL,      -- when it was compacted
    bundle_ids TEXT NOT NULL,       -- JSON list: the bundles that decided that day
    tickers TEXT NOT NULL,          -- JSON list: the tickers they decided on
    decisions INTEGER NOT NULL,
    orders TEXT NOT NULL,           -- JSON {status: count}
    fills INTEGER NOT NULL,
    first_equity REAL, last_equity REAL,  -- the account's equity at the day's first and last P&L row
    day_pnl REAL,                   -- the last P&L row's day P&L (equity - last close's)
    warnings INTEGER NOT NULL, errors INTEGER NOT NULL,
    events TEXT NOT NULL            -- JSON {kind: count}
)
"""

TABLES = ("decisions", "orders", "fills", "positions", "pnl", "events", "sessions", "opening_books", "daily")

# Columns that versions 1, 4 and 5 added to older tables (a migrated journal's old rows read NULL).
ADDED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "orders": (("model_price", "REAL"),),
    "decisions": (("session", "TEXT"), ("account_equity", "REAL"), ("holdings", "TEXT"), ("prices", "TEXT")),
    "fills": (("bundle_id", "TEXT"), ("decision_ts", "TEXT")),
    "positions": (("bundle_id", "TEXT"),),
    "pnl": (("bundle_id", "TEXT"), ("holdings", "TEXT")),
    "events": (("bundle_id", "TEXT"), ("session", "TEXT")),
}

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


@dataclass(frozen=True)
class SessionOwner:
    """The bundle in charge of one session (a row of ``sessions``)."""

    session: str  # YYYY-MM-DD, exchange date
    bundle_id: str
    bundle_path: str | None
    run_id: str | None
    source: str  # "champion" (the registry's pointer) | "bundle" (paper --bundle)


def finite(value: Any) -> float | None:
    """``value`` as a float, None when it is not finite (JSON has no NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def holdings_json(holdings: dict[str, tuple[float, float]]) -> str:
    """The JSON of a ``holdings`` column: ``{symbol: [qty, price]}``, symbols sorted."""
    return json.dumps({s: [float(q), finite(p)] for s, (q, p) in sorted(holdings.items())})


def statements() -> list[str]:
    """The schema's CREATE statements, one by one (``executescript`` would commit a transaction)."""
    return [s for s in SCHEMA.split(";") if s.strip()]


def migrate(conn: sqlite3.Connection) -> None:
    """Create the tables and bring a journal of an older version to :data:`SCHEMA_VERSION`, in one
    ``BEGIN IMMEDIATE`` transaction (a no-op for a current journal)."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    with sqlite.transaction(conn):
        if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
            return  # another connection migrated it while this one waited for the lock
        for statement in statements():
            conn.execute(statement)
        for table, columns in ADDED_COLUMNS.items():
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns:
                if name not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
