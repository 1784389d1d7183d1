"""Paper trading cycles: real alpaca-py over HTTP to the local fake, journal, risk limits, safety."""

from __future__ import annotations

import json
import logging
import shutil
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
from alpaca_fake import KEY_ID, SECRET

from app.cli import main
from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy
from app.paper.cycle import run_cycle
from app.paper.journal import Journal, journal_path, read_journal
from app.paper.observation import fetch_start
from app.paper.options import PaperOptions
from app.paper.orders import (
    DecisionSnapshot,
    RiskLimits,
    apply_limits,
    bundle_max_weight,
    client_order_id,
    plan_orders,
)

FAST = BrokerRetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01, timeout=0.5)


def cycle(env, **option_args):
    limits = option_args.pop("limits", RiskLimits(max_order_notional=1e9, daily_loss_limit=None))
    option_args.setdefault("fill_timeout", 0.5)
    option_args.setdefault("fill_poll", 0.01)
    options = PaperOptions(limits=limits, **option_args)
    with Journal.for_home(env["home"]) as journal:
        return run_cycle(env["bundle"], AlpacaBroker(retry=FAST, sleep=lambda s: None), journal, options)


def test_normal_cycle(env):
    fake, bundle = env["fake"], env["bundle"]
    result = cycle(env)
    assert result.status == "traded"
    assert result.decision_ts == env["decision"]
    assert result.submitted and len(fake.orders) == len(result.orders)
    # every order carries the deterministic id of (bundle, decision bar, ticker)
    for order in result.orders:
        assert order.client_order_id == client_order_id(bundle.bundle_id, env["decision"], order.ticker)
        assert len(fake.orders_for(order.client_order_id)) == 1
    # the book now matches the target weights (fills at the decision price, fractional shares)
    equity = fake.equity()
    for ticker, weight in result.target_weights.items():
        held = fake.positions.get(ticker, 0.0) * fake.prices[ticker] / equity
        assert held == pytest.approx(weight, abs=0.01)
    tables = read_journal(env["home"])
    assert len(tables["decisions"]) == 1 and len(tables["orders"]) == len(result.orders)
    assert set(tables["orders"]["status"]) == {"filled"}
    assert len(tables["fills"]) == len(result.orders)
    assert (tables["positions"]["diff"].abs() < 1e-6).all()  # reconciled
    assert len(tables["pnl"]) == 1
    decided = json.loads(tables["decisions"]["target_weights"].iloc[0])
    assert decided == pytest.approx(list(result.target_weights.values()))


def test_rerun_of_same_decision_places_no_second_order(env):
    first = cycle(env)
    second = cycle(env)  # e.g. cron retried the same minute: same decision bar, same client ids
    fake = env["fake"]
    ids = {o.client_order_id for o in first.orders + second.orders}
    assert len(fake.orders) == len(ids)  # one order per client id, whatever was re-planned
    for cid in ids:
        assert len(fake.orders_for(cid)) == 1


def test_http_500_then_success_one_order_per_client_id(env):
    env["fake"].fail("POST", "/v2/orders", kind="status_after", status=500)
    env["fake"].fail("POST", "/v2/orders", kind="status", status=503)
    result = cycle(env)
    assert result.status == "traded"
    for order in result.orders:
        assert len(env["fake"].orders_for(order.client_order_id)) == 1
    assert len(env["fake"].orders) == len(result.orders)


def test_429_backoff_and_timeout(env):
    env["fake"].fail("GET", "/v2/account", kind="status", status=429, times=2)
    env["fake"].fail("POST", "/v2/orders", kind="delay", delay=1.0)  # created, reply too late
    result = cycle(env)
    assert result.status == "traded"
    assert len(env["fake"].orders) == len(result.orders)


def test_rejected_order_is_journaled(env):
    env["fake"].fill_mode = "reject"
    result = cycle(env)
    assert not result.submitted and result.orders
    orders = read_journal(env["home"])["orders"]
    assert set(orders["status"]) == {"rejected"}
    assert orders["message"].str.contains("insufficient buying power").all()


