"""Journal compaction: old sessions become one ``daily`` row each, so the journal stays bounded.

``compact_journal(journal, keep_sessions)`` keeps the newest ``keep_sessions`` traded sessions (the
``decisions.session`` dates) in full and folds every older day into a ``daily`` row: its bundles and
tickers, decision / fill / event counts, orders by status, the account's equity at the first and
last P&L snapshot and the day's P&L. A row belongs to its session's day: ``decisions.session`` and
``events.session`` (the broker's session of the cycle), the exchange date of the bar it was decided
on for the others; the wall clock of the row only where neither is recorded. Then the old rows of ``decisions, orders, fills, positions,
pnl, events`` go, in the same ``BEGIN IMMEDIATE`` transaction (a crash leaves the old journal or the
compacted one).

What stays exact: the books (``app.paper.books``): the fills of the orders removed are added to the
opening book in the same transaction, so the fill-implied positions do not move; the tickers every
bundle traded (``Journal.book_tickers`` reads ``daily.tickers`` too); ``sessions`` (one small row per
session) is kept whole. Orders still open are never removed. The per-champion record
(``app.paper.attribution``) covers the sessions kept in full; the dashboard shows the daily rows for
the older ones.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.paper.journal import Journal
from app.paper.journal_schema import OPEN_STATUSES
from data.calendar import exchange_dates


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_journal` did (or, ``dry_run``, would do)."""

    days: list[str]  # exchange dates folded into daily rows
    rows: int  # journal rows removed

    @property
    def empty(self) -> bool:
        return not self.days


def _day(stamps: pd.Series, fallback: pd.Series) -> pd.Series:
    """The exchange date (YYYY-MM-DD) of each row: of ``stamps`` (a bar time), else of ``fallback``."""
    ts = pd.to_datetime(stamps.where(stamps.astype(bool), fallback), utc=True, format="ISO8601")
    return pd.Series(exchange_dates(ts).strftime("%Y-%m-%d"), index=stamps.index)


def _frame(journal: Journal, sql: str) -> pd.DataFrame:
    return pd.read_sql_query(sql, journal._conn)  # noqa: SLF001 - the journal's own module family


def old_days(journal: Journal, keep_sessions: int) -> str | None:
    """The first session kept in full (older days are compacted), or None when there is nothing older."""
    rows = journal._conn.execute(  # noqa: SLF001
        "SELECT DISTINCT session FROM decisions WHERE session IS NOT NULL ORDER BY session DESC"
    ).fetchall()
    sessions = [r[0] for r in rows]
    if len(sessions) <= keep_sessions:
        return None
    return sessions[keep_sessions - 1]


def compact_journal(journal: Journal, keep_sessions: int, *, dry_run: bool = False) -> Compaction:
    """Fold the days before the newest ``keep_sessions`` sessions into ``daily`` rows (see the module)."""
    first_kept = old_days(journal, keep_sessions)
    if first_kept is None:
        return Compaction([], 0)
    frames = {
        "decisions": _frame(
            journal, "SELECT id, recorded_at, session AS stamp, bundle_id, tickers FROM decisions"
        ),
        "orders": _frame(
            journal,
            "SELECT client_order_id AS id, recorded_at, decision_ts AS stamp, ticker, side, status, filled_qty "
            "FROM orders",
        ),
        "fills": _frame(journal, "SELECT id, recorded_at, decision_ts AS stamp FROM fills"),
        "positions": _frame(journal, "SELECT id, recorded_at, decision_ts AS stamp FROM positions"),
        "pnl": _frame(
            journal, "SELECT id, recorded_at, decision_ts AS stamp, equity, day_pnl FROM pnl ORDER BY id"
        ),
        "events": _frame(journal, "SELECT id, recorded_at, session AS stamp, level, kind FROM events"),
    }
    old: dict[str, pd.DataFrame] = {}
    for name, frame in frames.items():
        if frame.empty:
            old[name] = frame.assign(day=pd.Series(dtype=str))
            continue
        if name in ("decisions", "events"):  # stamped with the session's date itself
            day = frame["stamp"].fillna("")
            day = day.where(day.astype(bool), _day(pd.Series("", index=frame.index), frame["recorded_at"]))
        else:
            day = _day(frame["stamp"].fillna(""), frame["recorded_at"])
        frame = frame.assign(day=day)
        keep = frame["day"] >= first_kept
        if name == "orders":
            keep |= frame["status"].isin(OPEN_STATUSES)  # an open order is never dropped
        old[name] = frame[~keep]
    days = sorted(set().union(*(set(f["day"]) for f in old.values())))
    rows = sum(len(f) for f in old.values())
    if dry_run or not days:
        return Compaction(days, rows)
    summaries = [_summary(day, old) for day in days]
    fills = old["orders"]
    moved: dict[str, float] = {}
    for row in fills[fills["filled_qty"] > 0].itertuples(index=False):
        sign = -1.0 if row.side == "sell" else 1.0
        moved[row.ticker] = moved.get(row.ticker, 0.0) + sign * float(row.filled_qty)
    with journal.transaction() as conn:
        if moved and journal.has_opening_book():  # (never checked: the first check adopts the rest)
            book = journal.opening_book()
            for symbol, qty in moved.items():
                book[symbol] = book.get(symbol, 0.0) + qty
            conn.execute(
                "INSERT INTO opening_books (recorded_at, reason, book) VALUES (?, ?, ?)",
                (
                    pd.Timestamp.now(tz="UTC").isoformat(),
                    f"fills of the days before {first_kept} compacted",
                    json.dumps(dict(sorted(book.items()))),
                ),
            )
        for s in summaries:
            cols = ", ".join(s)
            marks = ", ".join("?" for _ in s)
            conn.execute(f"INSERT OR REPLACE INTO daily ({cols}) VALUES ({marks})", tuple(s.values()))
        for name, frame in old.items():
            if frame.empty:
                continue
            key = "client_order_id" if name == "orders" else "id"
            ids = [(v,) for v in frame["id"].tolist()]
            conn.executemany(f"DELETE FROM {name} WHERE {key}=?", ids)
    return Compaction(days, rows)


def _summary(day: str, old: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """One ``daily`` row from the rows of ``day``."""
    pick = {name: f[f["day"] == day] for name, f in old.items()}
    decisions, orders, pnl, events = pick["decisions"], pick["orders"], pick["pnl"], pick["events"]
    tickers = sorted({t for text in decisions["tickers"] for t in json.loads(text)}) if len(decisions) else []
    equity = pnl["equity"].dropna()
    return {
        "session": day,
        "recorded_at": pd.Timestamp.now(tz="UTC").isoformat(),
        "bundle_ids": json.dumps(sorted(set(decisions["bundle_id"].dropna()))),
        "tickers": json.dumps(tickers),
        "decisions": len(decisions),
        "orders": json.dumps(dict(sorted(Counter(orders["status"]).items()))),
        "fills": len(pick["fills"]),
        "first_equity": float(equity.iloc[0]) if len(equity) else None,
        "last_equity": float(equity.iloc[-1]) if len(equity) else None,
        "day_pnl": float(pnl["day_pnl"].dropna().iloc[-1]) if pnl["day_pnl"].notna().any() else None,
        "warnings": int((events["level"] == "warning").sum()) if len(events) else 0,
        "errors": int((events["level"] == "error").sum()) if len(events) else 0,
        "events": json.dumps(dict(sorted(Counter(events["kind"]).items()))),
    }
