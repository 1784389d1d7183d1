"""Bar sources: CSV files, yfinance, Alpaca (alpaca-py), the shipped real sample."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from data.errors import DataError
from data.sources.alpaca import fetch_alpaca
from data.sources.yfinance import fetch_yfinance


def fetch_bars(source: str, tickers: Sequence[str], start: str, end: str, interval: str) -> pd.DataFrame:
    """Download bars from ``source`` ("yfinance" or "alpaca") as a validated bar-schema frame."""
    if not tickers:
        raise DataError("no tickers to fetch")
    if source == "yfinance":
        return fetch_yfinance(tickers, start, end, interval)
    if source == "alpaca":
        return fetch_alpaca(tickers, start, end, interval)
    raise DataError(f"unknown source {source!r} (yfinance or alpaca)")