def test_partial_fill_then_reconciled_and_canceled(env):
    fake = env["fake"]
    fake.fill_mode = "partial"
    result = cycle(env)
    assert {o.status for o in result.submitted} == {"partially_filled"}
    events = read_journal(env["home"])["events"]
    assert not (events["kind"] == "reconcile").any()  # positions match the partial fills reported
    # next cycle: the open remainder of the earlier orders is canceled before new orders go out
    fake.fill_mode = "fill"
    fake.now += timedelta(minutes=15)
    cycle(env)
    first_ids = {o.client_order_id for o in result.orders}
    assert all(fake.orders_for(cid)[0].status == "canceled" for cid in first_ids)
    orders = read_journal(env["home"])["orders"].set_index("client_order_id")
    assert set(orders.loc[sorted(first_ids), "status"]) == {"canceled"}


def test_market_closed_no_orders(env):
    env["fake"].is_open = False
    result = cycle(env)
    assert result.status == "closed" and not result.orders
    assert env["fake"].requests.count(("POST", "/v2/orders")) == 0
    assert "market_closed" in set(read_journal(env["home"])["events"]["kind"])


def test_missing_bars_for_a_ticker_skipped(env):
    fake, bundle = env["fake"], env["bundle"]
    gone = bundle.tickers[1]
    # No bar in the cycle's whole bar window; it traded before, so it is not gone for good (test_paper_gone).
    start = fetch_start(fake.now, bundle.interval, int(bundle.feature_spec["lookback"]))
    fake.bars = fake.bars[~((fake.bars.ticker == gone) & (fake.bars.timestamp >= pd.Timestamp(start)))]
    fake.positions[gone] = 10.0
    result = cycle(env)
    assert result.skipped == [gone]
    assert gone not in {o.ticker for o in result.orders}
    assert fake.positions[gone] == 10.0  # held, not traded
    events = read_journal(env["home"])["events"]
    assert events["message"].str.contains(f"skipped {gone}").any()
    assert fake.asset_lookups == [gone] and result.gone == [] and result.attention == []


def test_kill_switch_blocks_orders(env, tmp_path):
    kill = tmp_path / "KILL"
    kill.touch()
    result = cycle(env, kill_switch=kill)
    assert result.status == "kill_switch" and result.orders
    assert env["fake"].requests.count(("POST", "/v2/orders")) == 0
    assert set(read_journal(env["home"])["orders"]["status"]) == {"blocked"}


def test_risk_limits(env):
    limits = RiskLimits(max_order_notional=5_000.0, max_weight=0.2, daily_loss_limit=None)
    result = cycle(env, limits=limits)
    assert max(result.target_weights.values()) <= 0.2 + 1e-9
    assert result.orders and all(o.qty * o.price <= 5_000.0 + 1e-6 for o in result.orders)
    for order in env["fake"].orders.values():
        assert order.qty * env["fake"].prices[order.symbol] <= 5_000.0 + 1e-6


def test_daily_loss_limit_halts(env):
    env["fake"].last_equity = 120_000.0  # equity 100k: down 16.7% on the day
    result = cycle(env, limits=RiskLimits(daily_loss_limit=0.05))
    assert result.status == "halted"
    assert env["fake"].requests.count(("POST", "/v2/orders")) == 0


def test_dry_run_submits_nothing(env):
    result = cycle(env, dry_run=True)
    assert result.status == "dry_run" and result.orders
    assert env["fake"].requests.count(("POST", "/v2/orders")) == 0
    assert set(read_journal(env["home"])["orders"]["status"]) == {"dry_run"}


