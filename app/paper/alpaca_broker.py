"""``AlpacaBroker``: the ``Broker`` of paper trading (``app.paper.broker``) on alpaca-py.

Safety rules this module enforces (tested against a local fake Alpaca server):

- Keys come only from ``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY``; they are never logged, never put
  in an error message, never returned by any method.
- Paper only: ``TradingClient(paper=True)``; a trading URL that is not loopback and not Alpaca's paper
  host (for example the live ``https://api.alpaca.markets``) is refused before any request is made.
- Keys with whitespace or control characters are refused at load (one line naming the variable, never
  the value): requests would otherwise raise ``InvalidHeader`` with the value in its message.
- Errors from the HTTP layer are reduced to the status and the broker's message (or the exception's
  type): never headers, never the request.
- Paper only for market data too: ``APCA_API_DATA_URL`` must be Alpaca's data host or loopback.
- Retries with exponential backoff and jitter on 429, 5xx, timeouts and dropped connections; a
  ``Retry-After`` header (seconds or an HTTP date) on 429/503 sets the wait. All waits of one cycle
  share a budget (``BrokerRetryPolicy.budget``; ``begin_cycle`` resets it): a wait that would overrun it
  raises ``RetryBudgetExhausted`` at once, so the cycle stops at an order boundary instead of
  sleeping past its interval. alpaca-py's own retry loop is switched off: it retries a POST /orders on
  504 blindly, which could double an order.
- ``submit`` is idempotent per ``client_order_id``: after an ambiguous failure (5xx, timeout, dropped
  connection) the order is looked up by client id before it is ever resubmitted, and Alpaca's
  "client_order_id must be unique" reply resolves to the existing order. One client id, one order.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import pandas as pd

from app.paper.broker import (
    BAR_COLUMNS,
    Asset,
    BrokerAccount,
    Clock,
    Order,
    OrderRejected,
    OrderRequest,
    Position,
    RetryBudgetExhausted,
)
from data.errors import BrokerError
from data.sources import access
from data.sources.access import (
    BASE_URL_ENV,
    DATA_URL,
    DATA_URL_ENV,
    PAPER_URL,
)
from data.sources.retry import retry_after_seconds

log = logging.getLogger(__name__)


T = TypeVar("T")


# --- configuration ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BrokerRetryPolicy:
    """Backoff ``base_delay * 2**attempt`` capped at ``max_delay`` (or the server's ``Retry-After``),
    times ``1 + U(0, jitter)``, at most ``attempts`` tries, all waits of a cycle within ``budget`` s."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 8.0
    timeout: float = 10.0  # seconds per HTTP request
    budget: float = 60.0  # seconds of retry waits per cycle (a 1-minute bar must not be slept through)
    jitter: float = 0.25  # so that many clients told the same Retry-After do not return in lockstep
    max_retry_after: float = 300.0  # a larger Retry-After is taken as this (then the budget decides)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        base = min(self.max_delay, self.base_delay * (2**attempt))
        if retry_after is not None:
            base = max(base, min(retry_after, self.max_retry_after))
        return base * (1.0 + random.uniform(0.0, self.jitter))


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date; None if absent/bad."""
    return retry_after_seconds(value, default=None, now=now)


def check_trading_url(url: str) -> str:
    """Accept only Alpaca's paper host (https) or a loopback server (``data.sources.access``)."""
    return access.check_trading_url(url, BrokerError)


def check_data_url(url: str) -> str:
    """Accept only Alpaca's market-data host (https) or a loopback server (``data.sources.access``)."""
    return access.check_data_url(url, BrokerError)


def keys_from_env() -> tuple[str, str]:
    """The API key pair from the environment, or a one-line error naming the variable (never its value)."""
    return access.keys_from_env(BrokerError)


# --- alpaca-py implementation -----------------------------------------------------------------------
def _float(value: object, default: float = 0.0) -> float:
    if value is None or value == "":
        return default
    return float(value)  # type: ignore[arg-type]


def _enum_value(value: object) -> str:
    return str(getattr(value, "value", value))


class AlpacaBroker:
    """``Broker`` on alpaca-py's ``TradingClient(paper=True)`` and ``StockHistoricalDataClient``."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        data_url: str | None = None,
        retry: BrokerRetryPolicy = BrokerRetryPolicy(),
        feed: str = "iex",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Imported here so that `podracer --help` and the export path do not pay for alpaca-py.
        from alpaca.data.historical import StockHistoricalDataClient
        from alpaca.trading.client import TradingClient

        trading_url = check_trading_url(base_url or os.environ.get(BASE_URL_ENV) or PAPER_URL)
        data_url = check_data_url(data_url or os.environ.get(DATA_URL_ENV) or DATA_URL)
        key, secret = keys_from_env()
        self.retry = retry
        self.feed = feed
        self._sleep = sleep
        self._waited = 0.0  # seconds of retry waits since begin_cycle()
        # Some users set APCA_API_BASE_URL with the "/v2" suffix; alpaca-py appends it itself.
        trading_url = trading_url.removesuffix("/v2")
        data_url = data_url.removesuffix("/v2")
        self._trading = TradingClient(key, secret, paper=True, url_override=trading_url)
        self._data = StockHistoricalDataClient(key, secret, url_override=data_url, raw_data=True)
        for client in (self._trading, self._data):
            # alpaca-py sends requests without a timeout; a hung server must not hang a cycle.
            access.with_deadline(client, retry.timeout)
            # Our own loop retries (and looks orders up before resubmitting); the SDK's must not.
            client._retry = 0
        self.trading_url = trading_url
        self.data_url = data_url

    # -- retry core --
    def begin_cycle(self) -> None:
        """Reset the retry budget (``BrokerRetryPolicy.budget`` seconds of waits per cycle)."""
        self._waited = 0.0

    @property
    def retry_budget_left(self) -> float:
        return max(0.0, self.retry.budget - self._waited)

    def _classify(self, err: BaseException) -> tuple[bool, str, int | None]:
        """(retryable, one-line description, HTTP status) of an alpaca-py / requests exception.

        Only the status and the broker's JSON ``message`` are kept: the text of a requests exception
        can hold a header value (``InvalidHeader``) or the request, so it is never used."""
        import requests
        from alpaca.common.exceptions import APIError

        if isinstance(err, APIError):
            status = err.status_code
            try:
                detail = " ".join(str(err.message).split())[:200]
            except Exception:  # noqa: BLE001 - the body is not always JSON
                detail = "(no JSON message)"
            retryable = status is not None and (status == 429 or status >= 500)
            return retryable, f"HTTP {status}: {detail}", status
        if isinstance(err, requests.Timeout):
            return True, "timeout", None
        if isinstance(err, requests.ConnectionError):
            return True, "connection error", None
        return False, f"{type(err).__name__} in the HTTP layer", None

    @staticmethod
    def _retry_after(err: BaseException) -> float | None:
        """The ``Retry-After`` of a 429/503 reply, in seconds (None when absent)."""
        response = getattr(err, "response", None)
        status = getattr(response, "status_code", None)
        if response is None or status not in (429, 503):
            return None
        return parse_retry_after(response.headers.get("Retry-After"))

    def _wait(self, what: str, desc: str, attempt: int, err: BaseException) -> None:
        """Sleep before the next try, within the cycle's budget (``RetryBudgetExhausted`` otherwise)."""
        delay = self.retry.delay(attempt, self._retry_after(err))
        if delay > self.retry_budget_left:
            raise RetryBudgetExhausted(
                f"{what}: {desc}; the next try is {delay:.1f}s away and the cycle's retry budget has "
                f"{self.retry_budget_left:.1f}s left"
            )
        log.warning("%s: %s; retrying in %.2fs", what, desc, delay)
        self._waited += delay
        self._sleep(delay)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run an idempotent request with retries; ``BrokerError`` after the last attempt."""
        for attempt in range(self.retry.attempts):
            try:
                return fn()
            except Exception as err:  # noqa: BLE001 - classified below, re-raised as BrokerError
                retryable, desc, _ = self._classify(err)
                if not retryable:
                    raise BrokerError(f"{what} failed: {desc}") from None
                if attempt + 1 == self.retry.attempts:
                    raise BrokerError(f"{what} failed after {self.retry.attempts} attempts: {desc}") from None
                self._wait(what, desc, attempt, err)
        raise AssertionError("unreachable")

    # -- Broker protocol --
    def account(self) -> BrokerAccount:
        acct = self._call("get account", self._trading.get_account)
        return BrokerAccount(
            equity=_float(acct.equity),
            cash=_float(acct.cash),
            last_equity=_float(acct.last_equity, _float(acct.equity)),
            buying_power=_float(acct.buying_power),
            trading_blocked=bool(acct.trading_blocked or acct.account_blocked),
            non_marginable_buying_power=(
                None
                if getattr(acct, "non_marginable_buying_power", None) in (None, "")
                else _float(acct.non_marginable_buying_power)
            ),
            account_id=None if getattr(acct, "id", None) is None else str(acct.id),
        )

    def positions(self) -> dict[str, Position]:
        rows = self._call("get positions", self._trading.get_all_positions)
        out = {}
        for p in rows:
            qty = _float(p.qty)
            if _enum_value(p.side) == "short" and qty > 0:
                qty = -qty
            out[p.symbol] = Position(
                symbol=p.symbol,
                qty=qty,
                market_value=_float(p.market_value),
                current_price=_float(p.current_price),
            )
        return out

    def clock(self) -> Clock:
        c = self._call("get clock", self._trading.get_clock)
        return Clock(
            timestamp=c.timestamp, is_open=bool(c.is_open), next_open=c.next_open, next_close=c.next_close
        )

    def latest_bars(
        self, tickers: Sequence[str], start: datetime, end: datetime, interval: str = "1m"
    ) -> pd.DataFrame:
        from alpaca.data.requests import StockBarsRequest
        from alpaca.data.timeframe import TimeFrame, TimeFrameUnit

        frames = {"1m": TimeFrame(1, TimeFrameUnit.Minute), "1d": TimeFrame(1, TimeFrameUnit.Day)}
        if interval not in frames:
            raise BrokerError(f"unsupported bar interval {interval!r} (1m or 1d)")
        request = StockBarsRequest(
            symbol_or_symbols=list(tickers), timeframe=frames[interval], start=start, end=end, feed=self.feed
        )
        raw = self._call("get bars", lambda: self._data.get_stock_bars(request))
        rows = []
        for symbol, bars in (raw or {}).items():
            for b in bars or []:
                rows.append((b["t"], symbol, b["o"], b["h"], b["l"], b["c"], b["v"]))
        frame = pd.DataFrame(rows, columns=list(BAR_COLUMNS))
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
        for col in ("open", "high", "low", "close", "volume"):
            frame[col] = frame[col].astype("float64")
        return frame.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)

    def asset(self, symbol: str) -> Asset | None:
        """``GET /v2/assets/{symbol}`` through the retry layer; None on 404 (an unknown symbol)."""
        from alpaca.common.exceptions import APIError

        def lookup() -> Asset | None:
            try:
                a = self._trading.get_asset(symbol)
            except APIError as err:
                if err.status_code == 404:
                    return None
                raise
            return Asset(
                symbol=str(a.symbol), active=_enum_value(a.status) == "active", tradable=bool(a.tradable)
            )

        return self._call(f"get asset {symbol}", lookup)

    def order_by_client_id(self, client_order_id: str) -> Order | None:
        from alpaca.common.exceptions import APIError

        def lookup() -> Order | None:
            try:
                return _order(self._trading.get_order_by_client_id(client_order_id))
            except APIError as err:
                if err.status_code == 404:
                    return None
                raise

        return self._call(f"look up order {client_order_id}", lookup)

    def open_orders(self) -> list[Order]:
        """``GET /v2/orders?status=open`` (up to 500: more open orders than that is itself a problem)."""
        from alpaca.trading.enums import QueryOrderStatus
        from alpaca.trading.requests import GetOrdersRequest

        request = GetOrdersRequest(status=QueryOrderStatus.OPEN, limit=500)
        return [_order(o) for o in self._call("list open orders", lambda: self._trading.get_orders(request))]

    def cancel(self, order_id: str) -> None:
        self._call(f"cancel order {order_id}", lambda: self._trading.cancel_order_by_id(order_id))

    def submit(self, order: OrderRequest) -> Order:
        """Submit a day market order; exactly one order per ``client_order_id`` whatever fails."""
        from alpaca.common.exceptions import APIError
        from alpaca.trading.enums import OrderSide, TimeInForce
        from alpaca.trading.requests import MarketOrderRequest

        if not order.qty > 0:
            raise OrderRejected(f"order {order.client_order_id}: quantity must be positive, got {order.qty}")
        request = MarketOrderRequest(
            symbol=order.symbol,
            qty=round(float(order.qty), 9),
            side=OrderSide.BUY if order.side == "buy" else OrderSide.SELL,
            time_in_force=TimeInForce.DAY,
            client_order_id=order.client_order_id,
        )
        ambiguous = False
        last = ""
        for attempt in range(self.retry.attempts):
            if ambiguous:
                # The previous POST may have reached the broker: never resubmit an order that exists.
                existing = self.order_by_client_id(order.client_order_id)
                if existing is not None:
                    log.info("order %s found after an ambiguous failure", order.client_order_id)
                    return existing
            try:
                return _order(self._trading.submit_order(request))
            except Exception as err:  # noqa: BLE001 - classified below
                retryable, last, status = self._classify(err)
                if isinstance(err, APIError) and not retryable:
                    if err.status_code == 422 and "client_order_id" in str(err):
                        existing = self.order_by_client_id(order.client_order_id)
                        if existing is not None:
                            return existing
                        # The broker has this id but will not show it yet: not a rejection.
                        raise BrokerError(
                            f"submit {order.client_order_id}: the broker holds this client_order_id "
                            "but its look-up failed"
                        ) from None
                    raise OrderRejected(f"order {order.client_order_id} rejected: {last}") from None
                if not retryable:
                    raise BrokerError(f"submit {order.client_order_id} failed: {last}") from None
                # A 429 was refused before processing; a 5xx, timeout or dropped connection may not be.
                ambiguous = ambiguous or status != 429
                if attempt + 1 < self.retry.attempts:
                    try:
                        self._wait(f"submit {order.client_order_id}", last, attempt, err)
                    except RetryBudgetExhausted:
                        # Out of budget after an ambiguous failure: say whether the order exists.
                        existing = self.order_by_client_id(order.client_order_id) if ambiguous else None
                        if existing is not None:
                            return existing
                        raise
        existing = self.order_by_client_id(order.client_order_id) if ambiguous else None
        if existing is not None:
            return existing
        raise BrokerError(
            f"submit {order.client_order_id} failed after {self.retry.attempts} attempts: {last}"
        )


def _order(o: object) -> Order:
    return Order(
        id=str(o.id),  # type: ignore[attr-defined]
        client_order_id=str(o.client_order_id),  # type: ignore[attr-defined]
        symbol=str(o.symbol),  # type: ignore[attr-defined]
        side=_enum_value(o.side),  # type: ignore[attr-defined]
        qty=_float(o.qty),  # type: ignore[attr-defined]
        filled_qty=_float(o.filled_qty),  # type: ignore[attr-defined]
        filled_avg_price=None if o.filled_avg_price in (None, "") else float(o.filled_avg_price),  # type: ignore[attr-defined]
        status=_enum_value(o.status),  # type: ignore[attr-defined]
    )
