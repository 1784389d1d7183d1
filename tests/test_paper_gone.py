# ruff: noqa: F811 - the fixtures imported from test_paper are requested by name
"""A held ticker that stops trading for good, against the local Alpaca stand-in.

The real alpaca-py client talks HTTP to tests/alpaca_fake.py: ``GET /v2/assets/{symbol}`` says
whether the broker still trades the ticker, daily bars say when it last traded. The fixture's
market has five sessions (2024-01-02 .. 2024-01-08); the decision bar is in the last one.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pandas as pd
import pytest
from test_paper import FAST, cycle

from app.cli import main
from app.paper.alpaca_broker import AlpacaBroker
from app.paper.broker import Asset
from app.paper.cycle import run_cycle
from app.paper.gone import window_start
from app.paper.journal import Journal, read_journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits
from data.calendar import session_date as session_of
from data.errors import PodracerError


def stop_trading(env, ticker: str, since: str, qty: float = 10.0) -> None:
    """``ticker`` has no bar from New York date ``since`` on, and the account holds ``qty`` of it."""
    fake = env["fake"]
    day = fake.bars["timestamp"].dt.tz_convert("America/New_York").dt.tz_localize(None).dt.normalize()
    fake.bars = fake.bars[~((fake.bars.ticker == ticker) & (day >= pd.Timestamp(since)))]
    fake.positions[ticker] = qty
    fake.avg_price[ticker] = fake.prices[ticker]


def gone_events(env, ticker: str) -> pd.DataFrame:
    events = read_journal(env["home"])["events"]
    return events[(events["kind"] == "gone") & events["message"].str.contains(ticker, regex=False)]


def test_held_ticker_gone_and_still_tradable_is_sold(env):
    fake, ticker = env["fake"], env["bundle"].tickers[1]
    stop_trading(env, ticker, "2024-01-04")  # no bar on Jan 4, Jan 5, nor today (Jan 8)
    result = cycle(env, gone_after=2)
    assert result.gone == [ticker] and ticker in result.skipped and not result.attention
    assert fake.positions[ticker] == pytest.approx(0.0, abs=1e-9)  # the whole position, closed
    assert fake.asset_lookups == [ticker]  # asked about the held ticker without a bar only
    orders = read_journal(env["home"])["orders"].set_index("ticker")
    row = orders.loc[ticker]
    assert row["side"] == "sell" and row["qty"] == 10.0 and row["status"] == "filled"
    assert row["message"].startswith("gone: no real bar in the last 2 sessions")
    assert len(gone_events(env, ticker)) == 1


def test_missing_for_fewer_sessions_than_gone_after_is_held(env):
    fake, ticker = env["fake"], env["bundle"].tickers[1]
    stop_trading(env, ticker, "2024-01-04")  # Jan 3 still traded: inside a 3-session window
    result = cycle(env, gone_after=3)
    assert result.gone == [] and result.skipped == [ticker]
    assert fake.asset_lookups == [ticker]
    assert fake.positions[ticker] == 10.0 and ticker not in {o.symbol for o in fake.orders.values()}
    assert gone_events(env, ticker).empty


def test_ticker_missing_one_bar_asks_nothing(env):
    fake, ticker = env["fake"], env["bundle"].tickers[1]
    fake.bars = fake.bars[~((fake.bars.ticker == ticker) & (fake.bars.timestamp == env["decision"]))]
    fake.positions[ticker] = 10.0
    result = cycle(env, gone_after=1)
    assert result.status == "traded" and result.skipped == [] and result.gone == []
    assert fake.asset_lookups == []  # no asset request when every held ticker traded this session
    assert not fake.requests.count(("GET", f"/v2/assets/{ticker}"))
    assert gone_events(env, ticker).empty


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"status": "inactive", "tradable": False}, "inactive at the broker"),
        ({"status": "active", "tradable": False}, "not tradable at the broker"),
        (None, "unknown to the broker (HTTP 404)"),
    ],
)
def test_held_ticker_the_broker_will_not_trade_warns_every_cycle(env, flags, why):
    fake, bundle = env["fake"], env["bundle"]
    ticker = bundle.tickers[1]
    stop_trading(env, ticker, "2024-01-01")  # delisted: no bar at all
    fake.assets[ticker] = flags
    price = fake.prices[ticker]
    first = cycle(env)
    assert first.status == "traded" and first.attention == [ticker] and first.gone == []
    assert ticker not in {o.ticker for o in first.orders}
    assert ticker not in {o.symbol for o in fake.orders.values()} and fake.positions[ticker] == 10.0
    # counted at its last known price (the position's current_price): value and weight
    decision = read_journal(env["home"])["decisions"].iloc[0]
    assert decision["equity"] == pytest.approx(100_000.0 + 10.0 * price)
    weights = dict(zip(json.loads(decision["tickers"]), json.loads(decision["current_weights"]), strict=True))
    assert weights[ticker] == pytest.approx(10.0 * price / (100_000.0 + 10.0 * price))
    fake.now += timedelta(minutes=15)
    second = cycle(env)
    assert second.attention == [ticker]
    events = gone_events(env, ticker)
    assert len(events) == 2 and (events["level"] == "warning").all()
    assert events["message"].str.contains(why, regex=False).all()
    assert events["message"].str.contains("needs manual attention").all()


def test_429_on_the_asset_lookup_is_retried(env):
    fake, ticker = env["fake"], env["bundle"].tickers[1]
    stop_trading(env, ticker, "2024-01-04")
    fake.fail("GET", "/v2/assets", status=429, retry_after="2")
    sleeps: list[float] = []
    options = PaperOptions(
        limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None),
        fill_timeout=0.5,
        fill_poll=0.01,
        gone_after=2,
    )
    with Journal.for_home(env["home"]) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=sleeps.append)
        result = run_cycle(env["bundle"], broker, journal, options)
    assert fake.requests.count(("GET", f"/v2/assets/{ticker}")) == 2  # refused once, then served
    assert len(sleeps) == 1 and 2.0 <= sleeps[0] <= 2.0 * 1.25 + 1e-9  # Retry-After honoured
    assert result.gone == [ticker] and fake.positions[ticker] == pytest.approx(0.0, abs=1e-9)


def test_asset_lookup_on_the_real_client(env):
    fake, ticker = env["fake"], env["bundle"].tickers[0]
    broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
    assert broker.asset(ticker) == Asset(ticker, active=True, tradable=True)
    fake.assets[ticker] = {"status": "inactive", "tradable": False}
    assert broker.asset(ticker) == Asset(ticker, active=False, tradable=False)
    assert broker.asset("ZZZZ") is None  # unknown symbol: HTTP 404 -> None, not an error


def test_dry_run_and_cli_gone_after(env, capsys):
    fake, ticker = env["fake"], env["bundle"].tickers[1]
    stop_trading(env, ticker, "2024-01-04")
    args = ["--home", str(env["home"]), "paper", "--bundle", str(env["bundle_dir"]), "--once", "--dry-run"]
    assert main([*args, "--gone-after", "2"]) == 0
    out = capsys.readouterr().out
    assert f"sell 10 {ticker}" in out and f"note: {ticker} gone:" in out
    orders = read_journal(env["home"])["orders"].set_index("ticker")
    assert orders.loc[ticker, "status"] == "dry_run" and orders.loc[ticker, "message"].startswith("gone:")
    assert fake.requests.count(("POST", "/v2/orders")) == 0
    assert main([*args, "--gone-after", "0"]) == 2
    assert "--gone-after" in capsys.readouterr().err
    with pytest.raises(PodracerError, match="--gone-after"):
        PaperOptions(gone_after=0)


def test_gone_window_counts_completed_sessions_before_the_decision_session():
    monday = pd.Timestamp("2024-01-08 15:00", tz="UTC")
    assert session_of(monday) == pd.Timestamp("2024-01-08")
    assert session_of(pd.Timestamp("2024-01-08", tz="UTC")) == pd.Timestamp("2024-01-08")  # a daily bar
    # two sessions before Monday Jan 8: Thu Jan 4 and Fri Jan 5; midnight New York = 05:00 UTC
    assert pd.Timestamp(window_start(monday, 2)) == pd.Timestamp("2024-01-04 05:00", tz="UTC")
    # Jan 1 is a holiday: five sessions before Jan 8 start on Dec 29
    assert pd.Timestamp(window_start(monday, 5)) == pd.Timestamp("2023-12-29 05:00", tz="UTC")