def test_cli_once_and_keys_never_logged(env, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    env["fake"].fail("POST", "/v2/orders", kind="status", status=500)
    rc = main(
        [
            "--home",
            str(env["home"]),
            "-vv",
            "paper",
            "--bundle",
            str(env["bundle_dir"]),
            "--once",
            "--max-order-notional",
            "1000000",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "traded" in out.out
    assert env["fake"].orders
    raw = journal_path(env["home"]).read_bytes()
    for wal in journal_path(env["home"]).parent.glob("journal.sqlite*"):
        raw += wal.read_bytes()
    for secret in (KEY_ID, SECRET):
        assert secret.encode() not in raw
        assert secret not in out.out and secret not in out.err and secret not in caplog.text


def test_cli_missing_keys(env, monkeypatch, capsys):
    monkeypatch.delenv("APCA_API_SECRET_KEY")
    rc = main(["--home", str(env["home"]), "paper", "--bundle", str(env["bundle_dir"]), "--once"])
    err = capsys.readouterr().err
    assert rc == 2 and "APCA_API_SECRET_KEY" in err and "Traceback" not in err
    assert KEY_ID not in err
    assert env["fake"].requests == []


def test_cli_tampered_bundle_no_orders(env, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(env["bundle_dir"], bad)
    data = bytearray((bad / "policy.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    (bad / "policy.onnx").write_bytes(bytes(data))
    rc = main(["--home", str(env["home"]), "paper", "--bundle", str(bad), "--once"])
    err = capsys.readouterr().err
    assert rc == 2 and "sha256" in err
    assert env["fake"].requests == []  # refused before talking to the broker


def test_cli_live_url_refused(env, monkeypatch, capsys):
    monkeypatch.setenv("APCA_API_BASE_URL", "https://api.alpaca.markets")
    rc = main(["--home", str(env["home"]), "paper", "--bundle", str(env["bundle_dir"]), "--once"])
    assert rc == 2 and "paper" in capsys.readouterr().err
    assert env["fake"].requests == []


def test_bad_limits_one_line(env, capsys):
    rc = main(
        [
            "--home",
            str(env["home"]),
            "paper",
            "--bundle",
            str(env["bundle_dir"]),
            "--once",
            "--max-weight",
            "1.5",
        ]
    )
    assert rc == 2 and "--max-weight" in capsys.readouterr().err


def test_observation_matches_env_layout(env):
    """The observation the cycle builds equals the env's at the same bar (all-cash book)."""
    from app.paper.broker import BrokerAccount
    from app.paper.observation import build_decision

    run, bundle = env["run"], env["bundle"]
    market = run.splits.full
    t = int(np.flatnonzero(market.timestamps == np.datetime64(env["decision"].tz_convert(None)))[0])
    bars = env["fake"].bars
    decision = build_decision(
        bundle,
        bars[bars.timestamp <= env["decision"] + pd.Timedelta(minutes=1)],
        BrokerAccount(1e5, 1e5, 1e5, 1e5),
        {},
        env["fake"].now,
    )
    obs = decision.obs[0]
    assert obs[0] == 1.0 and obs[1] == pytest.approx(float(market.time_of_day[t]))
    per_asset = obs[2:].reshape(bundle.num_assets, 2 + bundle.num_features)
    assert np.abs(per_asset[:, 2:] - market.features[t].numpy()).max() < 1e-5
    assert (per_asset[:, 1] == market.tradable[t].numpy()).all()  # the tradable flags, as in the env


def test_loop_waits_for_the_open_and_one_interval(env):
    from app.paper.cycle import run_paper

    sleeps: list[float] = []
    env["fake"].is_open = False
    with Journal.for_home(env["home"]) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        options = PaperOptions(limits=RiskLimits(daily_loss_limit=None))
        results = run_paper(env["bundle"], broker, journal, options, sleep=sleeps.append, max_cycles=2)
    assert [r.status for r in results] == ["closed", "closed"]
    assert len(sleeps) == 1 and 60.0 <= sleeps[0] <= 3600.0  # until the next open, capped at an hour
    env["fake"].is_open = True
    sleeps.clear()
    with Journal.for_home(env["home"]) as journal:
        results = run_paper(env["bundle"], broker, journal, options, sleep=sleeps.append, max_cycles=2)
    assert [r.status for r in results] == ["traded", "traded"]
    assert sleeps and sleeps[0] <= env["bundle"].decision_interval * 60.0


def test_no_bars_at_all_no_orders(env):
    env["fake"].bars = env["fake"].bars.iloc[0:0]
    result = cycle(env)
    assert result.status == "no_data" and not result.orders
    assert env["fake"].requests.count(("POST", "/v2/orders")) == 0
    assert "missing_bars" in set(read_journal(env["home"])["events"]["kind"])


def test_orders_filled_a_moment_later_are_awaited(env):
    """Real market orders come back "accepted"; the cycle polls them (sells first) until filled."""
    fake, bundle = env["fake"], env["bundle"]
    fake.fill_mode = "delayed"
    fake.positions[bundle.tickers[0]] = 400.0  # something to sell, so both batches are exercised
    result = cycle(env)
    sides = [o.side for o in result.orders]
    assert "sell" in sides and "buy" in sides and sides == sorted(sides, reverse=True)  # sells first
    assert {o.status for o in result.submitted} == {"filled"}
    tables = read_journal(env["home"])
    assert set(tables["orders"]["status"]) == {"filled"}
    assert len(tables["fills"]) == len(result.orders)
    assert (tables["positions"]["diff"].abs() < 1e-6).all()


def test_read_journal_without_a_journal(tmp_path):
    tables = read_journal(tmp_path)
    assert set(tables) == {
        "decisions",
        "orders",
        "fills",
        "positions",
        "pnl",
        "events",
        "sessions",
        "opening_books",
        "daily",
    }
    assert all(frame.empty for frame in tables.values())
    assert {"equity", "cash", "day_pnl", "day_return"} <= set(tables["pnl"].columns)
    assert not (tmp_path / "paper").exists()  # reading never creates the trader's files


def test_journal_scrubs_key_values(tmp_path, monkeypatch):
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    with Journal.for_home(tmp_path) as journal:
        journal.event("error", f"upstream echoed {SECRET} back", "error")
    raw = b"".join(p.read_bytes() for p in (tmp_path / "paper").glob("journal.sqlite*"))
    assert SECRET.encode() not in raw
    assert read_journal(tmp_path)["events"]["message"].iloc[0] == "upstream echoed *** back"


def test_stale_bars_no_orders(env):
    fake = env["fake"]
    last = fake.bars["timestamp"].max()
    fake.now = (last + pd.Timedelta(hours=2)).to_pydatetime()  # open, but the feed stopped 2 h ago
    result = cycle(env)
    assert result.status == "no_data" and not result.orders
    assert fake.requests.count(("POST", "/v2/orders")) == 0
    assert read_journal(env["home"])["events"]["message"].str.contains("stale").any()


def test_ticker_without_bars_this_session_is_held(env):
    fake, bundle = env["fake"], env["bundle"]
    quiet = bundle.tickers[2]
    today = env["decision"].normalize()
    fake.bars = fake.bars[~((fake.bars.ticker == quiet) & (fake.bars.timestamp >= today))]
    fake.positions[quiet] = 7.0
    result = cycle(env)
    assert result.skipped == [quiet] and result.status == "traded"
    assert quiet not in {o.ticker for o in result.orders} and fake.positions[quiet] == 7.0
    assert {o.ticker for o in result.orders} <= set(bundle.tickers) - {quiet}


def test_max_weight_caps_every_position_at_the_fill_in_the_planner():
    """max_weight 0.1: the planned book holds no ticker above 10% at the planning price, whatever the
    policy asks; the cap comes before the sum rule, as in the env (the excess stays in cash)."""
    tickers = ("AAA", "BBB", "CCC", "DDD")
    prices = np.array([10.0, 50.0, 200.0, 33.0])
    qty = np.array([3_000.0, 0.0, 10.0, 0.0])  # AAA held at 30%: sold down to the cap
    cash = 100_000.0 - float(qty @ prices)
    value = cash + float(qty @ prices)
    decision = DecisionSnapshot(
        pd.Timestamp("2024-01-02 15:00", tz="UTC"), np.zeros((1, 1), np.float32), prices, qty, value, cash,
        qty * prices / value, (),
    )  # fmt: skip
    limits = RiskLimits(max_order_notional=1e9, max_weight=0.1, daily_loss_limit=None)
    target, notes = apply_limits(np.array([0.9, 0.05, 0.5, 0.4]), decision, tickers, limits)
    # Capped first (0.1, 0.05, 0.1, 0.1): the sum is 0.35, so nothing is scaled up.
    np.testing.assert_allclose(target, [0.1, 0.05, 0.1, 0.1])
    assert notes and "AAA" in notes[0]
    orders, _ = plan_orders(decision, target, tickers, "b" * 64, limits)
    after = qty.copy()
    for order in orders:
        after[tickers.index(order.ticker)] += order.qty if order.side == "buy" else -order.qty
    assert (after * prices / value <= 0.1 + 1e-9).all(), after * prices / value


def test_paper_max_weight_defaults_to_the_bundle(env):
    assert bundle_max_weight({"env_params": {"max_weight": 0.25}}) == 0.25
    assert bundle_max_weight({}) == 1.0  # bundles from before the cap
    assert bundle_max_weight(env["bundle"].manifest) == env["bundle"].manifest["env_params"]["max_weight"]
