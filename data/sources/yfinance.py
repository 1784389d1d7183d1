"""Yahoo Finance bars through ``yfinance.download``: daily history and recent intraday bars.

Yahoo only serves intraday bars for recent days (1m: the last ~30 days, at most 8 days per request;
5m-30m: the last 60 days; 1h: the last 730 days), so ranges are split into chunks within those
limits, and a start outside them is a one-line error rather than a silent empty result. Prices are
split/dividend adjusted (``auto_adjust=True``). Daily bars get the session date (``1d`` grid).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pandas as pd

from data.calendar import check_interval
from data.errors import DataError
from data.schema import normalize_ticker, validate
from data.sources.chunks import windows

log = logging.getLogger(__name__)

# interval -> (Yahoo's name, max days per request, how far back Yahoo serves it in days or None)
LIMITS: dict[str, tuple[str, int, int | None]] = {
    "1m": ("1m", 7, 29),
    "5m": ("5m", 59, 59),
    "15m": ("15m", 59, 59),
    "30m": ("30m", 59, 59),
    "1h": ("1h", 365, 729),
    "1d": ("1d", 3650, None),
}
_FIELDS = {"Open": "open", "High": "high", "Low": "low", "Close": "close", "Volume": "volume"}


def _tidy(raw: pd.DataFrame | None, tickers: Sequence[str], daily: bool) -> list[pd.DataFrame]:
    """yfinance's wide frame (columns (ticker, field) or (field, ticker) or flat) -> bar-schema frames."""
    if raw is None or len(raw) == 0:
        return []
    out = []
    if isinstance(raw.columns, pd.MultiIndex):
        field_level = next(
            (i for i in range(raw.columns.nlevels) if "Close" in raw.columns.get_level_values(i)), None
        )
        if field_level is None:
            raise DataError("yfinance: unexpected response columns (no Close field)")
        ticker_level = 1 - field_level
        per_ticker = {
            str(t): raw.xs(t, level=ticker_level, axis=1)
            for t in raw.columns.get_level_values(ticker_level).unique()
        }
    else:
        if len(tickers) != 1:
            raise DataError("yfinance: a flat response for several tickers")
        per_ticker = {tickers[0]: raw}
    for ticker, frame in per_ticker.items():
        missing = [f for f in _FIELDS if f not in frame.columns]
        if missing:
            raise DataError(f"yfinance: {ticker}: response lacks {', '.join(missing)}")
        frame = (
            frame[list(_FIELDS)]
            .rename(columns=_FIELDS)
            .dropna(how="all", subset=["open", "high", "low", "close"])
        )
        if frame.empty:
            log.warning("yfinance returned no bars for %s in this window", ticker)
            continue
        index = pd.DatetimeIndex(frame.index)
        if daily:
            # Session date only, at midnight UTC: the schema's daily-bar convention.
            local = index.tz_localize(None) if index.tz is not None else index
            stamps = local.normalize().tz_localize("UTC")
        else:
            stamps = index.tz_convert("UTC") if index.tz is not None else index.tz_localize("UTC")
        tidy = frame.reset_index(drop=True)
        tidy.insert(0, "timestamp", stamps)
        tidy.insert(1, "ticker", ticker.upper())
        out.append(tidy)
    return out


def check_range(start: str, end: str, interval: str, *, today: pd.Timestamp | None = None) -> tuple:
    """(first, last) session dates of ``start..end``, or a one-line error when Yahoo cannot serve
    them (``interval`` older than it keeps, or a reversed range)."""
    check_interval(interval)
    _, _, max_age = LIMITS[interval]
    try:
        first = pd.Timestamp(start).normalize()
        last = pd.Timestamp(end).normalize()
    except (ValueError, TypeError):
        raise DataError(f"yfinance: bad --start/--end {start!r} {end!r} (use YYYY-MM-DD)") from None
    if last < first:
        raise DataError(f"yfinance: end {end} is before start {start}")
    now = pd.Timestamp.now(tz="UTC") if today is None else pd.Timestamp(today)
    if now.tzinfo is not None:
        now = now.tz_convert("UTC").tz_localize(None)
    if max_age is not None and first < now.normalize() - pd.Timedelta(days=max_age):
        raise DataError(
            f"yfinance serves {interval} bars only for the last {max_age} days; start {first.date()} is older "
            "(use --interval 1d, or --source alpaca)"
        )
    return first.date(), last.date()


def fetch_chunk(symbols: Sequence[str], lo, hi, interval: str) -> pd.DataFrame:  # noqa: ANN001 - dates
    """Validated bars of ``symbols`` for dates ``[lo, hi)`` in one ``yfinance.download`` call (the
    window must respect ``LIMITS``; ``data.sources.chunks.plan_chunks`` cuts it so)."""
    import yfinance

    name = LIMITS[interval][0]
    try:
        raw = yfinance.download(
            tickers=list(symbols),
            start=pd.Timestamp(lo).strftime("%Y-%m-%d"),
            end=pd.Timestamp(hi).strftime("%Y-%m-%d"),  # yfinance's end is exclusive
            interval=name,
            auto_adjust=True,
            actions=False,
            prepost=False,
            progress=False,
            threads=False,
            group_by="ticker",
            multi_level_index=True,
        )
    except Exception as err:  # yfinance raises many types (HTTP, JSON, its own)
        first_line = (str(err).splitlines() or [type(err).__name__])[0][:200]
        raise DataError(f"yfinance: download failed: {first_line}") from None
    frames = _tidy(raw, list(symbols), daily=interval == "1d")
    if not frames:
        return pd.DataFrame(columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"])
    bars = pd.concat(frames, ignore_index=True)
    bars = bars.drop_duplicates(["ticker", "timestamp"], keep="last")
    bars = bars.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
    return validate(bars, source="yfinance")


def fetch_yfinance(
    tickers: Sequence[str],
    start: str,
    end: str,
    interval: str = "1d",
    *,
    today: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """Bars of ``tickers`` for dates ``start..end`` (inclusive) as a validated bar frame."""
    first, last = check_range(start, end, interval, today=today)
    # The ticker rule before any request is built from what the user typed (deduplicated: BRK/B = BRK.B).
    symbols = list(dict.fromkeys(normalize_ticker(t, source="yfinance") for t in tickers))
    per_request = LIMITS[interval][1]
    frames = [fetch_chunk(symbols, lo, hi, interval) for lo, hi in windows(first, last, per_request)]
    frames = [f for f in frames if len(f)]
    if not frames:
        raise DataError(f"yfinance: no {interval} bars for {', '.join(symbols)} between {start} and {end}")
    bars = pd.concat(frames, ignore_index=True)
    return bars.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
