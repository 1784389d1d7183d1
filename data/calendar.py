"""Exchange sessions and the bar grid: XNAS (NASDAQ) via exchange-calendars.

Every bar podracer uses sits on a grid derived from the exchange calendar: for an interval of ``k``
minutes, bar starts are ``open, open + k, ...`` up to (not including) the session close, so early
closes (13:00 ET) simply have fewer bars; a trailing bar may be shorter than ``k`` (e.g. the 15:30
bar of ``1h``). Daily bars (``1d``) have one bar per session stamped at the session open.
How source bars are put on that grid (aggregation, forward fills, panels): :mod:`data.align`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from data.errors import DataError

EXCHANGE = "XNAS"
TZ = "America/New_York"  # the exchange's time zone: session dates and hours are read in it
MINUTES_PER_SESSION = 390  # a full regular session, 09:30-16:00 (an early close ends at 13:00)
# minutes per bar for every supported interval; "1d" is one bar per session.
INTERVAL_MINUTES: dict[str, int] = {"1m": 1, "5m": 5, "15m": 15, "30m": 30, "1h": 60, "1d": 0}
NS_PER_MIN = 60 * 1_000_000_000


def check_interval(interval: str) -> str:
    """Return ``interval`` if supported, else raise a one-line DataError."""
    if interval not in INTERVAL_MINUTES:
        raise DataError(f"unsupported interval {interval!r} (use one of {', '.join(INTERVAL_MINUTES)})")
    return interval


def bars_per_session(interval: str) -> int:
    """Bars of a full session on ``interval``'s grid (1 for daily bars)."""
    minutes = INTERVAL_MINUTES[check_interval(interval)]
    return 1 if minutes == 0 else math.ceil(MINUTES_PER_SESSION / minutes)


# --- session dates: the date of a moment in exchange time ----------------------------------------
def _as_utc(timestamps: pd.Series | pd.DatetimeIndex | np.ndarray) -> pd.DatetimeIndex:
    ts = pd.DatetimeIndex(timestamps)
    return ts.tz_localize("UTC") if ts.tz is None else ts.tz_convert("UTC")


def is_date_only(ts: pd.DatetimeIndex) -> bool:
    """Every stamp at midnight UTC: daily bars stored by their session date (no time of day)."""
    return bool(len(ts) and (ts.hour == 0).all() and (ts.minute == 0).all())


def exchange_dates(timestamps: pd.Series | pd.DatetimeIndex | np.ndarray) -> pd.DatetimeIndex:
    """The date (tz-naive midnight) of each moment in the exchange's time zone; tz-naive input is UTC."""
    return _as_utc(timestamps).tz_convert(TZ).tz_localize(None).normalize()


def exchange_date(moment: pd.Timestamp | datetime) -> pd.Timestamp:
    """:func:`exchange_dates` of one moment."""
    return exchange_dates([pd.Timestamp(moment)])[0]


def session_dates(timestamps: pd.Series | pd.DatetimeIndex | np.ndarray) -> pd.DatetimeIndex:
    """The session date (tz-naive midnight) of each bar stamp: its date in exchange time, except
    date-only stamps (all of them at midnight UTC: daily bars stored by date), which keep their date.
    Alpaca stamps a daily bar at midnight New York time, which is the session's exchange-time date."""
    ts = _as_utc(timestamps)
    return ts.tz_localize(None).normalize() if is_date_only(ts) else exchange_dates(ts)


def session_date(stamp: pd.Timestamp | datetime) -> pd.Timestamp:
    """:func:`session_dates` of one bar stamp (a daily bar by its date, any other by exchange time)."""
    return session_dates([pd.Timestamp(stamp)])[0]


def exchange_midnight(day: pd.Timestamp | str) -> pd.Timestamp:
    """Midnight of ``day`` in the exchange's time zone, as a UTC timestamp (where Alpaca stamps the
    daily bar of that session)."""
    return pd.Timestamp(day).tz_localize(TZ).tz_convert("UTC")


@functools.lru_cache(maxsize=2)
def get_calendar(early: bool = False):  # noqa: ANN201 - exchange_calendars type
    """The XNAS calendar (cached). ``early=True`` extends it back to 1990 for old daily data."""
    import exchange_calendars as xcals

    if early:
        return xcals.get_calendar(EXCHANGE, start="1990-01-02")
    return xcals.get_calendar(EXCHANGE)


def _calendar_for(first: pd.Timestamp):
    cal = get_calendar(False)
    return cal if first >= cal.first_session else get_calendar(True)


def sessions_window(start: str | pd.Timestamp, count: int) -> pd.DatetimeIndex:
    """``count`` consecutive XNAS sessions from the first session on or after ``start``."""
    start = pd.Timestamp(start).tz_localize(None).normalize()
    cal = _calendar_for(start)
    if start > cal.last_session:
        raise DataError(
            f"start {start.date()} is after the calendar's last session {cal.last_session.date()}"
        )
    first = cal.date_to_session(start, direction="next")
    try:
        return cal.sessions_window(first, count)
    except Exception as err:  # exchange_calendars raises its own types for out-of-range windows
        raise DataError(f"{count} sessions from {first.date()} run past the XNAS calendar: {err}") from None


