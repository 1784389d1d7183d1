"""Alpaca historical bars through alpaca-py's ``StockHistoricalDataClient``.

Keys come from ``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY``; ``APCA_API_DATA_URL`` overrides the data
API's base URL (``url_override``; tests point it at a local HTTP server); ``APCA_DATA_FEED`` picks the
feed (``iex``, the free plan's, by default; ``sip`` with a subscription). Prices are adjusted for
splits and dividends (``adjustment=all``). The client follows ``next_page_token`` pagination itself;
we also split long ranges into ``CHUNK_DAYS`` windows so one request never asks for years of minutes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta

import pandas as pd

from data.calendar import TZ, check_interval
from data.errors import DataError
from data.schema import normalize_ticker, validate

CHUNK_DAYS = 31


def _timeframe(interval: str):  # noqa: ANN202 - alpaca-py type
    from alpaca.data.timeframe import TimeFrame, TimeFrameUnit

    units = {
        "1m": (1, TimeFrameUnit.Minute),
        "5m": (5, TimeFrameUnit.Minute),
        "15m": (15, TimeFrameUnit.Minute),
        "30m": (30, TimeFrameUnit.Minute),
        "1h": (1, TimeFrameUnit.Hour),
        "1d": (1, TimeFrameUnit.Day),
    }
    amount, unit = units[check_interval(interval)]
    return TimeFrame(amount, unit)


def make_client():  # noqa: ANN201 - alpaca-py type
    """A ``StockHistoricalDataClient`` from the environment (one-line error when keys are missing)."""
    from alpaca.data.historical import StockHistoricalDataClient

    key = os.environ.get("APCA_API_KEY_ID", "").strip()
    secret = os.environ.get("APCA_API_SECRET_KEY", "").strip()
    if not key or not secret:
        raise DataError(
            "alpaca: set APCA_API_KEY_ID and APCA_API_SECRET_KEY (a free paper account's keys work)"
        )
    url = os.environ.get("APCA_API_DATA_URL") or None
    return StockHistoricalDataClient(api_key=key, secret_key=secret, url_override=url)


def _windows(start: pd.Timestamp, end: pd.Timestamp) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """[start, end) split into windows of at most CHUNK_DAYS days."""
    out = []
    cursor = start
    while cursor < end:
        stop = min(cursor + timedelta(days=CHUNK_DAYS), end)
        out.append((cursor, stop))
        cursor = stop
    return out


def fetch_alpaca(
    tickers: Sequence[str],
    start: str,
    end: str,
    interval: str = "1m",
    *,
    client=None,  # noqa: ANN001
) -> pd.DataFrame:
    """Bars of ``tickers`` for session dates ``start..end`` (inclusive) as a validated bar frame."""
    from alpaca.common.exceptions import APIError
    from alpaca.data.enums import Adjustment, DataFeed
    from alpaca.data.requests import StockBarsRequest

    timeframe = _timeframe(interval)
    try:
        first = pd.Timestamp(start).tz_localize(TZ)
        last = pd.Timestamp(end).tz_localize(TZ) + pd.Timedelta(days=1)
    except (ValueError, TypeError):
        raise DataError(f"alpaca: bad --start/--end {start!r} {end!r} (use YYYY-MM-DD)") from None
    if last <= first:
        raise DataError(f"alpaca: end {end} is before start {start}")
    feed_name = os.environ.get("APCA_DATA_FEED", "iex").lower()
    try:
        feed = DataFeed(feed_name)
    except ValueError:
        raise DataError(f"alpaca: unknown APCA_DATA_FEED {feed_name!r} (iex, sip, delayed_sip)") from None
    client = client if client is not None else make_client()
    # The ticker rule before any request is built from what the user typed (deduplicated: BRK/B = BRK.B).
    symbols = list(dict.fromkeys(normalize_ticker(t, source="alpaca") for t in tickers))
    records: list[dict] = []
    for lo, hi in _windows(first.tz_convert("UTC"), last.tz_convert("UTC")):
        request = StockBarsRequest(
            symbol_or_symbols=symbols,
            timeframe=timeframe,
            start=lo.to_pydatetime(),
            end=hi.to_pydatetime(),
            adjustment=Adjustment.ALL,
            feed=feed,
        )
        try:
            barset = client.get_stock_bars(request)
        except APIError as err:
            raise DataError(f"alpaca: the data API refused the request: {_one_line(err)}") from None
        except OSError as err:  # requests' ConnectionError and timeouts derive from OSError
            raise DataError(f"alpaca: cannot reach the data API: {_one_line(err)}") from None
        for symbol, bars in barset.data.items():
            for bar in bars:
                records.append(
                    {
                        "timestamp": pd.Timestamp(bar.timestamp).tz_convert("UTC"),
                        "ticker": symbol,
                        "open": bar.open,
                        "high": bar.high,
                        "low": bar.low,
                        "close": bar.close,
                        "volume": bar.volume,
                    }
                )
    if not records:
        raise DataError(f"alpaca: no {interval} bars for {', '.join(symbols)} between {start} and {end}")
    frame = pd.DataFrame.from_records(records)
    frame = frame.drop_duplicates(["ticker", "timestamp"], keep="last")
    frame = frame.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
    if interval == "1d":
        # Daily bars are stamped at 00:00 New York (04:00/05:00 UTC); keep the session date only.
        dates = frame["timestamp"].dt.tz_convert(TZ).dt.strftime("%Y-%m-%d")
        frame["timestamp"] = pd.to_datetime(dates, utc=True)
    return validate(frame, source="alpaca")


def _one_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__
