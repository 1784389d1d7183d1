"""Alpaca historical bars through alpaca-py's ``StockHistoricalDataClient``.

Keys come from ``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY``; ``APCA_API_DATA_URL`` overrides the data
API's base URL (``url_override``; tests point it at a local HTTP server); ``APCA_DATA_FEED`` picks the
feed (``iex``, the free plan's, by default; ``sip`` with a subscription). Bars are fetched raw
(``adjustment=raw``) and the splits and cash dividends come from the corporate-actions endpoint
(``fetch_actions``): the store keeps both and adjusts on load (``data.actions``), so bars fetched on
different days share one basis.

Pages are requested through the client's REST layer (``client.get``: the maintained client's auth,
base URL and error types) and parsed straight into columns: ``get_stock_bars`` would build one
pydantic ``Bar`` per bar (or, with ``raw_data=True``, still hold every page of the request until the
end) and retries 429s after a fixed 3 s, ignoring ``Retry-After``. Measured in
``benchmarks/fetch_scale.py``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import date

import numpy as np
import pandas as pd

from data.actions import check_actions, empty_actions
from data.calendar import TZ, check_interval
from data.errors import DataError, one_line
from data.schema import normalize_ticker, validate
from data.sources import access
from data.sources.retry import FetchRetryPolicy, Throttled, Transient, retry_after_seconds

CHUNK_DAYS = 31
PAGE_LIMIT = 10_000  # the data API's largest page


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


def make_client(timeout_s: float = access.DATA_TIMEOUT_S):  # noqa: ANN201 - alpaca-py type
    """A ``StockHistoricalDataClient`` from the environment, as the broker makes its own
    (``data.sources.access``): keys checked (one line naming a missing or malformed variable), the
    data URL allow-listed, every request timing out after ``timeout_s`` seconds."""
    from alpaca.data.historical import StockHistoricalDataClient

    key, secret = access.keys_from_env(DataError, what="alpaca keys (a free paper account's work)")
    url = os.environ.get(access.DATA_URL_ENV) or access.DATA_URL
    url = access.check_data_url(url, DataError).removesuffix("/v2")
    client = StockHistoricalDataClient(api_key=key, secret_key=secret, url_override=url)
    return access.with_deadline(client, timeout_s)


def _feed():  # noqa: ANN202 - alpaca-py enum
    from alpaca.data.enums import DataFeed

    feed_name = os.environ.get("APCA_DATA_FEED", "iex").lower()
    try:
        return DataFeed(feed_name)
    except ValueError:
        raise DataError(f"alpaca: unknown APCA_DATA_FEED {feed_name!r} (iex, sip, delayed_sip)") from None


def quiet_client(client):  # noqa: ANN001, ANN201 - alpaca-py type
    """``client`` with alpaca-py's own retry loop off (it sleeps a fixed 3 s and ignores Retry-After):
    ``FetchRetryPolicy`` waits out 429s and retries failures page by page instead."""
    client._retry = 0
    return client


def fetch_chunk(
    client,  # noqa: ANN001 - alpaca-py StockHistoricalDataClient
    symbols: Sequence[str],
    lo: date,
    hi: date,
    interval: str,
    *,
    policy: FetchRetryPolicy | None = None,
    feed=None,  # noqa: ANN001 - alpaca-py DataFeed
) -> pd.DataFrame:
    """Validated bars of ``symbols`` for session dates ``[lo, hi)``, page by page through the client's
    REST layer (``client.get``: its auth, base URL and error mapping; pages parsed straight into
    columns, no model object per bar). A 429 or a failure resumes at the same page token."""
    from alpaca.common.exceptions import APIError
    from alpaca.data.enums import Adjustment
    from alpaca.data.requests import StockBarsRequest

    policy = policy or FetchRetryPolicy()
    first = pd.Timestamp(lo).tz_localize(TZ).tz_convert("UTC")
    last = pd.Timestamp(hi).tz_localize(TZ).tz_convert("UTC")
    params = StockBarsRequest(
        symbol_or_symbols=list(symbols),
        timeframe=_timeframe(interval),
        start=first.to_pydatetime(),
        end=last.to_pydatetime(),
        adjustment=Adjustment.RAW,
        feed=feed if feed is not None else _feed(),
    ).to_request_fields()
    params["limit"] = PAGE_LIMIT
    columns: dict[str, list] = {k: [] for k in ("t", "ticker", "o", "h", "l", "c", "v")}
    token = None

    def one_page() -> dict:
        try:
            return client.get("/stocks/bars", {**params, "page_token": token})
        except APIError as err:
            status = err.status_code
            if status == 429:
                headers = err.response.headers if err.response is not None else {}
                raise Throttled(retry_after_seconds(headers.get("Retry-After"))) from None
            if status is not None and status >= 500:
                raise Transient(f"HTTP {status}") from None
            raise DataError(f"alpaca: the data API refused the request: {one_line(err, limit=200)}") from None
        except OSError as err:  # requests' ConnectionError and timeouts derive from OSError
            raise Transient(f"cannot reach the data API: {one_line(err, limit=200)}") from None

    while True:
        page = policy.call(one_page, "alpaca")
        for symbol, bars in (page.get("bars") or {}).items():
            columns["ticker"].extend([symbol] * len(bars))
            for key in ("t", "o", "h", "l", "c", "v"):
                columns[key].extend([bar[key] for bar in bars])
        token = page.get("next_page_token")
        if not token:
            break
    if not columns["t"]:
        return pd.DataFrame(columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"])
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(columns["t"], utc=True, format="ISO8601"),
            "ticker": columns["ticker"],
            "open": np.asarray(columns["o"], dtype=np.float64),
            "high": np.asarray(columns["h"], dtype=np.float64),
            "low": np.asarray(columns["l"], dtype=np.float64),
            "close": np.asarray(columns["c"], dtype=np.float64),
            "volume": np.asarray(columns["v"], dtype=np.float64),
        }
    )
    frame = frame.drop_duplicates(["ticker", "timestamp"], keep="last")
    frame = frame.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
    if interval == "1d":
        # Daily bars are stamped at 00:00 New York (04:00/05:00 UTC); keep the session date only.
        dates = frame["timestamp"].dt.tz_convert(TZ).dt.strftime("%Y-%m-%d")
        frame["timestamp"] = pd.to_datetime(dates, utc=True)
    return validate(frame, source="alpaca")


def fetch_actions(
    client,  # noqa: ANN001 - alpaca-py StockHistoricalDataClient
    symbols: Sequence[str],
    lo: date,
    hi: date,
    *,
    policy: FetchRetryPolicy | None = None,
) -> dict[str, pd.DataFrame]:
    """Splits and cash dividends of ``symbols`` with ex-dates in ``[lo, hi)`` from the data API's
    ``/v1/corporate-actions`` (through the client's REST layer, as ``fetch_chunk``), as one
    ``data.actions`` frame per symbol (every symbol present, empty when it had none)."""
    from alpaca.common.exceptions import APIError

    policy = policy or FetchRetryPolicy()
    rows: dict[str, list[dict]] = {s: [] for s in symbols}
    params = {
        "symbols": ",".join(symbols),
        "types": "forward_split,reverse_split,cash_dividend",
        "start": lo.isoformat(),
        "end": (pd.Timestamp(hi) - pd.Timedelta(days=1)).date().isoformat(),  # inclusive on the API
        "limit": 1000,
    }
    token = None

    def one_page() -> dict:
        try:
            return client.get("/corporate-actions", {**params, "page_token": token}, api_version="v1")
        except APIError as err:
            status = err.status_code
            if status == 429:
                headers = err.response.headers if err.response is not None else {}
                raise Throttled(retry_after_seconds(headers.get("Retry-After"))) from None
            if status is not None and status >= 500:
                raise Transient(f"HTTP {status}") from None
            raise DataError(
                f"alpaca: the corporate-actions API refused the request: {one_line(err, limit=200)}"
            ) from None
        except OSError as err:
            raise Transient(f"cannot reach the data API: {one_line(err, limit=200)}") from None

    while True:
        page = policy.call(one_page, "alpaca")
        found = page.get("corporate_actions") or {}
        for kind in ("forward_splits", "reverse_splits"):
            for item in found.get(kind) or []:
                ratio = float(item["new_rate"]) / float(item["old_rate"])
                rows.setdefault(item["symbol"], []).append(
                    {"ex_date": item["ex_date"], "kind": "split", "ratio": ratio, "cash": 0.0}
                )
        for item in found.get("cash_dividends") or []:
            rows.setdefault(item["symbol"], []).append(
                {"ex_date": item["ex_date"], "kind": "dividend", "ratio": 1.0, "cash": float(item["rate"])}
            )
        token = page.get("next_page_token")
        if not token:
            break
    out = {}
    for symbol, items in rows.items():
        name = normalize_ticker(symbol, source="alpaca")
        if name not in symbols:
            continue  # an action of a symbol not asked for
        frame = pd.DataFrame(items, columns=["ex_date", "kind", "ratio", "cash"])
        out[name] = check_actions(frame, f"alpaca: {name}") if len(frame) else empty_actions()
    return out


def parse_date_range(start: str, end: str, source: str) -> tuple[date, date]:
    """``--start`` / ``--end`` as dates (one-line error when unreadable or reversed)."""
    try:
        first, last = date.fromisoformat(str(start)), date.fromisoformat(str(end))
    except (ValueError, TypeError):
        raise DataError(f"{source}: bad --start/--end {start!r} {end!r} (use YYYY-MM-DD)") from None
    if last < first:
        raise DataError(f"{source}: end {end} is before start {start}")
    return first, last
