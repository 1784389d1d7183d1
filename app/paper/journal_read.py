"""Reading the paper-trading journal without a :class:`app.paper.journal.Journal`: its tables as
DataFrames for the dashboard and the nightly record (:func:`read_journal`), the newest P&L row for
``podracer status`` (:func:`latest_pnl`), and orders counted by final outcome (:func:`order_counts`).
Every read is read-only: the dashboard never creates or locks the trader's journal."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd

from app.paper.journal_schema import ADDED_COLUMNS, FINAL_STATUSES, TABLES, statements
from data import sqlite


def journal_path(home: str | os.PathLike[str]) -> Path:
    """Where a home's journal lives: ``<home>/paper/journal.sqlite``."""
    return Path(home) / "paper" / "journal.sqlite"


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


def latest_pnl(home: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The newest P&L row (``pnl`` columns), read-only; None without a journal or a P&L row. One
    query, so ``podracer status`` does not read the whole journal."""
    path = journal_path(home)
    if not path.is_file():
        return None
    conn = sqlite.connect(path, read_only=True)
    try:
        row = conn.execute("SELECT * FROM pnl ORDER BY id DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return None if row is None else dict(row)


def _empty_schema() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    for statement in statements():
        conn.execute(statement)
    return conn


def read_journal(home: str | os.PathLike[str]) -> dict[str, pd.DataFrame]:
    """All journal tables as DataFrames: ``decisions, orders, fills, positions, pnl, events, sessions,
    opening_books, daily``.

    Timestamps (``recorded_at``, ``decision_ts``) are parsed to tz-aware UTC; JSON list columns of
    ``decisions`` stay strings. A missing journal gives empty frames with the right columns.
    """
    path = journal_path(home)
    # read-only URI: the dashboard must never create or lock the trader's journal
    conn = sqlite.connect(path, read_only=True, row_factory=None) if path.is_file() else _empty_schema()
    try:
        out = {}
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        empty = _empty_schema()  # the current tables, for a journal of an older version not migrated yet
        for name in TABLES:
            source = conn if name in have else empty
            frame = pd.read_sql_query(f"SELECT * FROM {name} ORDER BY rowid", source)
            for column, _ in ADDED_COLUMNS.get(name, ()):
                if column not in frame.columns:
                    frame[column] = None
            for col in ("recorded_at", "decision_ts"):
                if col in frame.columns:
                    frame[col] = pd.to_datetime(frame[col], utc=True, format="ISO8601")
            out[name] = frame
        empty.close()
        return out
    finally:
        conn.close()
