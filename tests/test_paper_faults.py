# ruff: noqa: F811 - the fixtures imported from test_paper are requested by name
"""Paper trading under faults, against the local Alpaca stand-in (tests/alpaca_fake.py).

Each test names the fault it pins; docs/paper.md's "what happens when" table points here.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pandas as pd
import pytest
import requests
from alpaca_fake import SECRET, FakeAlpaca, daily_bars
from test_paper import FAST, cycle

from app.cli import main
from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy, parse_retry_after
from app.paper.broker import BrokerError, OrderRequest
from app.paper.cycle import run_cycle
from app.paper.journal import Journal, journal_path, order_counts, read_journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits, client_order_id

# Sell most of a book concentrated in one ticker (max weight 0.34), so that buys need the proceeds.
CONCENTRATED = RiskLimits(max_order_notional=1e9, max_weight=0.34, daily_loss_limit=None)


def concentrate(env, cash: float = 1_000.0, value: float = 100_000.0) -> str:
    """Put almost the whole account into the bundle's first ticker; return that ticker."""
    fake, ticker = env["fake"], env["bundle"].tickers[0]
    fake.positions[ticker] = value / fake.prices[ticker]
    fake.avg_price[ticker] = fake.prices[ticker]
    fake.cash = cash
    fake.last_equity = fake.equity()
    return ticker


def buy_notional(fake: FakeAlpaca) -> float:
    return sum(o.qty * fake.prices[o.symbol] for o in fake.orders.values() if o.side == "buy")


# --- 1. buys spend only cash that is there ---------------------------------------------------------
def test_late_sell_fills_buys_only_on_cash_there(env):
    fake = env["fake"]
    concentrate(env)
    fake.sell_fill_delay = 30.0  # sells fill long after the cycle's fill timeout
    result = cycle(env, limits=CONCENTRATED, fill_timeout=0.2, fill_poll=0.02)
    assert any(o.side == "sell" for o in result.orders)
    assert fake.rejections == 0  # no buy was refused for lack of buying power
    assert buy_notional(fake) <= 1_000.0 + 1e-6
    tables = read_journal(env["home"])
    assert "rejected" not in set(tables["orders"]["status"])
    scaled = tables["events"][tables["events"]["kind"] == "buys_scaled"]
    assert len(scaled) == 1 and "not filled after 0.2s" in scaled["message"].iloc[0]


def test_sells_filled_in_time_fund_the_buys(env):
    fake = env["fake"]
    concentrate(env)
    fake.sell_fill_delay = 0.2
    result = cycle(env, limits=CONCENTRATED, fill_timeout=5.0, fill_poll=0.02)
    assert result.status == "traded" and fake.rejections == 0
    assert buy_notional(fake) > 10_000.0  # the sells' proceeds, not the $1,000 of cash at the start
    assert fake.cash >= 0


def test_margin_account_never_borrows(env):
    fake = env["fake"]
    concentrate(env)
    fake.margin_multiplier = 100.0  # buying_power = 100 x cash: a buy beyond cash would be accepted
    fake.sell_fill_delay = 30.0
    cycle(env, limits=CONCENTRATED, fill_timeout=0.2, fill_poll=0.02)
    assert fake.cash >= -1e-6  # nothing borrowed
    assert buy_notional(fake) <= 1_000.0 + 1e-6


def test_stale_order_filling_late_is_counted_once(env):
    fake, bundle = env["fake"], env["bundle"]
    ticker = concentrate(env, cash=50_000.0, value=50_000.0)
    fake.fill_mode = "accept"  # cycle 1: the sell stays open at the broker
    first = cycle(env, limits=CONCENTRATED, fill_timeout=0.05, fill_poll=0.01)
    sell = next(o for o in first.orders if o.side == "sell" and o.ticker == ticker)
    fake.fill_mode = "fill"  # it fills when the next cycle looks it up
    fake.now += timedelta(minutes=15)
    second = cycle(env, limits=CONCENTRATED)
    assert fake.orders_for(sell.client_order_id)[0].status == "filled"
    # the second cycle read the book after that fill: nothing sold twice, the book is at its target
    events = read_journal(env["home"])["events"]
    assert not events["message"].str.contains("our fills imply").any()
    weight = fake.positions[ticker] * fake.prices[ticker] / fake.equity()
    assert weight == pytest.approx(second.target_weights[ticker], abs=0.01)
    assert all(q >= -1e-9 for q in fake.positions.values()) and bundle.tickers


# --- 2. Retry-After and the per-cycle budget -------------------------------------------------------
def _broker(sleeps: list[float], **retry) -> AlpacaBroker:
    policy = BrokerRetryPolicy(
        **{"attempts": 4, "base_delay": 0.001, "max_delay": 0.01, "timeout": 0.5, **retry}
    )
    return AlpacaBroker(retry=policy, sleep=sleeps.append)


