"""Exchange sessions and the bar grid: XNAS (NASDAQ) via exchange-calendars.

Every bar podracer uses sits on a grid derived from the exchange calendar: for an interval of ``k``
minutes, bar starts are ``open, open + k, ...`` up to (not including) the session close, so early
closes (13:00 ET) simply have fewer bars; a trailing bar may be shorter than ``k`` (e.g. the 15:30
bar of ``1h``). Daily bars (``1d``) have one bar per session stamped at the session open.

Alignment policy (``align_ticker``):
- regular hours only by default; bars outside are dropped (``extended_hours=True`` keeps
  04:00-20:00 ET instead, on the same k-minute grid);
- finer source bars are aggregated to the interval (first open, max high, min low, last close,
  summed volume);
- inside a session, a grid bar with no source bar **after the ticker's first bar of that session**
  is forward-filled: open = high = low = close = the previous close, volume 0, ``filled=True``,
  and counted as a gap;
- grid bars **before** the ticker's first bar of a session are not invented here (the store keeps
  only real and forward-filled bars). ``align_panel`` later carries the previous session's last
  close into them (volume 0, counted as filled) and trims the start of the panel until every ticker
  has traded, so no bar ever carries a price from its future.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from data.errors import DataError

log = logging.getLogger(__name__)

EXCHANGE = "XNAS"
TZ = "America/New_York"  # the exchange's time zone: session dates and hours are read in it
MINUTES_PER_SESSION = 390  # a full regular session, 09:30-16:00 (an early close ends at 13:00)
# minutes per bar for every supported interval; "1d" is one bar per session.
INTERVAL_MINUTES: dict[str, int] = {"1m": 1, "5m": 5, "15m": 15, "30m": 30, "1h": 60, "1d": 0}
_NS_PER_MIN = 60 * 1_000_000_000


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


def _date_only(ts: pd.DatetimeIndex) -> bool:
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
    return ts.tz_localize(None).normalize() if _date_only(ts) else exchange_dates(ts)


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
    step = minutes * _NS_PER_MIN
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
    diffs = np.diff(np.sort(ts.as_unit("ns").asi8)) // _NS_PER_MIN
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


@dataclass(frozen=True)
class AlignedTicker:
    """One ticker's bars on the grid: real bars plus within-session forward fills."""

    frame: pd.DataFrame  # timestamp (UTC), ticker, open, high, low, close, volume, filled
    gaps_filled: int
    bars_dropped_outside_hours: int


