"""Yahoo Finance bars through ``yfinance.download``: daily history and recent intraday bars.

Yahoo only serves intraday bars for recent days (1m: the last ~30 days, at most 8 days per request;
5m-30m: the last 60 days; 1h: the last 730 days), so ranges are split into chunks within those
limits, and a start outside them is a one-line error rather than a silent empty result. Daily bars
get the session date (``1d`` grid).

Adjustment. Yahoo's prices are adjusted *as of the request day*: ``Close`` (``auto_adjust=False``) for
every split up to that day (volume too), ``Adj Close`` also for dividends. Stored that way, a split
between two nightly fetches would be a fake jump inside the history. So the streaming fetch
(``data.sources.stream``) stores yfinance bars like Alpaca's: **raw** plus the corporate actions
(``data.actions``, adjusted on load). ``fetch_actions`` reads the ticker's full split and dividend
history (``yfinance.Ticker``), and ``unsplit`` multiplies each bar back by the ratios of the splits
Yahoo knew at that request whose ex-date is after the bar (volume divided), which undoes exactly
what Yahoo applied, whichever day it was asked. Yahoo also states past dividends per *today's*
share, so each dividend is multiplied back by the ratios of the later splits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from data.actions import check_actions, empty_actions, session_dates
from data.calendar import check_interval
from data.errors import DataError, one_line
from data.schema import validate
from data.sources.access import DATA_TIMEOUT_S
from data.sources.retry import Transient

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
    window must respect ``LIMITS``; ``data.sources.chunks.plan_chunks`` cuts it so), as Yahoo's
    ``Close`` (``auto_adjust=False``): split-adjusted as of the request day, the input of ``unsplit``."""
    import yfinance

    name = LIMITS[interval][0]
    try:
        raw = yfinance.download(
            tickers=list(symbols),
            start=pd.Timestamp(lo).strftime("%Y-%m-%d"),
            end=pd.Timestamp(hi).strftime("%Y-%m-%d"),  # yfinance's end is exclusive
            interval=name,
            auto_adjust=False,
            actions=False,
            prepost=False,
            progress=False,
            threads=False,
            group_by="ticker",
            multi_level_index=True,
            timeout=DATA_TIMEOUT_S,  # per request; the corporate-actions reads use yfinance's own 10 s
        )
    except Exception as err:  # yfinance raises many types (HTTP, JSON, its own)
        first_line = one_line(err, 200, typed=False)
        raise DataError(f"yfinance: download failed: {first_line}") from None
    frames = _tidy(raw, list(symbols), daily=interval == "1d")
    if not frames:
        return pd.DataFrame(columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"])
    bars = pd.concat(frames, ignore_index=True)
    bars = bars.drop_duplicates(["ticker", "timestamp"], keep="last")
    bars = bars.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
    return validate(bars, source="yfinance")


def _series(reply: object, symbol: str, what: str) -> pd.Series:
    """Yahoo's ``splits`` / ``dividends`` reply as a float Series on naive session dates."""
    if isinstance(reply, pd.DataFrame) and what == "dividends" and "Dividends" in reply:
        reply = reply["Dividends"]  # the frame yfinance returns when a dividend has its own currency
    if not isinstance(reply, pd.Series):
        raise DataError(f"yfinance: {symbol}: malformed {what} reply ({type(reply).__name__}, not a series)")
    if reply.empty:
        return pd.Series([], index=pd.DatetimeIndex([]), dtype=float)
    try:
        index = pd.DatetimeIndex(reply.index)
    except (TypeError, ValueError):
        raise DataError(f"yfinance: {symbol}: malformed {what} reply (dates unreadable)") from None
    if index.tz is not None:
        index = index.tz_localize(None)  # Yahoo's dates are midnight in the exchange's zone
    values = pd.to_numeric(pd.Series(reply.to_numpy()), errors="coerce").to_numpy(dtype=float)
    return pd.Series(values, index=index.normalize())


def fetch_actions(symbol: str) -> pd.DataFrame:
    """Every split and cash dividend Yahoo knows for ``symbol`` (its full history) as a
    ``data.actions`` frame on the raw basis (see the module docstring). No reply at all (yfinance
    hides the error and answers None) is ``Transient``; a malformed one a one-line DataError."""
    import yfinance

    try:
        ticker = yfinance.Ticker(symbol)
        splits_reply, dividends_reply = ticker.splits, ticker.dividends
    except Exception as err:  # yfinance raises many types (HTTP, JSON, its own)
        first_line = one_line(err, 200, typed=False)
        raise Transient(f"{symbol}: corporate actions: {first_line}") from None
    if splits_reply is None or dividends_reply is None:
        raise Transient(f"{symbol}: no corporate-actions reply from Yahoo")
    splits = _series(splits_reply, symbol, "splits")
    dividends = _series(dividends_reply, symbol, "dividends")
    split_frame = check_actions(
        pd.DataFrame({"ex_date": splits.index, "kind": "split", "ratio": splits.to_numpy(), "cash": 0.0}),
        f"yfinance: {symbol} splits",
    )
    later = np.ones(len(dividends))
    div_days = dividends.index.to_numpy(dtype="datetime64[ns]")
    for ex_date, ratio in split_frame[["ex_date", "ratio"]].itertuples(index=False):
        later[div_days < pd.Timestamp(ex_date).as_unit("ns").to_datetime64()] *= ratio
    div_frame = pd.DataFrame(
        {"ex_date": dividends.index, "kind": "dividend", "ratio": 1.0, "cash": dividends.to_numpy() * later}
    )
    div_frame = check_actions(div_frame, f"yfinance: {symbol} dividends")
    div_frame = div_frame.loc[div_frame["cash"] > 0]
    frames = [f for f in (split_frame, div_frame) if len(f)]
    if not frames:
        return empty_actions()
    out = pd.concat(frames, ignore_index=True).drop_duplicates(["ex_date", "kind"], keep="last")
    return out.sort_values(["ex_date", "kind"], kind="stable").reset_index(drop=True)


def unsplit(bars: pd.DataFrame, actions: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Raw copy of Yahoo's split-adjusted ``bars``: every bar before a split's ex-date in
    ``actions[ticker]`` (the splits Yahoo knew when it served them) gets prices x ratio and
    volume / ratio."""
    if bars.empty:
        return bars
    out = bars.copy()
    days = session_dates(out["timestamp"])
    tickers = out["ticker"].to_numpy()
    price = np.ones(len(out))
    for ticker, table in actions.items():
        rows = tickers == ticker
        for ex_date, kind, ratio in table[["ex_date", "kind", "ratio"]].itertuples(index=False):
            if kind == "split":
                ex = pd.Timestamp(ex_date).as_unit("ns").to_datetime64()
                price[rows & (days < ex)] *= ratio
    for col in ("open", "high", "low", "close"):
        out[col] = out[col].to_numpy() * price
    out["volume"] = out["volume"].to_numpy() / price
    return out
