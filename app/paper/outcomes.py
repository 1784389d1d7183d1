"""What the paper loop's last session came to, read from the journal for ``podracer status``: its
``no_data`` cycles and the fate of its orders (read-only, a bounded number of rows)."""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from app.paper.journal import journal_path
from data import sqlite
from data.calendar import exchange_date

# Order statuses of orders that never reached the broker (not "sent").
UNSENT_STATUSES = ("dry_run", "blocked", "not_sent", "not_submitted", "error")


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
            "SELECT recorded_at FROM decisions ORDER BY id DESC LIMIT ?", (rows,)
        ).fetchall()
        missing = conn.execute(
            "SELECT recorded_at FROM events WHERE kind = 'missing_bars' ORDER BY id DESC LIMIT ?", (rows,)
        ).fetchall()
        orders = conn.execute(
            "SELECT recorded_at, status FROM orders ORDER BY rowid DESC LIMIT ?", (rows,)
        ).fetchall()
    finally:
        conn.close()

    def day(stamp: str) -> str:
        return exchange_date(pd.Timestamp(stamp)).date().isoformat()

    days = [day(r[0]) for r in decisions] + [day(r[0]) for r in missing]
    if not days:
        return None
    session = max(days)
    in_session = [r[1] for r in orders if day(r[0]) == session and r[1] not in UNSENT_STATUSES]
    return {
        "session": session,
        "decisions": sum(1 for r in decisions if day(r[0]) == session),
        "no_data": sum(1 for r in missing if day(r[0]) == session),
        "sent": len(in_session),
        "rejected": sum(1 for s in in_session if s == "rejected"),
    }
