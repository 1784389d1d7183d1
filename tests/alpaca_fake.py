"""A local fake of the Alpaca paper trading and market-data REST APIs, for tests (reusable).

``FakeAlpaca`` runs an ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (an ephemeral port) in a
daemon thread and speaks just enough of the real wire format that the real alpaca-py clients parse
it: account, positions, clock, assets, orders (submit, by id, by client id, cancel, list) and stock
bars (1-minute bars as given; ``timeframe=1Day`` aggregates them per New York session, stamped at
midnight New York as Alpaca does).

``GET /v2/assets/{symbol}``: a symbol in ``assets`` gets that status (``{"status": "inactive",
"tradable": False}``; ``None``: HTTP 404, as for an unknown symbol); any other symbol the fake knows
(``prices``, ``positions``) is active and tradable; an unknown one is a 404. ``asset_lookups`` lists
the symbols asked for.

Orders fill immediately at the ticker's current price (``fill_mode="fill"``; ``slippage_bps`` makes
buys pay and sells get that much worse, so fills cost something), half-fill
(``"partial"``), stay open (``"accept"``), are accepted and fill when first looked up
(``"delayed"``, like a real market order a moment later) or are refused with HTTP 403 (``"reject"``).
``"realistic"`` fills as the env's execution model says a market order fills, with known figures the
reconciliation (app/paper/sim_replay.py) must recover: nothing fills until ``fill_delay`` seconds (wall
clock) after the submission; the first look-up after that fills ``fill_ratio`` of the order (the rest
stays open, ``partially_filled``, until canceled) at the open of the bar after the decision bar (the
first bar of the symbol at or after the order's minute, ``bar_interval="1m"``, or its New York day,
``"1d"``) plus ``spread_bps`` on a buy, less on a sell. In every mode a sell pays Alpaca's regulatory
fees out of cash when ``sec_fee_rate`` / ``taf_per_share`` / ``taf_max`` are set (per fill: the SEC
rate on the proceeds plus the TAF per share, at most ``taf_max``); ``fees_charged`` sums them.
``sell_fill_delay`` (seconds, wall clock) holds sells open until that long after their submission (a
late fill), whatever the mode. A buy larger than the buying power left (cash less open buys; times
``margin_multiplier`` on a margin account) is refused with HTTP 403 "insufficient buying power", like
Alpaca. Faults are queued per route with ``fail(...)``: an HTTP status before processing (optionally
with a ``Retry-After`` header), an HTTP status *after* the order was created (the ambiguous case), or
a delay longer than the client's timeout. ``lookups`` lists the client ids looked up.

Time is the test's: ``now`` is what the clock says, and :meth:`FakeAlpaca.set_time` moves it along the
XNAS calendar (open or closed, the next open and close, each ticker's price = the close of its last
completed minute bar, ``last_equity`` = the equity at the previous session's close). Cash moves only
through fills, so the account's equity is always cash + positions at the current prices.
``outside_trade(symbol)`` sells half a position outside podracer (a fill under a client id podracer
never uses), ``account_id`` is what ``GET /v2/account`` answers (two fakes may share one).
``on_order(order)`` runs on every order the fake creates, after its immediate fill and before the
reply (a test may promote a champion there, or kill the client process).

``HungServer`` accepts connections on loopback and never answers (a stalled upstream): every client
must give up on its own deadline.

Use as a context manager::

    with FakeAlpaca(prices={"AAPL": 100.0}) as fake:
        monkeypatch.setenv("APCA_API_BASE_URL", fake.url)
        monkeypatch.setenv("APCA_API_DATA_URL", fake.url)
"""

from __future__ import annotations

import json
import math
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd

from data.calendar import session_bounds, session_grid, sessions_in_range

KEY_ID = "PKTESTKEY0000000000"
SECRET = "tEsTsEcReT/not-a-real-secret-0123456789"