def align_ticker(
    bars: pd.DataFrame,
    interval: str,
    *,
    extended_hours: bool = False,
    source: str = "input",
) -> AlignedTicker:
    """Put one ticker's validated bars on the XNAS grid (see the module docstring for the policy)."""
    check_interval(interval)
    ticker = str(bars["ticker"].iloc[0])
    ts = pd.DatetimeIndex(bars["timestamp"]).tz_convert("UTC")
    if INTERVAL_MINUTES[interval] == 0:
        return _align_daily(bars, ts, ticker, source, extended_hours)
    local_dates = exchange_dates(ts)
    sessions = sessions_in_range(local_dates.min(), local_dates.max())
    grid = session_grid(sessions, interval, extended_hours)
    opens, closes = session_bounds(sessions, extended_hours)
    # Map each bar to its session (by local date) and keep it only inside [open, close).
    pos = sessions.get_indexer(local_dates)
    values = ts.as_unit("ns").asi8
    inside = pos >= 0
    inside[inside] &= (values[inside] >= opens[pos[inside]]) & (values[inside] < closes[pos[inside]])
    dropped = int((~inside).sum())
    kept = bars.loc[inside].copy()
    if kept.empty:
        return AlignedTicker(_empty_frame(), 0, dropped)
    kept_pos = pos[inside]
    step = INTERVAL_MINUTES[interval] * _NS_PER_MIN
    kept_vals = values[inside]
    bin_start = opens[kept_pos] + ((kept_vals - opens[kept_pos]) // step) * step
    kept["timestamp"] = bin_start
    agg = kept.groupby("timestamp", sort=True).agg(
        open=("open", "first"),
        high=("high", "max"),
        low=("low", "min"),
        close=("close", "last"),
        volume=("volume", "sum"),
    )
    # Grid bars from each session's first real bar to the session end.
    grid_ts = grid.timestamps.astype(np.int64)
    first_in_session = (
        pd.Series(agg.index.values).groupby(grid.session_id[np.searchsorted(grid_ts, agg.index.values)]).min()
    )
    has_first = np.full(len(sessions), np.iinfo(np.int64).max)
    has_first[first_in_session.index.values] = first_in_session.values
    keep_grid = grid_ts >= has_first[grid.session_id]
    target = grid_ts[keep_grid]
    frame = agg.reindex(target)
    filled = frame["close"].isna().to_numpy()
    close = frame["close"].ffill()  # never crosses a session: each session starts with a real bar
    for col in ("open", "high", "low"):
        frame[col] = frame[col].where(~filled, close)
    frame["close"] = close
    frame["volume"] = frame["volume"].fillna(0.0)
    out = frame.reset_index(names="timestamp")
    out["timestamp"] = _utc(out["timestamp"].to_numpy())
    out.insert(1, "ticker", ticker)
    out["filled"] = filled
    return AlignedTicker(out[_COLUMNS].reset_index(drop=True), int(filled.sum()), dropped)


_COLUMNS = ["timestamp", "ticker", "open", "high", "low", "close", "volume", "filled"]


def _utc(ns: np.ndarray) -> pd.DatetimeIndex:
    """int64 nanoseconds since the epoch -> UTC timestamps (a view, no per-element parsing)."""
    return pd.DatetimeIndex(np.asarray(ns, dtype=np.int64).view("datetime64[ns]")).tz_localize("UTC")


def _empty_frame() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in _COLUMNS}).astype(
        {"timestamp": "datetime64[ns, UTC]", "ticker": "object", "filled": "bool"}
    )


def _align_daily(
    bars: pd.DataFrame, ts: pd.DatetimeIndex, ticker: str, source: str, extended_hours: bool = False
) -> AlignedTicker:
    """Daily bars: one per session, stamped at the session's open; non-session dates dropped.

    Date-only input (midnight UTC) is taken as is; intraday input is restricted to the session's
    hours and aggregated per session (first open, max high, min low, last close, summed volume).
    """
    date_only = _date_only(ts)
    # A date-only daily bar is stored at midnight UTC, which is the previous evening in New York.
    dates = session_dates(ts)
    sessions = sessions_in_range(dates.min(), dates.max())
    pos = sessions.get_indexer(dates)
    inside = pos >= 0
    opens, closes = session_bounds(sessions, extended_hours)
    if not date_only:
        values = ts.as_unit("ns").asi8
        inside[inside] &= (values[inside] >= opens[pos[inside]]) & (values[inside] < closes[pos[inside]])
    kept = bars.loc[inside].copy()
    if kept.empty:
        return AlignedTicker(_empty_frame(), 0, int((~inside).sum()))
    regular_opens, _ = session_bounds(sessions)
    kept["timestamp"] = regular_opens[pos[inside]]
    agg = kept.groupby("timestamp", sort=True).agg(
        open=("open", "first"),
        high=("high", "max"),
        low=("low", "min"),
        close=("close", "last"),
        volume=("volume", "sum"),
    )
    out = agg.reset_index()
    out["timestamp"] = _utc(out["timestamp"].to_numpy())
    out.insert(1, "ticker", ticker)
    out["filled"] = False
    return AlignedTicker(out[_COLUMNS].reset_index(drop=True), 0, int((~inside).sum()))


