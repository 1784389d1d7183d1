"""The broker seam of paper trading: the ``Broker`` protocol and the plain values it trades in.

The cycle (``app.paper.cycle``) and its parts talk to a broker only through :class:`Broker`; no
alpaca-py object leaks past its implementation, ``app.paper.alpaca_broker.AlpacaBroker``. Every method raises
``BrokerError`` on failure: :class:`OrderRejected` when the broker refused an order (not retried), and
:class:`RetryBudgetExhausted` when the cycle's retry budget cannot cover the next wait (the cycle
stops at an order boundary and the next one finishes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

import pandas as pd

from data.errors import BrokerError

Side = Literal["buy", "sell"]


class OrderRejected(BrokerError):
    """The broker refused an order (4xx other than rate limiting). Not retried."""


class RetryBudgetExhausted(BrokerError):
    """The cycle's retry budget cannot cover the next wait: stop at an order boundary, finish later."""


# --- plain value types -------------------------------------------------------------------------------
@dataclass(frozen=True)
class BrokerAccount:
    equity: float  # cash + market value of positions, $
    cash: float
    last_equity: float  # equity at the previous session's close (for the daily loss limit)
    buying_power: float  # may include margin: never spent by podracer
    trading_blocked: bool = False
    non_marginable_buying_power: float | None = None  # None: the broker did not say
    account_id: str | None = None  # the broker's id of the account (the paper lock is per account)

    @property
    def spendable(self) -> float:
        """Cash that buys may spend: settled cash, never margin."""
        if self.non_marginable_buying_power is None:
            return max(0.0, self.cash)
        return max(0.0, min(self.cash, self.non_marginable_buying_power))


@dataclass(frozen=True)
class Position:
    symbol: str
    qty: float  # shares, fractional allowed, negative = short
    market_value: float
    current_price: float


@dataclass(frozen=True)
class Asset:
    """What the broker says about a symbol: ``active`` (status ``active``, not ``inactive``) and
    whether it accepts orders for it (``tradable``)."""

    symbol: str
    active: bool
    tradable: bool

    @property
    def orderable(self) -> bool:
        return self.active and self.tradable


@dataclass(frozen=True)
class Clock:
    timestamp: datetime  # broker's "now", tz-aware
    is_open: bool
    next_open: datetime
    next_close: datetime


@dataclass(frozen=True)
class OrderRequest:
    symbol: str
    side: Side
    qty: float  # > 0 shares
    client_order_id: str


@dataclass(frozen=True)
class Order:
    id: str
    client_order_id: str
    symbol: str
    side: str
    qty: float
    filled_qty: float
    filled_avg_price: float | None
    status: str  # alpaca order status: new, accepted, partially_filled, filled, rejected, canceled, ...

    @property
    def is_open(self) -> bool:
        return self.status in {"new", "accepted", "pending_new", "partially_filled", "accepted_for_bidding"}


BAR_COLUMNS = ("timestamp", "ticker", "open", "high", "low", "close", "volume")


class Broker(Protocol):
    """What paper trading needs from a broker. Every method raises ``BrokerError`` on failure."""

    def account(self) -> BrokerAccount: ...

    def positions(self) -> dict[str, Position]: ...

    def clock(self) -> Clock: ...

    def latest_bars(
        self, tickers: Sequence[str], start: datetime, end: datetime, interval: str = "1m"
    ) -> pd.DataFrame:
        """Bars in the bar schema (``BAR_COLUMNS``; ``timestamp`` = UTC bar start) in ``[start, end]``."""
        ...

    def submit(self, order: OrderRequest) -> Order: ...

    def asset(self, symbol: str) -> Asset | None:
        """The broker's record of ``symbol`` (None: the broker does not know the symbol, HTTP 404)."""
        ...

    def cancel(self, order_id: str) -> None: ...

    def open_orders(self) -> list[Order]:
        """Every order still open at the broker, placed by podracer or not (the book check)."""
        ...

    def order_by_client_id(self, client_order_id: str) -> Order | None: ...

    def begin_cycle(self) -> None:
        """A new cycle starts: reset the per-cycle retry budget."""
        ...