def point_at(server: FakeAlpaca, monkeypatch: Any, *, trading: bool = True) -> None:
    """Point alpaca-py at ``server`` through the environment (``monkeypatch.setenv``): the test keys and
    the market-data URL, and the trading URL too unless ``trading=False`` (a data-only client)."""
    env = {"APCA_API_KEY_ID": KEY_ID, "APCA_API_SECRET_KEY": SECRET, "APCA_API_DATA_URL": server.url}
    if trading:
        env["APCA_API_BASE_URL"] = server.url
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _iso(ts: datetime | pd.Timestamp) -> str:
    ts = pd.Timestamp(ts)
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Fault:
    """One injected failure on requests whose method and path start match."""

    method: str
    path: str  # prefix, e.g. "/v2/orders"
    kind: str  # "status" (refuse before processing), "status_after" (process, then fail), "delay",
    # "drop" (close the connection without a reply; market-data routes), "echo_key" (HTTP 403 whose
    # message quotes the request's secret key header, as a careless proxy might)
    status: int = 500
    delay: float = 0.0
    times: int = 1
    retry_after: str | None = None  # the Retry-After header of a "status" reply
    skip: int = 0  # matching requests let through before the fault starts (e.g. the second order)


@dataclass
class FakeOrder:
    """One order; quantities go over the wire with 15 significant digits (Alpaca's 9 decimals)."""

    id: str
    client_order_id: str
    symbol: str
    side: str
    qty: float
    filled_qty: float
    filled_avg_price: float | None
    status: str
    created_at: datetime
    created_wall: float = 0.0  # time.monotonic() at submission (late sell fills)

    def to_json(self) -> dict[str, Any]:
        ts = _iso(self.created_at)
        return {
            "id": self.id,
            "client_order_id": self.client_order_id,
            "created_at": ts,
            "updated_at": ts,
            "submitted_at": ts,
            "filled_at": ts if self.status == "filled" else None,
            "expired_at": None,
            "canceled_at": ts if self.status == "canceled" else None,
            "failed_at": None,
            "replaced_at": None,
            "replaced_by": None,
            "replaces": None,
            "asset_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.symbol)),
            "symbol": self.symbol,
            "asset_class": "us_equity",
            "notional": None,
            "qty": f"{self.qty:.15g}",
            "filled_qty": f"{self.filled_qty:.15g}",
            "filled_avg_price": None if self.filled_avg_price is None else f"{self.filled_avg_price:.6f}",
            "order_class": "simple",
            "order_type": "market",
            "type": "market",
            "side": self.side,
            "time_in_force": "day",
            "limit_price": None,
            "stop_price": None,
            "status": self.status,
            "extended_hours": False,
            "legs": None,
            "trail_percent": None,
            "trail_price": None,
            "hwm": None,
        }


