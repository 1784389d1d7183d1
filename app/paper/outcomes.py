"""What the paper loop's last session came to, read from the journal for ``podracer status``: its
``no_data`` cycles and the fate of its orders (read-only, a bounded number of rows).

Rows are grouped by the trading session they belong to, the broker's session of the cycle that wrote
them (``decisions.session``, ``events.session``; an order: its decision's session, by the decision bar),
not by the wall clock of the row: a replay (the soak's simulated year) runs many sessions on one
wall-clock day. Rows journaled before those columns fall back to the exchange date of ``recorded_at``.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from app.paper.journal import journal_path
from data import sqlite
from data.calendar import exchange_date

# Order statuses of orders that never reached the broker (not "sent").
UNSENT_STATUSES = ("dry_run", "blocked", "not_sent", "not_submitted", "error")


def _day(stamp: str) -> str:
    """The exchange date (YYYY-MM-DD) of a wall-clock ``recorded_at``."""
    return exchange_date(pd.Timestamp(stamp)).date().isoformat()


def last_session_summary(home: str | os.PathLike[str], rows: int = 5000) -> dict[str, Any] | None:
    """The most recent session the loop traded or tried to (read-only, the newest ``rows`` rows of
    each table): ``session`` (exchange date), ``decisions``, ``no_data`` (cycles without fresh
    bars: ``missing_bars`` events), ``sent`` and ``rejected`` orders. None without a journal or an
    open-market cycle. ``podracer status`` reads it for its ``no_data`` and ``orders_rejected`` checks."""
    path = journal_path(home)
    if not path.is_file():
        return None
    conn = sqlite.connect(path, read_only=True)
    try:
        decisions = conn.execute(
            "SELECT session, decision_ts, recorded_at FROM decisions ORDER BY id DESC LIMIT ?", (rows,)
        ).fetchall()
        missing = conn.execute(
            "SELECT session, recorded_at FROM events WHERE kind = 'missing_bars' ORDER BY id DESC LIMIT ?",
            (rows,),
        ).fetchall()
        orders = conn.execute(
            "SELECT decision_ts, recorded_at, status FROM orders ORDER BY rowid DESC LIMIT ?", (rows,)
        ).fetchall()
    finally:
        conn.close()

    decided = [session or _day(recorded) for session, _, recorded in decisions]
    session_of_bar = {ts: day for (_, ts, _), day in zip(decisions, decided, strict=True)}
    no_data = [session or _day(recorded) for session, recorded in missing]
    days = decided + no_data
    if not days:
        return None
    session = max(days)
    in_session = [
        status
        for ts, recorded, status in orders
        if status not in UNSENT_STATUSES and (session_of_bar.get(ts) or _day(recorded)) == session
    ]
    return {
        "session": session,
        "decisions": decided.count(session),
        "no_data": no_data.count(session),
        "sent": len(in_session),
        "rejected": in_session.count("rejected"),
    }
