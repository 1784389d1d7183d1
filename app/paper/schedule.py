"""When paper trading decides: on the env's decision grid, anchored at each session's open.

The env decides on bars ``0, k, 2k, ...`` of a window that starts at a session's open
(``k = decision_interval``); with the defaults (1-minute bars, ``k = 15``, sessions of 390 or 210
bars) every session's decisions sit on bars ``0, k, 2k, ...`` of that session. Paper trading decides
on the same bars: a cycle is due ``settle`` seconds after decision bar ``j·k`` of the session has
completed, i.e. at ``open + (j·k + 1)·bar + settle``. A policy that trades only at each session's
first decision (a ``trade_window``) therefore trades on paper at the first bar of every session, as it
did in its backtest, whenever the loop was started. (Where a session's bar count is not a multiple of
``k``, the env's grid drifts from session to session; paper keeps the session-anchored grid, and the
policy sees the decision's time of day in its observation either way.)

Daily bundles have no intraday grid: they keep one cycle per decision interval. ``next_wait`` is how
long the paper loop sleeps before its next cycle, by the broker's clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import pandas as pd

from app.paper.broker import Broker, BrokerError
from data.calendar import (
    INTERVAL_MINUTES,
    MINUTES_PER_SESSION,
    exchange_date,
    session_bounds,
    sessions_in_range,
)

if TYPE_CHECKING:
    from app.bundle import Bundle

BAR_SETTLE_S = 10.0  # seconds after a bar ends before it is asked for: the feed publishes it a moment late
LOOKAHEAD_DAYS = 10  # calendar days searched for the next session (weekends and holidays)


def session_decision_times(
    session: pd.Timestamp, interval: str, decision_interval: int, settle: float = BAR_SETTLE_S
) -> pd.DatetimeIndex:
    """The UTC times at which the cycles of ``session`` (a session date) are due, in order."""
    bar = INTERVAL_MINUTES[interval]
    opens, closes = session_bounds(pd.DatetimeIndex([session]))
    open_ts, close_ts = pd.Timestamp(int(opens[0]), tz="UTC"), pd.Timestamp(int(closes[0]), tz="UTC")
    bars = int((close_ts - open_ts) / pd.Timedelta(minutes=bar))
    first_bars = range(0, bars, max(1, int(decision_interval)))
    ends = [open_ts + pd.Timedelta(minutes=bar * (j + 1)) for j in first_bars]
    return pd.DatetimeIndex(ends) + pd.Timedelta(seconds=settle)


def next_decision_time(
    now: datetime | pd.Timestamp, interval: str, decision_interval: int, settle: float = BAR_SETTLE_S
) -> pd.Timestamp | None:
    """The first due time strictly after ``now`` (tz-aware), or ``None`` for a daily bundle (no grid)."""
    if not INTERVAL_MINUTES[interval]:
        return None
    now_ts = pd.Timestamp(now)
    now_ts = now_ts.tz_localize("UTC") if now_ts.tzinfo is None else now_ts.tz_convert("UTC")
    today = exchange_date(now_ts)
    for session in sessions_in_range(today, today + pd.Timedelta(days=LOOKAHEAD_DAYS)):
        due = session_decision_times(session, interval, decision_interval, settle)
        later = due[due > now_ts]
        if len(later):
            return later[0]
    return None


def cycle_period(bundle: Bundle | None) -> float:
    """Seconds between two decisions of ``bundle`` (at least a minute; 5 minutes with no bundle)."""
    if bundle is None:
        return 300.0
    bar_minutes = INTERVAL_MINUTES[bundle.interval] or MINUTES_PER_SESSION  # a daily bar: one session
    return max(60.0, bundle.decision_interval * bar_minutes * 60.0)


def next_wait(bundle: Bundle | None, broker: Broker, *, closed: bool, fallback: float) -> float:
    """Seconds until the next cycle is due: the next decision of the session-anchored grid
    (``app.paper.schedule``) by the broker's clock, from its next open when the market is closed;
    at most an hour while closed (the loop looks again). A daily bundle waits ``fallback`` (one
    decision interval) while open; without a clock, ``fallback`` (5 minutes while closed)."""
    try:
        clock = broker.clock()
    except BrokerError:
        return 300.0 if closed else fallback
    now = pd.Timestamp(clock.timestamp)
    # Closed: the first decision at or after the next open (a due time strictly after ``start``).
    start = max(now, pd.Timestamp(clock.next_open) - pd.Timedelta(microseconds=1)) if closed else now
    due = None
    if bundle is not None:
        due = next_decision_time(start, bundle.interval, bundle.decision_interval)
    if due is None:
        due = pd.Timestamp(clock.next_open) if closed else now + pd.Timedelta(seconds=fallback)
    wait = (due - now).total_seconds()
    return max(60.0, min(3600.0, wait)) if closed else wait