@dataclass
class FakeAlpaca:
    """State of the fake account plus the HTTP server serving it."""

    prices: dict[str, float] = field(default_factory=dict)
    cash: float = 100_000.0
    last_equity: float | None = None  # default: equity at start
    positions: dict[str, float] = field(default_factory=dict)  # symbol -> qty
    is_open: bool = True
    now: datetime = field(default_factory=lambda: datetime(2024, 1, 3, 15, 0, tzinfo=UTC))
    bars: pd.DataFrame | None = None  # bar schema: timestamp, ticker, open, high, low, close, volume
    fill_mode: str = "fill"  # fill | partial | accept | delayed | reject | realistic
    page_size: int = 10_000
    # Market data generated per request instead of ``bars`` (benchmarks: a year of minutes for 100
    # tickers need not sit in memory): (symbols, start, end) -> bar-schema frame.
    bar_source: Any = None
    # ``/v1/corporate-actions``: Alpaca's shape, e.g. {"forward_splits": [{"symbol": "AAA",
    # "new_rate": 4, "old_rate": 1, "ex_date": "2024-02-01"}], "cash_dividends": [{..., "rate": 0.5}]}.
    corporate_actions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    require_keys: tuple[str, str] = (KEY_ID, SECRET)
    sell_fill_delay: float = 0.0  # seconds after submission before a sell can fill
    margin_multiplier: float = 1.0  # > 1: a margin account (buying_power = multiplier x cash)
    # symbol -> {"status": "active"|"inactive", "tradable": bool} or None (HTTP 404); see the docstring
    assets: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    slippage_bps: float = 0.0  # fills 1e-4 x this worse than the current price (buys up, sells down)
    # fill_mode="realistic" (see the module docstring): the half-spread over the fill bar's open, the
    # wall-clock seconds before a fill, the share of each order filled, the bars' interval
    spread_bps: float = 0.0
    fill_delay: float = 0.0
    fill_ratio: float = 1.0
    bar_interval: str = "1m"
    # Alpaca's regulatory fees on a sell, charged out of cash (0: none, as before)
    sec_fee_rate: float = 0.0
    taf_per_share: float = 0.0
    taf_max: float = 0.0
    on_order: Any = None  # callable(FakeOrder) after an order is created (see the module docstring)
    account_id: str = "11111111-2222-3333-4444-555555555555"  # two fakes may share one (the paper lock)

    def __post_init__(self) -> None:
        self.orders: dict[str, FakeOrder] = {}
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request served
        self.order_posts = 0
        self.lookups: list[str] = []  # client ids looked up (GET /v2/orders:by_client_order_id)
        self.asset_lookups: list[str] = []  # symbols looked up (GET /v2/assets/{symbol})
        self.rejections = 0  # buys refused for lack of buying power
        self.fees_charged = 0.0  # regulatory fees taken out of cash on sells
        self.avg_price: dict[str, float] = {s: self.prices.get(s, 0.0) for s in self.positions}
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._bounds: tuple[datetime, datetime] | None = None  # next open, next close (set_time)
        if self.last_equity is None:
            self.last_equity = self.equity()

    # -- lifecycle --
    def __enter__(self) -> FakeAlpaca:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        fake = self

        class Handler(_Handler):
            state = fake

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeAlpaca not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- helpers for tests --
    def fail(
        self,
        method: str,
        path: str,
        kind: str = "status",
        status: int = 500,
        delay: float = 0.0,
        times: int = 1,
        retry_after: str | None = None,
        skip: int = 0,
    ):
        self.faults.append(Fault(method.upper(), path, kind, status, delay, times, retry_after, skip))

    def set_time(self, now: datetime | pd.Timestamp) -> None:
        """Move the clock to ``now`` (see the module docstring): calendar hours, prices from ``bars``."""
        now = pd.Timestamp(now)
        now = now.tz_localize("UTC") if now.tzinfo is None else now.tz_convert("UTC")
        with self._lock:
            before = pd.Timestamp(self.now)
            day = now.tz_convert("America/New_York").tz_localize(None).normalize()
            sessions = sessions_in_range(day - pd.Timedelta(days=7), day + pd.Timedelta(days=10))
            opens, closes = (pd.DatetimeIndex(x, tz="UTC") for x in session_bounds(sessions))
            if (pd.DatetimeIndex(closes) < now).any() and before < closes[closes < now][-1]:
                # A session closed in between: last_equity is the equity at that close.
                self._mark_prices(closes[closes < now][-1])
                self.last_equity = self.equity()
            self.now = now.floor("us").to_pydatetime()
            self.is_open = bool(((opens <= now) & (now < closes)).any())
            later = opens > now
            next_close = closes[closes > now][0]
            self._bounds = (opens[later][0].to_pydatetime(), next_close.to_pydatetime())
            self._mark_prices(now)

    def _mark_prices(self, now: pd.Timestamp) -> None:
        """Each ticker's price: the close of its last minute bar completed by ``now``."""
        if self.bars is None or not len(self.bars):
            return
        done = self.bars[self.bars["timestamp"] + pd.Timedelta(minutes=1) <= now]
        last = done.sort_values("timestamp").groupby("ticker")["close"].last()
        self.prices.update({str(t): float(p) for t, p in last.items()})

    def equity(self) -> float:
        return self.cash + sum(q * self.prices.get(s, 0.0) for s, q in self.positions.items())

    def outside_trade(self, symbol: str, fraction: float = 0.5, side: str = "sell") -> FakeOrder:
        """Someone trades the account outside podracer (a person on Alpaca's web page): sell (or buy)
        ``fraction`` of the position in ``symbol`` at the current price, under a client id podracer
        never uses. The book check must notice."""
        with self._lock:
            held = self.positions.get(symbol, 0.0)
            qty = abs(held) * fraction if held else 1.0
            order = FakeOrder(
                id=str(uuid.uuid4()),
                client_order_id=f"web-{uuid.uuid4().hex[:12]}",
                symbol=symbol,
                side=side,
                qty=qty,
                filled_qty=0.0,
                filled_avg_price=None,
                status="accepted",
                created_at=self.now,
                created_wall=time.monotonic(),
            )
            self.orders[order.id] = order
            self._execute(order, qty)
            return order

    def orders_for(self, client_order_id: str) -> list[FakeOrder]:
        return [o for o in self.orders.values() if o.client_order_id == client_order_id]

    # -- request handling (called by the handler, under the lock) --
    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method and path.startswith(fault.path) and fault.times > 0:
                if fault.skip > 0:
                    fault.skip -= 1
                    return None
                fault.times -= 1
                return fault
        return None

    def _account(self) -> dict[str, Any]:
        equity = self.equity()
        long_value = equity - self.cash
        return {
            "id": self.account_id,
            "account_number": "PA0000000",
            "status": "ACTIVE",
            "currency": "USD",
            "buying_power": f"{self.cash * self.margin_multiplier:.2f}",
            "regt_buying_power": f"{self.cash * self.margin_multiplier:.2f}",
            "non_marginable_buying_power": f"{self.cash:.2f}",
            "cash": f"{self.cash:.2f}",
            "portfolio_value": f"{equity:.2f}",
            "equity": f"{equity:.2f}",
            "last_equity": f"{self.last_equity:.2f}",
            "long_market_value": f"{long_value:.2f}",
            "short_market_value": "0",
            "pattern_day_trader": False,
            "trading_blocked": False,
            "transfers_blocked": False,
            "account_blocked": False,
            "trade_suspended_by_user": False,
            "multiplier": f"{self.margin_multiplier:g}",
            "shorting_enabled": False,
            "daytrade_count": 0,
        }

    def _positions(self) -> list[dict[str, Any]]:
        out = []
        for symbol, qty in sorted(self.positions.items()):
            if abs(qty) < 1e-12:
                continue
            price = self.prices.get(symbol, 0.0)
            avg = self.avg_price.get(symbol, price)
            out.append(
                {
                    "asset_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, symbol)),
                    "symbol": symbol,
                    "exchange": "NASDAQ",
                    "asset_class": "us_equity",
                    "asset_marginable": True,
                    "avg_entry_price": f"{avg:.6f}",
                    "qty": f"{qty:.15g}",
                    "qty_available": f"{qty:.15g}",
                    "side": "long" if qty > 0 else "short",
                    "market_value": f"{qty * price:.6f}",
                    "cost_basis": f"{qty * avg:.6f}",
                    "unrealized_pl": f"{qty * (price - avg):.6f}",
                    "unrealized_plpc": "0",
                    "unrealized_intraday_pl": "0",
                    "unrealized_intraday_plpc": "0",
                    "current_price": f"{price:.6f}",
                    "lastday_price": f"{price:.6f}",
                    "change_today": "0",
                }
            )
        return out

    def _clock(self) -> dict[str, Any]:
        if self._bounds is not None:
            return {
                "timestamp": self.now.isoformat(),
                "is_open": self.is_open,
                "next_open": self._bounds[0].isoformat(),
                "next_close": self._bounds[1].isoformat(),
            }
        day = self.now.replace(hour=14, minute=30, second=0, microsecond=0)
        next_open = day if self.now < day else day + timedelta(days=1)
        next_close = self.now.replace(hour=21, minute=0, second=0, microsecond=0)
        if next_close <= self.now:
            next_close += timedelta(days=1)
        return {
            "timestamp": self.now.isoformat(),
            "is_open": self.is_open,
            "next_open": next_open.isoformat(),
            "next_close": next_close.isoformat(),
        }

    def _asset(self, symbol: str) -> tuple[int, dict[str, Any]]:
        """``GET /v2/assets/{symbol}`` in Alpaca's shape."""
        self.asset_lookups.append(symbol)
        if symbol in self.assets:
            flags = self.assets[symbol]
        elif symbol in self.prices or symbol in self.positions:
            flags = {"status": "active", "tradable": True}
        else:
            flags = None
        if flags is None:
            return 404, {"code": 40410000, "message": "asset not found"}
        return 200, {
            "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, symbol)),
            "class": "us_equity",
            "exchange": "NASDAQ",
            "symbol": symbol,
            "name": f"{symbol} Inc.",
            "status": flags.get("status", "active"),
            "tradable": bool(flags.get("tradable", True)),
            "marginable": True,
            "shortable": False,
            "easy_to_borrow": False,
            "fractionable": True,
        }

    def _submit(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.order_posts += 1
        cid = body.get("client_order_id") or str(uuid.uuid4())
        if self.orders_for(cid):
            return 422, {"code": 40010001, "message": "client_order_id must be unique"}
        symbol, side = body["symbol"], body["side"]
        qty = float(body["qty"])
        if self.fill_mode == "reject":
            return 403, {"code": 40310000, "message": "insufficient buying power"}
        if symbol not in self.prices:
            return 422, {"code": 40010001, "message": f"asset {symbol} not found"}
        if side == "buy" and qty * self.prices[symbol] > self._buying_power() + 1e-6:
            self.rejections += 1
            return 403, {"code": 40310000, "message": "insufficient buying power"}
        order = FakeOrder(
            id=str(uuid.uuid4()),
            client_order_id=cid,
            symbol=symbol,
            side=side,
            qty=qty,
            filled_qty=0.0,
            filled_avg_price=None,
            status="accepted",
            created_at=self.now,
            created_wall=time.monotonic(),
        )
        self.orders[order.id] = order
        if self.fill_mode in ("fill", "partial") and not self._held_back(order):
            self._execute(order, qty if self.fill_mode == "fill" else qty / 2)
        if self.on_order is not None:
            self.on_order(order)
        return 200, order.to_json()

    def _buying_power(self) -> float:
        """Cash (times the margin multiplier) less what open buy orders have reserved."""
        reserved = sum(
            (o.qty - o.filled_qty) * self.prices.get(o.symbol, 0.0)
            for o in self.orders.values()
            if o.side == "buy" and o.status in ("accepted", "new", "partially_filled")
        )
        return self.cash * self.margin_multiplier - reserved

    def _held_back(self, order: FakeOrder) -> bool:
        """A sell that may not fill yet (``sell_fill_delay``)."""
        return order.side == "sell" and time.monotonic() < order.created_wall + self.sell_fill_delay

    def _fill_bar_open(self, order: FakeOrder) -> float:
        """``fill_mode="realistic"``: the open of the symbol's first bar at or after the order's
        minute (``bar_interval="1d"``: its New York day); the current price when there is none."""
        created = pd.Timestamp(order.created_at)
        created = created.tz_localize("UTC") if created.tzinfo is None else created.tz_convert("UTC")
        if self.bar_interval == "1d":
            start = created.tz_convert("America/New_York").normalize().tz_convert("UTC")
        else:
            start = created.floor("min")
        if self.bars is None or not len(self.bars):
            return self.prices[order.symbol]
        rows = self.bars[(self.bars["ticker"] == order.symbol) & (self.bars["timestamp"] >= start)]
        if not len(rows):
            return self.prices[order.symbol]
        return float(rows.sort_values("timestamp")["open"].iloc[0])

    def _fee(self, side: str, qty: float, price: float) -> float:
        """Alpaca's regulatory fees of one fill (a sell: the SEC rate on the proceeds plus the TAF per
        share, at most ``taf_max``, each rounded up to the cent; a buy: none)."""
        if side != "sell":
            return 0.0

        def cents_up(fee: float) -> float:
            return math.ceil(round(fee * 100.0, 6)) / 100.0

        return cents_up(self.sec_fee_rate * qty * price) + cents_up(
            min(self.taf_per_share * qty, self.taf_max)
        )

    def _execute(self, order: FakeOrder, qty: float) -> None:
        """Fill ``qty`` more shares of ``order`` at the current price (less ``slippage_bps``), or in
        ``"realistic"`` mode at the fill bar's open less ``spread_bps``; a sell pays the fees."""
        sign = 1.0 if order.side == "buy" else -1.0
        if self.fill_mode == "realistic":
            price = self._fill_bar_open(order) * (1.0 + sign * self.spread_bps * 1e-4)
        else:
            price = self.prices[order.symbol] * (1.0 + sign * self.slippage_bps * 1e-4)
        fee = self._fee(order.side, qty, price)
        self.cash -= fee
        self.fees_charged += fee
        held = self.positions.get(order.symbol, 0.0)
        if sign > 0:
            avg = self.avg_price.get(order.symbol, price)
            self.avg_price[order.symbol] = (held * avg + qty * price) / (held + qty)
        self.positions[order.symbol] = held + sign * qty
        self.cash -= sign * qty * price
        before = order.filled_qty * (order.filled_avg_price or 0.0)
        order.filled_qty += qty
        order.filled_avg_price = (before + qty * price) / order.filled_qty
        order.status = "filled" if order.filled_qty >= order.qty - 1e-12 else "partially_filled"

    def _lookup(self, order: FakeOrder) -> FakeOrder:
        """An order as a GET sees it: a ``"delayed"`` order has filled by the time anyone looks."""
        if order.status == "accepted" and not self._held_back(order):
            if self.fill_mode == "realistic":
                if time.monotonic() >= order.created_wall + self.fill_delay:
                    self._execute(order, order.qty * self.fill_ratio)
            elif self.fill_mode in ("delayed", "fill"):
                self._execute(order, order.qty)
            elif self.fill_mode == "partial":
                self._execute(order, order.qty / 2)
        return order

    def _bars(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """One page of ``/v2/stocks/bars``: symbol then time order, ``next_page_token`` = row offset."""
        symbols = query.get("symbols", [""])[0].split(",")
        start = pd.Timestamp(query["start"][0]) if "start" in query else None
        end = pd.Timestamp(query["end"][0]) if "end" in query else None
        if self.bar_source is not None:
            frame = self.bar_source(symbols, start, end)
        else:
            frame = self.bars if self.bars is not None else pd.DataFrame(columns=["timestamp", "ticker"])
            frame = frame[frame["ticker"].isin(symbols)]
            if query.get("timeframe", [""])[0] == "1Day":
                frame = daily_bars(frame)
            if start is not None:
                frame = frame[frame["timestamp"] >= start]
            if end is not None:
                frame = frame[frame["timestamp"] <= end]
        frame = frame.sort_values(["ticker", "timestamp"], kind="stable")
        offset = int(query.get("page_token", ["0"])[0] or 0)
        limit = min(int(query.get("limit", [str(self.page_size)])[0]), self.page_size)
        page = frame.iloc[offset : offset + limit]
        out: dict[str, list[dict[str, Any]]] = {}
        # numpy's ISO form of the UTC stamps (to the second), as strftime would give, ten times faster
        utc = pd.DatetimeIndex(page["timestamp"]).tz_convert("UTC").tz_localize(None).to_numpy()
        stamps = [f"{t}Z" for t in np.datetime_as_string(utc, unit="s")]
        cols = [page[c].to_numpy(dtype=float).tolist() for c in ("open", "high", "low", "close", "volume")]
        for ticker, t, o, h, lo, c, v in zip(page["ticker"].tolist(), stamps, *cols, strict=True):
            out.setdefault(ticker, []).append(
                {"t": t, "o": o, "h": h, "l": lo, "c": c, "v": v, "n": 1, "vw": c}
            )
        token = str(offset + limit) if offset + limit < len(frame) else None
        return {"bars": out, "next_page_token": token}

    def _corporate_actions(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """``/v1/corporate-actions``: the actions of the asked symbols with ex-dates in [start, end]
        (inclusive, as the real API), one page."""
        symbols = set(query.get("symbols", [""])[0].split(","))
        start = query.get("start", ["0000-00-00"])[0]
        end = query.get("end", ["9999-99-99"])[0]
        out = {
            kind: [a for a in items if a["symbol"] in symbols and start <= a["ex_date"] <= end]
            for kind, items in self.corporate_actions.items()
        }
        return {"corporate_actions": out, "next_page_token": None}

    def respond(self, method: str, raw_path: str, headers: Any, body: bytes) -> tuple[int, Any, float, dict]:
        """``handle`` plus the market-data faults that need the transport: a Retry-After header with
        a 429, or a dropped connection (status 0)."""
        path = urlparse(raw_path).path
        if path.startswith("/v2/stocks"):
            with self._lock:
                for fault in self.faults:
                    if fault.method == method and path.startswith(fault.path) and fault.times > 0:
                        if fault.kind == "drop":
                            fault.times -= 1
                            self.requests.append((method, path))
                            return 0, None, 0.0, {}
                        if fault.retry_after is not None:
                            fault.times -= 1
                            self.requests.append((method, path))
                            payload = {"code": 42910000, "message": "too many requests"}
                            return fault.status, payload, 0.0, {"Retry-After": fault.retry_after}
                        break
        return self.handle(method, raw_path, headers, body)

    def handle(
        self, method: str, raw_path: str, headers: Any, body: bytes
    ) -> tuple[int, Any, float, dict[str, str]]:
        """(status, JSON body, delay before replying, extra headers) for one request."""
        parsed = urlparse(raw_path)
        path, query = parsed.path, parse_qs(parsed.query)
        with self._lock:
            self.requests.append((method, path))
            key, secret = self.require_keys
            if headers.get("APCA-API-KEY-ID") != key or headers.get("APCA-API-SECRET-KEY") != secret:
                return 401, {"code": 40110000, "message": "request is not authorized"}, 0.0, {}
            fault = self._take_fault(method, path)
            if fault is not None and fault.kind == "status":
                extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
                return (
                    fault.status,
                    {"code": fault.status * 100000, "message": "injected failure"},
                    0.0,
                    extra,
                )
            if fault is not None and fault.kind == "echo_key":
                message = f"forbidden: key {headers.get('APCA-API-SECRET-KEY')} may not read this"
                return 403, {"code": 40310000, "message": message}, 0.0, {}
            status, payload = self._route(method, path, query, body)
            if fault is not None and fault.kind == "status_after":
                return fault.status, {"code": fault.status * 100000, "message": "injected failure"}, 0.0, {}
            delay = fault.delay if fault is not None and fault.kind == "delay" else 0.0
            return status, payload, delay, {}

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        not_found = (404, {"code": 40410000, "message": "not found"})
        if method == "GET" and path == "/v2/account":
            return 200, self._account()
        if method == "GET" and path == "/v2/positions":
            return 200, self._positions()
        if method == "GET" and path == "/v2/clock":
            return 200, self._clock()
        if method == "GET" and path == "/v1/corporate-actions":
            return 200, self._corporate_actions(query)
        if method == "GET" and path.startswith("/v2/assets/"):
            return self._asset(path.rsplit("/", 1)[1])
        if method == "GET" and path == "/v2/stocks/bars":
            return 200, self._bars(query)
        if method == "POST" and path == "/v2/orders":
            return self._submit(json.loads(body or b"{}"))
        if method == "GET" and path == "/v2/orders:by_client_order_id":
            self.lookups.append(query.get("client_order_id", [""])[0])
            found = self.orders_for(query.get("client_order_id", [""])[0])
            return (200, self._lookup(found[0]).to_json()) if found else not_found
        if method == "GET" and path == "/v2/orders":
            # Alpaca's default (and podracer's ask) is status=open; "closed" and "all" as documented.
            wanted = query.get("status", ["open"])[0]
            open_ = ("new", "accepted", "pending_new", "partially_filled", "accepted_for_bidding")
            rows = [self._lookup(o) for o in self.orders.values()]
            if wanted == "open":
                rows = [o for o in rows if o.status in open_]
            elif wanted == "closed":
                rows = [o for o in rows if o.status not in open_]
            return 200, [o.to_json() for o in rows]
        if path.startswith("/v2/orders/"):
            order = self.orders.get(path.rsplit("/", 1)[1])
            if order is None:
                return not_found
            if method == "GET":
                return 200, self._lookup(order).to_json()
            if method == "DELETE":
                if order.status in ("filled", "canceled", "rejected"):
                    return 422, {"code": 42210000, "message": "order is not cancelable"}
                order.status = "canceled"
                return 204, None
        return not_found


def daily_bars(minute: pd.DataFrame) -> pd.DataFrame:
    """Minute bars -> one bar per (ticker, New York session), stamped at midnight New York."""
    cols = ["timestamp", "ticker", "open", "high", "low", "close", "volume"]
    if len(minute) == 0:
        return pd.DataFrame(columns=cols)
    local = pd.DatetimeIndex(minute["timestamp"]).tz_convert("America/New_York")
    day = local.tz_localize(None).normalize()
    daily = (
        minute.assign(day=day)
        .sort_values(["ticker", "timestamp"], kind="stable")
        .groupby(["ticker", "day"], as_index=False)
        .agg(
            open=("open", "first"),
            high=("high", "max"),
            low=("low", "min"),
            close=("close", "last"),
            volume=("volume", "sum"),
        )
    )
    daily["timestamp"] = daily["day"].dt.tz_localize("America/New_York").dt.tz_convert("UTC")
    return daily[cols]


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (the kill -9 tests) resets its connection: not the fake's error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    state: FakeAlpaca
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload, delay, extra = self.state.respond(method, self.path, self.headers, body)
        if status == 0:  # a dropped connection: no reply at all
            self.close_connection = True
            return
        if delay:
            time.sleep(delay)
        data = b"" if payload is None else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and went away

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")


def minute_bars(
    tickers: list[str] | tuple[str, ...],
    start: pd.Timestamp | str,
    end: pd.Timestamp | str,
    *,
    missing: float = 0.1,
    seed: int = 0,
) -> pd.DataFrame:
    """Regular-hours 1-minute bars of ``tickers`` in ``[start, end)``, deterministic per (ticker, day)
    whatever the window asked (so any paging or chunking of a range serves the same bars), with a
    share ``missing`` of minutes absent, as IEX leaves minutes without trades out."""
    lo = pd.Timestamp(start)
    hi = pd.Timestamp(end)
    lo = lo.tz_localize("UTC") if lo.tzinfo is None else lo.tz_convert("UTC")
    hi = hi.tz_localize("UTC") if hi.tzinfo is None else hi.tz_convert("UTC")
    first = lo.tz_convert("America/New_York").tz_localize(None).normalize()
    last = (hi - pd.Timedelta(minutes=1)).tz_convert("America/New_York").tz_localize(None).normalize()
    if last < first:
        return pd.DataFrame(columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"])
    sessions = sessions_in_range(first, last)
    grid = session_grid(sessions, "1m")
    ts = grid.timestamps.astype("int64")
    day = grid.session_id
    inside = (ts >= lo.value) & (ts < hi.value)
    frames = []
    day_keys = sessions.strftime("%Y%m%d").astype(int).to_numpy()
    for ticker in tickers:
        tkey = sum(ord(ch) * 131**i for i, ch in enumerate(ticker)) % 2**31
        rows = []
        for s_idx in np.unique(day[inside]):
            rng = np.random.default_rng([seed, tkey, int(day_keys[s_idx])])
            sel = day == s_idx
            n = int(sel.sum())
            close = 50.0 + (tkey % 400) + np.cumsum(rng.normal(0, 0.05, n))
            keep = rng.random(n) >= missing
            keep[0] = True
            rows.append((ts[sel][keep], close[keep], rng.integers(100, 5000, n)[keep]))
        if not rows:
            continue
        t = np.concatenate([r[0] for r in rows])
        c = np.round(np.concatenate([r[1] for r in rows]), 4)
        v = np.concatenate([r[2] for r in rows]).astype(float)
        m = (t >= lo.value) & (t < hi.value)
        frames.append(
            pd.DataFrame(
                {
                    "timestamp": pd.to_datetime(t[m], utc=True),
                    "ticker": ticker,
                    "open": c[m],
                    "high": np.round(c[m] + 0.02, 4),
                    "low": np.round(c[m] - 0.02, 4),
                    "close": c[m],
                    "volume": v[m],
                }
            )
        )
    if not frames:
        return pd.DataFrame(columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"])
    return pd.concat(frames, ignore_index=True)


class HungServer:
    """A loopback TCP server that accepts every connection and never answers (see the module
    docstring); ``accepted`` counts the connections it holds."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)  # read nothing, answer nothing

    def __enter__(self) -> HungServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._sock.close()