def sessions_in_range(start: str | pd.Timestamp, end: str | pd.Timestamp) -> pd.DatetimeIndex:
    """XNAS sessions with ``start <= date <= end`` (dates, tz-naive)."""
    start = pd.Timestamp(start).tz_localize(None).normalize()
    end = pd.Timestamp(end).tz_localize(None).normalize()
    cal = _calendar_for(start)
    start = max(start, cal.first_session)
    end = min(end, cal.last_session)
    if start > end:
        return pd.DatetimeIndex([])
    return cal.sessions_in_range(start, end)


def market_seconds(start: pd.Timestamp | datetime, end: pd.Timestamp | datetime) -> float:
    """Seconds of regular XNAS trading hours between two moments (0 when ``end <= start``): how long
    the market was open in between (nights, weekends, holidays and early closes left out). Friday's
    last hour and Monday's first half hour:

    >>> market_seconds(pd.Timestamp("2024-01-05 20:00", tz="UTC"), pd.Timestamp("2024-01-08 15:00", tz="UTC"))
    5400.0
    """
    lo, hi = _as_utc([pd.Timestamp(start)])[0], _as_utc([pd.Timestamp(end)])[0]
    if hi <= lo:
        return 0.0
    sessions = sessions_in_range(exchange_date(lo), exchange_date(hi))
    opens, closes = session_bounds(sessions)
    overlap = np.minimum(closes, hi.value) - np.maximum(opens, lo.value)
    return float(np.clip(overlap, 0, None).sum()) / 1e9


@dataclass(frozen=True)
class Grid:
    """The bar grid of some sessions: one entry per bar."""

    timestamps: np.ndarray  # (T,) datetime64[ns] UTC bar start
    session_id: np.ndarray  # (T,) int64, index into ``sessions``
    time_of_day: np.ndarray  # (T,) float32, fraction of the session elapsed at the bar's close
    sessions: pd.DatetimeIndex  # (S,) session dates

    def __len__(self) -> int:
        return len(self.timestamps)


def session_bounds(sessions: pd.DatetimeIndex, extended_hours: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """UTC open and close (int64 ns) of each session; extended hours are 04:00-20:00 ET."""
    if len(sessions) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if extended_hours:
        local = pd.DatetimeIndex(sessions).tz_localize(TZ)
        opens = (local + pd.Timedelta(hours=4)).tz_convert("UTC")
        closes = (local + pd.Timedelta(hours=20)).tz_convert("UTC")
        return opens.as_unit("ns").asi8.astype(np.int64), closes.as_unit("ns").asi8.astype(np.int64)
    cal = _calendar_for(sessions[0])
    sched = cal.schedule.loc[sessions]
    opens = pd.DatetimeIndex(sched["open"]).tz_convert("UTC")
    closes = pd.DatetimeIndex(sched["close"]).tz_convert("UTC")
    return opens.as_unit("ns").asi8.astype(np.int64), closes.as_unit("ns").asi8.astype(np.int64)


def session_grid(sessions: pd.DatetimeIndex, interval: str = "1m", extended_hours: bool = False) -> Grid:
    """The bar grid of ``sessions`` for ``interval`` (vectorized; early closes included)."""
    minutes = INTERVAL_MINUTES[check_interval(interval)]
    sessions = pd.DatetimeIndex(sessions)
    opens, closes = session_bounds(sessions, extended_hours)
    if minutes == 0:
        ts = opens.astype("datetime64[ns]")
        return Grid(
            ts, np.arange(len(sessions), dtype=np.int64), np.ones(len(sessions), np.float32), sessions
        )
    step = minutes * NS_PER_MIN
    counts = -((opens - closes) // step)  # ceil((close - open) / step)
    session_id = np.repeat(np.arange(len(sessions), dtype=np.int64), counts)
    starts = np.repeat(opens, counts)
    first_index = np.repeat(np.cumsum(counts) - counts, counts)
    k = np.arange(len(session_id), dtype=np.int64) - first_index
    ts = starts + k * step
    bar_end = np.minimum(ts + step, np.repeat(closes, counts))
    span = np.repeat(closes - opens, counts).astype(np.float64)
    tod = ((bar_end - starts) / span).astype(np.float32)
    return Grid(ts.astype("datetime64[ns]"), session_id, tod, sessions)


def infer_interval(timestamps: pd.Series | pd.DatetimeIndex) -> str:
    """Guess the bar interval from the most common spacing between consecutive bars of a ticker."""
    ts = pd.DatetimeIndex(timestamps)
    if len(ts) < 2:
        raise DataError("cannot infer the bar interval from fewer than 2 bars (pass --interval)")
    diffs = np.diff(np.sort(ts.as_unit("ns").asi8)) // NS_PER_MIN
    diffs = diffs[diffs > 0]
    if len(diffs) == 0:
        raise DataError("cannot infer the bar interval: all timestamps are equal (pass --interval)")
    values, counts = np.unique(diffs, return_counts=True)
    step = int(values[np.argmax(counts)])
    if step >= 24 * 60 - 60:  # daily bars (also spans weekends and DST shifts)
        return "1d"
    for name, minutes in INTERVAL_MINUTES.items():
        if minutes == step:
            return name
    raise DataError(f"bar spacing of {step} minutes is not a supported interval (pass --interval)")