def test_retry_after_seconds_and_http_date_are_honoured(env):
    fake = env["fake"]
    order = OrderRequest(env["bundle"].tickers[0], "buy", 1.0, "pr-retry-after")
    fake.fail("POST", "/v2/orders", status=429, retry_after="3")
    sleeps: list[float] = []
    assert _broker(sleeps).submit(order).status == "filled"
    assert 3.0 <= sleeps[0] <= 3.0 * 1.25 + 1e-9  # the header's wait plus at most 25% jitter
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=10), usegmt=True)
    fake.fail("GET", "/v2/account", status=503, retry_after=when)
    sleeps.clear()
    _broker(sleeps).account()
    assert 8.0 <= sleeps[0] <= 10.0 * 1.25 + 1e-9
    assert parse_retry_after("garbage") is None and parse_retry_after("0") == 0.0


def test_retry_budget_spent_cycle_partial_then_next_finishes(env):
    fake = env["fake"]
    # the second order on: 429 with a Retry-After longer than the cycle's whole retry budget
    fake.fail("POST", "/v2/orders", status=429, retry_after="30", times=100, skip=1)
    sleeps: list[float] = []
    options = PaperOptions(limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None), fill_timeout=0.5)
    options = PaperOptions(**{**options.__dict__, "fill_poll": 0.01})
    with Journal.for_home(env["home"]) as journal:
        result = run_cycle(env["bundle"], _broker(sleeps, budget=5.0), journal, options)
    assert result.status == "partial" and result.not_sent
    assert sum(sleeps) < 1.0  # stopped at once rather than sleeping 30 s past the budget
    assert len(fake.orders) == 1  # the first order went out, then a clean stop
    tables = read_journal(env["home"])
    assert "partial" in set(tables["events"]["kind"])
    orders = tables["orders"].set_index("client_order_id")
    assert set(orders.loc[[o.client_order_id for o in result.not_sent], "status"]) <= {
        "not_sent",
        "submitted",
    }
    fake.faults.clear()  # the rate limit is over: the next run of the same bar finishes the rebalance
    second = cycle(env)
    assert second.status == "traded"
    for o in result.not_sent:  # what the first run left undone went out and filled
        assert fake.orders_for(o.client_order_id)[0].status == "filled"
    equity = fake.equity()
    # The second run's targets come from the same policy on a changed book (the observation holds
    # the weights), and the first order's ticker keeps its fill (its id for this bar is spent), so a
    # buy may be scaled down to the cash left: each other ticker reaches its target or takes the rest
    # of the cash.
    cash_left = fake.cash / equity
    for ticker, weight in second.target_weights.items():
        if ticker != result.orders[0].ticker:
            held = fake.positions.get(ticker, 0.0) * fake.prices[ticker] / equity
            assert held == pytest.approx(weight, abs=0.01) or (held < weight and cash_left < 0.01)
    assert set(read_journal(env["home"])["orders"]["status"]) == {"filled"}


# --- 3. secrets ------------------------------------------------------------------------------------
SENTINEL = "SENTINELsecretZZ9qx7"


@pytest.mark.parametrize("value", [SECRET + "\r\n", SECRET[:10] + "\r" + SECRET[10:], " " + SECRET])
def test_key_with_whitespace_or_control_chars_refused(env, monkeypatch, capsys, value):
    monkeypatch.setenv("APCA_API_SECRET_KEY", value)
    rc = main(["--home", str(env["home"]), "paper", "--bundle", str(env["bundle_dir"]), "--once"])
    out = capsys.readouterr()
    assert rc == 2 and "APCA_API_SECRET_KEY" in out.err and "Traceback" not in out.err
    assert len(out.err.strip().splitlines()) == 1
    for part in (SECRET, SECRET[:10], SECRET[10:]):
        assert part not in out.err and part not in out.out
    assert env["fake"].requests == []  # refused before any request


def test_http_layer_error_never_carries_header_values(env):
    broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
    err = requests.exceptions.InvalidHeader(
        f"Invalid leading whitespace, reserved character(s), or return character(s) in header value: '{SENTINEL}\\r'"
    )
    _, desc, _ = broker._classify(err)
    assert SENTINEL not in desc and "InvalidHeader" in desc


