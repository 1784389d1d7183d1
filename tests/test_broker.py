"""AlpacaBroker: the real alpaca-py clients over real HTTP against the local fake (tests/alpaca_fake.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest
from alpaca_fake import KEY_ID, SECRET, FakeAlpaca, point_at

from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy, check_trading_url
from app.paper.broker import BrokerError, OrderRejected, OrderRequest

FAST = BrokerRetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01, timeout=0.5)


@pytest.fixture
def trading_fake(monkeypatch):
    with FakeAlpaca(prices={"AAPL": 100.0, "MSFT": 200.0}, cash=10_000.0, positions={"MSFT": 5.0}) as server:
        point_at(server, monkeypatch)
        yield server


def make_broker(sleeps: list[float] | None = None, retry: BrokerRetryPolicy = FAST) -> AlpacaBroker:
    return AlpacaBroker(retry=retry, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def test_account_positions_clock(trading_fake):
    broker = make_broker()
    acct = broker.account()
    assert acct.cash == pytest.approx(10_000.0)
    assert acct.equity == pytest.approx(11_000.0)
    pos = broker.positions()
    assert set(pos) == {"MSFT"} and pos["MSFT"].qty == pytest.approx(5.0)
    assert pos["MSFT"].market_value == pytest.approx(1000.0)
    clock = broker.clock()
    assert clock.is_open and clock.timestamp.tzinfo is not None


def test_bars_paginated(trading_fake):
    ts = pd.date_range("2024-01-03 14:30", periods=5, freq="1min", tz="UTC")
    rows = [
        (t, s, 1.0 + i, 2.0 + i, 0.5 + i, 1.5 + i, 10.0) for s in ("AAPL", "MSFT") for i, t in enumerate(ts)
    ]
    trading_fake.bars = pd.DataFrame(
        rows, columns=["timestamp", "ticker", "open", "high", "low", "close", "volume"]
    )
    trading_fake.page_size = 3  # forces the client through next_page_token
    bars = make_broker().latest_bars(["AAPL", "MSFT"], ts[0].to_pydatetime(), ts[-1].to_pydatetime())
    assert len(bars) == 10
    assert list(bars.columns) == ["timestamp", "ticker", "open", "high", "low", "close", "volume"]
    aapl = bars[bars.ticker == "AAPL"]
    assert (aapl["close"].to_numpy() == [1.5, 2.5, 3.5, 4.5, 5.5]).all()
    assert str(aapl["timestamp"].dt.tz) == "UTC" and aapl["timestamp"].iloc[0] == ts[0]


def test_live_url_refused(monkeypatch):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    monkeypatch.setenv("APCA_API_BASE_URL", "https://api.alpaca.markets")
    with pytest.raises(BrokerError, match="paper"):
        AlpacaBroker()
    for bad in ("http://paper-api.alpaca.markets", "https://example.com", "https://api.alpaca.markets/v2"):
        with pytest.raises(BrokerError):
            check_trading_url(bad)
    assert check_trading_url("https://paper-api.alpaca.markets/") == "https://paper-api.alpaca.markets"


def test_missing_keys_clear_error(monkeypatch):
    monkeypatch.delenv("APCA_API_KEY_ID", raising=False)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    with pytest.raises(BrokerError, match="APCA_API_KEY_ID") as info:
        AlpacaBroker()
    assert SECRET not in str(info.value)


def test_wrong_keys_are_not_echoed(trading_fake, monkeypatch):
    monkeypatch.setenv("APCA_API_SECRET_KEY", "wrong-secret-value")
    with pytest.raises(BrokerError, match="401") as info:
        make_broker().account()
    assert "wrong-secret-value" not in str(info.value)


def _order(cid: str = "pod-abc-1", qty: float = 1.5) -> OrderRequest:
    return OrderRequest(symbol="AAPL", side="buy", qty=qty, client_order_id=cid)


def test_submit_normal(trading_fake):
    order = make_broker().submit(_order())
    assert order.status == "filled" and order.filled_qty == pytest.approx(1.5)
    assert trading_fake.positions["AAPL"] == pytest.approx(1.5)
    assert trading_fake.order_posts == 1


def test_500_then_success_exactly_one_order(trading_fake):
    trading_fake.fail("POST", "/v2/orders", kind="status", status=500)
    sleeps: list[float] = []
    order = make_broker(sleeps).submit(_order())
    assert order.status == "filled"
    assert len(trading_fake.orders_for("pod-abc-1")) == 1
    assert trading_fake.requests.count(("POST", "/v2/orders")) == 2  # refused, then accepted
    assert ("GET", "/v2/orders:by_client_order_id") in trading_fake.requests  # looked up before resubmitting
    assert len(sleeps) == 1


def test_500_after_processing_is_not_resubmitted(trading_fake):
    trading_fake.fail("POST", "/v2/orders", kind="status_after", status=502)
    order = make_broker().submit(_order())
    assert order.client_order_id == "pod-abc-1"
    assert len(trading_fake.orders_for("pod-abc-1")) == 1
    assert trading_fake.order_posts == 1  # found by client id: no second POST
    assert trading_fake.positions["AAPL"] == pytest.approx(1.5)


def test_429_backs_off(trading_fake):
    trading_fake.fail("POST", "/v2/orders", kind="status", status=429, times=2)
    sleeps: list[float] = []
    order = make_broker(sleeps).submit(_order())
    assert order.status == "filled"
    assert len(trading_fake.orders_for("pod-abc-1")) == 1
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0]  # exponential


def test_get_retries_then_gives_up(trading_fake):
    trading_fake.fail("GET", "/v2/account", kind="status", status=503, times=10)
    sleeps: list[float] = []
    with pytest.raises(BrokerError, match="after 4 attempts"):
        make_broker(sleeps).account()
    assert len(sleeps) == 3


def test_timeout_then_lookup(trading_fake):
    # The server creates the order but answers too late: the client times out (ambiguous).
    trading_fake.fail("POST", "/v2/orders", kind="delay", delay=1.0)
    retry = BrokerRetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01, timeout=0.3)
    order = make_broker(retry=retry).submit(_order())
    assert order.status == "filled"
    assert len(trading_fake.orders_for("pod-abc-1")) == 1 and trading_fake.order_posts == 1


def test_rejected_order(trading_fake):
    trading_fake.fill_mode = "reject"
    with pytest.raises(OrderRejected, match="insufficient buying power"):
        make_broker().submit(_order())
    assert trading_fake.order_posts == 1  # a 4xx is final, not retried


def test_duplicate_client_id_resolves_to_existing(trading_fake):
    broker = make_broker()
    first = broker.submit(_order())
    again = broker.submit(_order())
    assert again.id == first.id
    assert len(trading_fake.orders_for("pod-abc-1")) == 1


def test_partial_fill_and_cancel(trading_fake):
    trading_fake.fill_mode = "partial"
    broker = make_broker()
    order = broker.submit(_order(qty=2.0))
    assert order.status == "partially_filled" and order.filled_qty == pytest.approx(1.0) and order.is_open
    broker.cancel(order.id)
    assert broker.order_by_client_id("pod-abc-1").status == "canceled"
    assert broker.order_by_client_id("missing") is None


def test_clock_closed(trading_fake):
    trading_fake.is_open = False
    trading_fake.now = datetime(2024, 1, 3, 22, 0, tzinfo=UTC)
    clock = make_broker().clock()
    assert not clock.is_open and clock.next_open > clock.timestamp