@dataclass(frozen=True)
class Panel:
    """Dense ``(T, A)`` bars of several tickers on one grid (host-side numpy)."""

    tickers: tuple[str, ...]
    grid: Grid
    open: np.ndarray  # (T, A) float64
    high: np.ndarray  # (T, A)
    low: np.ndarray  # (T, A)
    close: np.ndarray  # (T, A)
    volume: np.ndarray  # (T, A)
    gaps_filled: dict[str, int]
    interval: str
    # (T, A) bool: the bar came from a source bar (False where forward-filled or carried); None = all
    # real (synthetic data). MarketData.tradable is built from it.
    real: np.ndarray | None = None
    # (T, A) bool: the ticker is an index member at the bar (a universe by date); None = always.
    member: np.ndarray | None = None


def align_panel(
    frames: dict[str, pd.DataFrame],
    interval: str,
    *,
    min_coverage: float = 0.5,
    extended_hours: bool = False,
    coverage_frac: float = 1.0,
    carry_leading: bool = False,
) -> Panel:
    """Stack per-ticker aligned frames (``align_ticker`` output) into one dense panel.

    Sessions are the union of sessions any ticker has. A ticker present in fewer than
    ``min_coverage`` of them is dropped with a warning (a DataError if none remain). Leading bars of a
    session before the ticker's first bar carry the previous close (volume 0, counted as filled); the
    panel starts at the first bar where every kept ticker has a price, so nothing is back-filled.
    Coverage is judged on the first ``coverage_frac`` of the sessions only (the loader passes its
    train fraction: whether a ticker is kept must not depend on data the model must not see).
    ``Panel.real`` marks the bars that came from a source bar (not forward-filled, not carried).
    ``carry_leading``: the panel starts at its first session whatever the tickers' first bars; a
    ticker's bars before its first one carry that bar's open (volume 0, not real, so never tradable),
    for a caller that judges each window's tickers itself (a walk-forward's folds,
    ``data.fold_market.fold_universe``): a late ticker must not move the start of the others.
    """
    check_interval(interval)
    if not frames:
        raise DataError("no bars to align")
    dates_of: dict[str, pd.DatetimeIndex] = {}
    for ticker, frame in frames.items():
        ts = pd.DatetimeIndex(frame["timestamp"]).tz_convert("UTC")
        dates_of[ticker] = pd.DatetimeIndex(exchange_dates(ts).unique())
    all_dates = functools.reduce(lambda a, b: a.union(b), dates_of.values()).sort_values()
    cal_sessions = sessions_in_range(all_dates.min(), all_dates.max())
    sessions = cal_sessions[cal_sessions.isin(all_dates)]
    if len(sessions) == 0:
        raise DataError("no bars fall on XNAS sessions")
    judged = sessions[: max(1, int(round(len(sessions) * coverage_frac)))]
    kept = []
    for ticker in sorted(frames):
        coverage = dates_of[ticker].isin(judged).sum() / len(judged)
        if coverage < min_coverage:
            log.warning(
                "dropping %s: bars in %.0f%% of the sessions judged (min_coverage=%.0f%%)",
                ticker,
                100 * coverage,
                100 * min_coverage,
            )
            continue
        kept.append(ticker)
    if not kept:
        raise DataError(
            f"no ticker has bars in at least {min_coverage:.0%} of the {len(judged)} sessions judged"
        )
    grid = session_grid(sessions, interval, extended_hours)
    grid_ts = grid.timestamps.astype(np.int64)
    num_steps, num_assets = len(grid_ts), len(kept)
    arrays = {c: np.full((num_steps, num_assets), np.nan) for c in ("open", "high", "low", "close", "volume")}
    gaps: dict[str, int] = {}
    for j, ticker in enumerate(kept):
        frame = frames[ticker]
        ts = pd.DatetimeIndex(frame["timestamp"]).tz_convert("UTC").as_unit("ns").asi8
        idx = np.searchsorted(grid_ts, ts)
        ok = (idx < num_steps) & (grid_ts[np.minimum(idx, num_steps - 1)] == ts)
        for c in arrays:
            arrays[c][idx[ok], j] = frame[c].to_numpy(dtype=np.float64)[ok]
        gaps[ticker] = int(frame["filled"].to_numpy(dtype=bool)[ok].sum()) if "filled" in frame else 0
    missing = np.isnan(arrays["close"])
    # Real bars: a source bar landed there and align_ticker did not forward-fill it.
    real = ~missing
    for j, ticker in enumerate(kept):
        frame = frames[ticker]
        if "filled" in frame:
            ts = pd.DatetimeIndex(frame["timestamp"]).tz_convert("UTC").as_unit("ns").asi8
            idx = np.searchsorted(grid_ts, ts)
            ok = (idx < num_steps) & (grid_ts[np.minimum(idx, num_steps - 1)] == ts)
            real[idx[ok], j] &= ~frame["filled"].to_numpy(dtype=bool)[ok]
    close = pd.DataFrame(arrays["close"]).ffill().to_numpy()  # carries the previous session's close
    if carry_leading:
        # Only the bars before a ticker's first bar are still NaN: a flat line at its first open
        # (its features read as no move; its first bar's return is that bar's own open to close).
        first_open = pd.DataFrame(arrays["open"]).bfill().to_numpy()[0]
        close = np.where(np.isnan(close), first_open, close)
    for c in ("open", "high", "low"):
        arrays[c] = np.where(missing, close, arrays[c])
    arrays["close"] = close
    arrays["volume"] = np.where(missing, 0.0, arrays["volume"])
    valid_rows = ~np.isnan(close).any(axis=1)
    if not valid_rows.any():
        raise DataError("the tickers never all have a price at the same bar")
    start = int(np.argmax(valid_rows))
    for j, ticker in enumerate(kept):
        gaps[ticker] += int(missing[start:, j].sum())
    trimmed = Grid(grid.timestamps[start:], grid.session_id[start:], grid.time_of_day[start:], sessions)
    return Panel(
        tickers=tuple(kept),
        grid=trimmed,
        open=arrays["open"][start:],
        high=arrays["high"][start:],
        low=arrays["low"][start:],
        close=arrays["close"][start:],
        volume=arrays["volume"][start:],
        gaps_filled=gaps,
        interval=interval,
        real=real[start:],
    )