def test_whole_cycle_with_sentinel_keys_leaks_nothing(env, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    fake = env["fake"]
    key, secret = "PKSENTINEL" + SENTINEL, "SK" + SENTINEL + "/x"
    fake.require_keys = (key, secret)
    monkeypatch.setenv("APCA_API_KEY_ID", key)
    monkeypatch.setenv("APCA_API_SECRET_KEY", secret)
    fake.fail("GET", "/v2/account", status=429, retry_after="0")
    fake.fail("POST", "/v2/orders", kind="status_after", status=500)
    fake.fail("POST", "/v2/orders", status=403, skip=1)
    args = ["--home", str(env["home"]), "-vv", "paper", "--bundle", str(env["bundle_dir"]), "--once"]
    rc = main([*args, "--max-order-notional", "1000000", "--fill-timeout", "0.2"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert fake.orders
    leaked = [SENTINEL]
    for text in (out.out, out.err, caplog.text):
        assert not any(s in text for s in leaked)
    for path in env["home"].rglob("*"):
        if path.is_file():
            assert SENTINEL.encode() not in path.read_bytes(), path
    assert journal_path(env["home"]).is_file()


# --- 4. the journal closes every row and re-runs are idempotent --------------------------------
def test_order_never_sent_is_closed_not_submitted(env):
    """kill -9 between the journal's "submitted" row and the POST: the broker never heard of it."""
    bundle, fake = env["bundle"], env["fake"]
    cid = client_order_id(bundle.bundle_id, env["decision"] - timedelta(minutes=15), bundle.tickers[0])
    with Journal.for_home(env["home"]) as journal:
        journal.order(
            client_order_id=cid,
            decision_ts=(env["decision"] - timedelta(minutes=15)).isoformat(),
            bundle_id=bundle.bundle_id,
            ticker=bundle.tickers[0],
            side="buy",
            qty=1.0,
            est_price=100.0,
            status="submitted",
        )
    cycle(env, submit_window=0.0)
    orders = read_journal(env["home"])["orders"].set_index("client_order_id")
    assert orders.loc[cid, "status"] == "not_submitted"
    fake.now += timedelta(minutes=15)
    cycle(env, submit_window=0.0)
    assert fake.lookups.count(cid) == 1  # closed: never looked up again
    assert order_counts(read_journal(env["home"])["orders"])["not_submitted"] == 1


def test_404_lookup_inside_the_submit_window_keeps_the_row_open(env):
    """A submit whose reply was lost and whose first lookup says 404 is not closed too early."""
    fake = env["fake"]
    fake.fail("POST", "/v2/orders", kind="status_after", status=502, times=1)
    fake.fail("GET", "/v2/orders:by_client_order_id", status=404, times=100)
    options = PaperOptions(limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None), fill_timeout=0.1)
    with Journal.for_home(env["home"]) as journal:
        first = run_cycle(env["bundle"], AlpacaBroker(retry=FAST, sleep=lambda s: None), journal, options)
    assert first.status == "partial"
    cid = first.orders[0].client_order_id
    assert read_journal(env["home"])["orders"].set_index("client_order_id").loc[cid, "status"] == "submitted"
    assert len(fake.orders_for(cid)) == 1  # it did reach the broker
    fake.faults.clear()
    fake.now += timedelta(minutes=15)
    cycle(env)  # default submit window (60 s): the lookup now finds it
    assert read_journal(env["home"])["orders"].set_index("client_order_id").loc[cid, "status"] == "filled"


def test_rerun_of_the_same_bar_is_idempotent(env):
    fake = env["fake"]
    fake.fill_mode = "partial"
    first = cycle(env, fill_timeout=0.05)
    cycle(env, fill_timeout=0.05)  # same decision bar: cron retried, or a restart
    tables = read_journal(env["home"])
    ids = [o.client_order_id for o in first.orders]
    assert tables["fills"]["client_order_id"].value_counts().max() == 1  # no fill written twice
    orders = tables["orders"].set_index("client_order_id")
    for cid in ids:
        broker_order = fake.orders_for(cid)[0]
        assert orders.loc[cid, "status"] == broker_order.status == "canceled"
        assert orders.loc[cid, "filled_qty"] == pytest.approx(broker_order.filled_qty)
    assert order_counts(tables["orders"])["partial"] == len(ids)


def test_journal_upsert_never_downgrades(tmp_path):
    with Journal.for_home(tmp_path) as journal:
        row = dict(client_order_id="c1", decision_ts="2024-01-03T15:00:00+00:00", bundle_id="b")
        row.update(ticker="AAPL", side="buy", qty=2.0, est_price=100.0)
        journal.order(**row, status="filled", filled_qty=2.0, filled_avg_price=100.0, broker_order_id="x")
        journal.order(**row, status="submitted")
        assert journal.fill(
            client_order_id="c1",
            ticker="AAPL",
            side="buy",
            filled_qty=2.0,
            filled_avg_price=100.0,
            status="filled",
        )
        assert not journal.fill(
            client_order_id="c1",
            ticker="AAPL",
            side="buy",
            filled_qty=2.0,
            filled_avg_price=100.0,
            status="filled",
        )
    orders = read_journal(tmp_path)["orders"]
    assert orders["status"].tolist() == ["filled"] and orders["filled_qty"].tolist() == [2.0]
    assert order_counts(orders) == {**dict.fromkeys(order_counts(orders), 0), "filled": 1}


# --- 5. smaller --------------------------------------------------------------------------------------
def test_data_url_checked_like_the_trading_url(env, monkeypatch, capsys):
    monkeypatch.setenv("APCA_API_DATA_URL", "https://evil.example.com")
    rc = main(["--home", str(env["home"]), "paper", "--bundle", str(env["bundle_dir"]), "--once"])
    err = capsys.readouterr().err
    assert rc == 2 and "APCA_API_DATA_URL" in err
    assert env["fake"].requests == []
    with pytest.raises(BrokerError):
        AlpacaBroker(data_url="http://data.alpaca.markets")  # plain http: the keys would go in clear


def test_bundle_without_a_file_digest_refused(env, tmp_path):
    import shutil

    from app.bundle import load_bundle, manifest_hash
    from data.errors import CheckpointError

    bad = tmp_path / "bad"
    shutil.copytree(env["bundle_dir"], bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["files"]["policy.onnx"] = ""
    manifest["bundle_id"] = manifest_hash(manifest)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="sha256"):
        load_bundle(bad)


def test_policy_spec_without_weights_sha256_refused(env, tmp_path):
    import shutil

    from agents.policy import Policy
    from data.errors import CheckpointError

    bad = tmp_path / "champion"
    shutil.copytree(env["run"].run_dir / "champion", bad)
    spec = json.loads((bad / "spec.json").read_text())
    spec["weights_sha256"] = ""
    (bad / "spec.json").write_text(json.dumps(spec))
    with pytest.raises(CheckpointError, match="weights_sha256"):
        Policy.load(bad)  # the weights are intact: only the missing digest is refused


@pytest.mark.parametrize("stamp", ["alpaca", "date"])
def test_daily_bundle_decides_only_on_completed_sessions(env, stamp):
    from app.bundle import Bundle
    from app.paper.broker import BrokerAccount
    from app.paper.observation import build_decision

    minute = env["run"].bars
    daily = daily_bars(minute)  # stamped at midnight New York time of the session, as Alpaca does
    day = daily["timestamp"].dt.tz_convert("America/New_York").dt.tz_localize(None)
    if stamp != "alpaca":  # a store keeps the date
        daily["timestamp"] = day.dt.tz_localize("UTC")
    manifest = {**env["bundle"].manifest, "interval": "1d", "decision_interval": 1}
    spec = dict(manifest["feature_spec"])
    spec["lookback"] = 2
    manifest["feature_spec"] = spec
    bundle = Bundle(path=env["bundle"].path, manifest=manifest)
    days = sorted(day.unique())
    last = pd.Timestamp(days[-1]).tz_localize("UTC")
    midday = (last + pd.Timedelta(hours=18)).to_pydatetime()  # 13:00 New York: the session is open
    decision = build_decision(bundle, daily, BrokerAccount(1e5, 1e5, 1e5, 1e5), {}, midday)
    assert decision.decision_ts.date() == pd.Timestamp(days[-2]).date()  # not today's forming bar
    after_close = (last + pd.Timedelta(hours=23)).to_pydatetime()
    decision = build_decision(bundle, daily, BrokerAccount(1e5, 1e5, 1e5, 1e5), {}, after_close)
    assert decision.decision_ts.date() == pd.Timestamp(days[-1]).date()


def test_a_broker_error_quoting_the_key_reaches_no_journal_heartbeat_log_or_status(env, caplog):
    from app.paper.cycle import run_paper
    from app.paper.heartbeat import heartbeat_path
    from app.workflows.status import gather_status
    from data.scrub import ScrubFilter

    fake, home = env["fake"], env["home"]
    fake.fail("GET", "/v2/account", kind="echo_key", times=100)  # a 403 whose message quotes the key
    caplog.handler.addFilter(ScrubFilter())  # the CLI's log handler carries this filter
    options = PaperOptions(limits=RiskLimits(daily_loss_limit=None))
    with Journal.for_home(home) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        (result,) = run_paper(
            env["bundle"], broker, journal, options, max_cycles=1, heartbeat=heartbeat_path(home)
        )
    assert result.status == "error" and SECRET in result.alert  # in memory only
    state = gather_status(home)
    assert any("paper loop: error: " in p and "forbidden: key ***" in p for p in state.problems)
    assert SECRET not in json.dumps(state.to_dict()) and SECRET not in caplog.text
    for path in home.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path
