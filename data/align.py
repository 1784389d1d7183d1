"""Source bars onto the XNAS bar grid (:mod:`data.calendar`): one ticker, then a dense panel.

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
from dataclasses import dataclass

import numpy as np
import pandas as pd

from data.calendar import (
    INTERVAL_MINUTES,
    NS_PER_MIN,
    Grid,
    check_interval,
    exchange_dates,
    is_date_only,
    session_bounds,
    session_dates,
    session_grid,
    sessions_in_range,
)
from data.errors import DataError

log = logging.getLogger(__name__)


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
    step = INTERVAL_MINUTES[interval] * NS_PER_MIN
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
    date_only = is_date_only(ts)
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


def _sessions_of(frames: dict[str, pd.DataFrame]) -> tuple[dict[str, pd.DatetimeIndex], pd.DatetimeIndex]:
    """Each ticker's exchange dates, and the XNAS sessions any ticker has (a DataError if none)."""
    dates_of: dict[str, pd.DatetimeIndex] = {}
    for ticker, frame in frames.items():
        ts = pd.DatetimeIndex(frame["timestamp"]).tz_convert("UTC")
        dates_of[ticker] = pd.DatetimeIndex(exchange_dates(ts).unique())
    all_dates = functools.reduce(lambda a, b: a.union(b), dates_of.values()).sort_values()
    cal_sessions = sessions_in_range(all_dates.min(), all_dates.max())
    sessions = cal_sessions[cal_sessions.isin(all_dates)]
    if len(sessions) == 0:
        raise DataError("no bars fall on XNAS sessions")
    return dates_of, sessions


def _covered_tickers(
    dates_of: dict[str, pd.DatetimeIndex], judged: pd.DatetimeIndex, min_coverage: float
) -> list[str]:
    """The tickers with bars in at least ``min_coverage`` of the ``judged`` sessions, sorted (the
    others dropped with a warning; a DataError if none remain)."""
    kept = []
    for ticker in sorted(dates_of):
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
    return kept


def _on_grid(
    frames: dict[str, pd.DataFrame], kept: list[str], grid_ts: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, int], np.ndarray]:
    """The kept tickers' bars placed on the grid: (T, A) OHLCV arrays (NaN where no bar landed), the
    bars each ticker's frame had filled, and where a real source bar sits (landed and not filled)."""
    num_steps, num_assets = len(grid_ts), len(kept)
    arrays = {c: np.full((num_steps, num_assets), np.nan) for c in ("open", "high", "low", "close", "volume")}
    gaps: dict[str, int] = {}
    filled_at: list[tuple[int, np.ndarray, np.ndarray]] = []
    for j, ticker in enumerate(kept):
        frame = frames[ticker]
        ts = pd.DatetimeIndex(frame["timestamp"]).tz_convert("UTC").as_unit("ns").asi8
        idx = np.searchsorted(grid_ts, ts)
        ok = (idx < num_steps) & (grid_ts[np.minimum(idx, num_steps - 1)] == ts)
        for c in arrays:
            arrays[c][idx[ok], j] = frame[c].to_numpy(dtype=np.float64)[ok]
        gaps[ticker] = 0
        if "filled" in frame:
            filled = frame["filled"].to_numpy(dtype=bool)[ok]
            gaps[ticker] = int(filled.sum())
            filled_at.append((j, idx[ok], filled))
    # Real bars: a source bar landed there and align_ticker did not forward-fill it.
    real = ~np.isnan(arrays["close"])
    for j, rows, filled in filled_at:
        real[rows, j] &= ~filled
    return arrays, gaps, real


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
    dates_of, sessions = _sessions_of(frames)
    judged = sessions[: max(1, int(round(len(sessions) * coverage_frac)))]
    kept = _covered_tickers(dates_of, judged, min_coverage)
    grid = session_grid(sessions, interval, extended_hours)
    arrays, gaps, real = _on_grid(frames, kept, grid.timestamps.astype(np.int64))
    missing = np.isnan(arrays["close"])
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