def resample_panel(panel: Panel, interval: str) -> Panel:
    """Aggregate a finer panel to ``interval`` on the same sessions (o first, h max, l min, c last, v sum)."""
    check_interval(interval)
    if interval == panel.interval:
        return panel
    if INTERVAL_MINUTES[interval] != 0 and INTERVAL_MINUTES[interval] < INTERVAL_MINUTES[panel.interval]:
        raise DataError(f"cannot resample {panel.interval} bars to the finer interval {interval}")
    sessions = panel.grid.sessions
    target = session_grid(sessions, interval)
    old_ts = panel.grid.timestamps.astype(np.int64)
    new_ts = target.timestamps.astype(np.int64)
    # Session ids of the old grid index ``sessions``; daily targets have one bar per session.
    if INTERVAL_MINUTES[interval] == 0:
        bin_of = panel.grid.session_id
    else:
        bin_of = np.searchsorted(new_ts, old_ts, side="right") - 1
    starts = np.flatnonzero(np.r_[True, bin_of[1:] != bin_of[:-1]])
    ends = np.r_[starts[1:], len(old_ts)] - 1
    used = bin_of[starts]
    return Panel(
        tickers=panel.tickers,
        grid=Grid(target.timestamps[used], target.session_id[used], target.time_of_day[used], sessions),
        open=panel.open[starts],
        high=np.maximum.reduceat(panel.high, starts, axis=0),
        low=np.minimum.reduceat(panel.low, starts, axis=0),
        close=panel.close[ends],
        volume=np.add.reduceat(panel.volume, starts, axis=0),
        gaps_filled=dict(panel.gaps_filled),
        interval=interval,
        # A coarser bar is real when its first source bar is: fills happen at its open, which is that
        # bar's open (a forward-filled one would be the previous close, a price nobody traded at).
        real=None if panel.real is None else panel.real[starts],
        member=None if panel.member is None else panel.member[starts],
    )
