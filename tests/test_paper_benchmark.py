"""``paper --champion`` before any champion qualifies: the account holds the benchmark (``[paper]
before_champion = "benchmark"``, the default) or cash.

Against the local Alpaca stand-in (tests/alpaca_fake.py) over real HTTP: with no champion promoted,
the first cycle buys equal weight of the universe through the champions' order path, later cycles,
sessions and restarts buy nothing more; a promoted champion then trades from those holdings and the
books reconcile. With "cash" nothing is ordered.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from alpaca_fake import FakeAlpaca, point_at
from test_paper_champion import (  # noqa: F401  (bundles: a fixture used by name)
    FAST,
    SESSIONS,
    at,
    bundles,
    events,
    fast_source,
    promote,
    trade_session,
)
from test_paper_support import DECISION_INTERVAL

from app.cli import main
from app.config import Config, parse_config, write_config
from app.nightly.champions import current_champion
from app.paper.alpaca_broker import AlpacaBroker
from app.paper.benchmark import benchmark_bundle, benchmark_id, is_benchmark
from app.paper.books import check_books
from app.paper.champion import ChampionSource
from app.paper.heartbeat import read_heartbeat
from app.paper.journal import Journal, read_journal
from app.workflows.paper import paper_benchmark
from data.errors import ConfigError

ONCE = ["--fill-timeout", "1", "--max-order-notional", "1e9", "--daily-loss-limit", "0.5"]


@pytest.fixture
def unpromoted(bundles, tmp_path, monkeypatch):  # noqa: F811
    """The fake Alpaca at 15:00 UTC on the first session, keys in the environment, NO champion."""
    with FakeAlpaca(cash=100_000.0, bars=bundles.bars, slippage_bps=5.0) as fake:
        fake.set_time(at(SESSIONS[0]))
        point_at(fake, monkeypatch)
        manifest = json.loads((bundles.a / "manifest.json").read_text())
        bench = benchmark_bundle(manifest["tickers"], manifest["interval"], manifest["env_params"])
        home = tmp_path / "home"
        yield type(
            "M", (), {"fake": fake, "home": home, "bench": bench, "manifest": manifest, **vars(bundles)}
        )


def source_with(m, benchmark) -> ChampionSource:
    return ChampionSource(
        m.home,
        pointer=current_champion,
        registry_timeout=0.05,
        attempts=2,
        retry_wait=0.01,
        benchmark=benchmark,
    )


def assert_books_reconcile(m) -> None:
    """Every broker order journaled once with its fill, and the journal's books match the broker's."""
    orders = read_journal(m.home)["orders"].set_index("client_order_id")
    assert (~orders["status"].isin(["blocked", "not_sent"])).sum() == len(m.fake.orders)
    for o in m.fake.orders.values():
        assert orders.loc[o.client_order_id, "filled_qty"] == pytest.approx(o.filled_qty, abs=1e-9)
    with Journal.for_home(m.home) as journal:
        record = check_books(AlpacaBroker(retry=FAST, sleep=lambda s: None), journal, when="test")
    assert record.matched, record.message


def test_no_champion_holds_the_benchmark_then_the_champion_trades_from_it(unpromoted):
    m = unpromoted
    first = trade_session(m, source_with(m, m.bench), SESSIONS[0], cycles=2)
    buy, hold = first
    assert buy.bundle_id == hold.bundle_id == m.bench.bundle_id and is_benchmark(buy.bundle_id)
    assert buy.status == "traded" and {o.side for o in buy.submitted} == {"buy"}
    assert sorted(o.symbol for o in buy.submitted) == sorted(m.bench.tickers)  # one buy per ticker
    equity = m.fake.equity()
    for ticker in m.bench.tickers:  # equal weight (less the cash buffer and the costs)
        held = m.fake.positions[ticker] * m.fake.prices[ticker] / equity
        assert held == pytest.approx(1 / len(m.bench.tickers), abs=0.01)
    assert hold.status == "benchmark" and not hold.orders and not hold.submitted
    assert "holding the benchmark until a champion qualifies" in hold.messages[0]
    bought = len(m.fake.orders)
    tables = read_journal(m.home)
    orders = tables["orders"]
    assert set(orders["bundle_id"]) == {m.bench.bundle_id} and orders["model_price"].notna().all()
    assert len(tables["decisions"]) == 1  # one decision, the buy; holding decides nothing
    assert events(m.home, "no_champion").empty and len(events(m.home, "benchmark")) == 2
    assert read_heartbeat(m.home).status == "benchmark"

    # A restart (a fresh source and loop) on the next session: nothing more is bought.
    (again,) = trade_session(m, source_with(m, m.bench), SESSIONS[1], cycles=1)
    assert again.status == "benchmark" and len(m.fake.orders) == bought

    # A champion qualifies: its first decision trades from the benchmark's holdings.
    promote(m.home, "run-a", m.a)
    (champion,) = trade_session(m, source_with(m, m.bench), SESSIONS[2], cycles=1)
    assert champion.bundle_id == m.id_a and champion.status == "traded" and champion.submitted
    decision = read_journal(m.home)["decisions"].iloc[-1]
    assert decision["bundle_id"] == m.id_a
    assert min(json.loads(decision["current_weights"])) > 0.2  # it started from the benchmark's book
    assert len(events(m.home, "champion")) == 1 and events(m.home, "champion_refused").empty
    assert_books_reconcile(m)


def test_a_buy_the_kill_switch_blocked_is_decided_again(unpromoted):
    m = unpromoted
    kill = m.home / "paper" / "KILL"
    kill.parent.mkdir(parents=True, exist_ok=True)
    kill.touch()
    (blocked,) = trade_session(m, source_with(m, m.bench), SESSIONS[0], cycles=1)
    assert blocked.status == "kill_switch" and not m.fake.orders
    kill.unlink()
    buy, hold = trade_session(m, source_with(m, m.bench), SESSIONS[1], cycles=2)
    assert buy.status == "traded" and len(buy.submitted) == len(m.bench.tickers)
    assert hold.status == "benchmark" and len(m.fake.orders) == len(m.bench.tickers)
    assert_books_reconcile(m)


def test_cash_before_a_champion_orders_nothing(unpromoted):
    m = unpromoted
    results = trade_session(m, source_with(m, None), SESSIONS[0], cycles=2)
    assert [r.status for r in results] == ["no_champion", "no_champion"]
    assert not m.fake.orders and not m.fake.positions
    assert len(events(m.home, "no_champion")) == 2 and events(m.home, "benchmark").empty


def test_a_champion_already_promoted_is_traded_not_the_benchmark(unpromoted):
    m = unpromoted
    promote(m.home, "run-a", m.a)
    (first,) = trade_session(m, source_with(m, m.bench), SESSIONS[0], cycles=1)
    assert first.bundle_id == m.id_a and events(m.home, "benchmark").empty


def _config(tmp_path, before: str, tickers: list[str], interval: str):
    path = tmp_path / f"{before}.toml"
    cfg = Config().with_updates(
        data={"tickers": tickers, "interval": interval},
        env={"decision_interval": DECISION_INTERVAL},
        gate={"before_champion": before},
    )
    write_config(cfg, path)
    return path


def test_the_command_holds_the_benchmark_and_a_restart_buys_nothing_more(unpromoted, tmp_path):
    m = unpromoted
    config = _config(tmp_path, "benchmark", list(m.bench.tickers), m.manifest["interval"])
    argv = ["--home", str(m.home), "paper", "--champion", "--once", "--config", str(config), *ONCE]
    assert main(argv) == 0
    assert len(m.fake.orders) == len(m.bench.tickers)
    m.fake.set_time(at(SESSIONS[0], "16:00"))
    assert main(argv) == 0  # a restart: holds, orders nothing
    assert len(m.fake.orders) == len(m.bench.tickers)
    assert read_heartbeat(m.home).status == "benchmark"
    start = events(m.home, "start")["message"].iloc[-1]
    assert f"the benchmark, equal weight of {len(m.bench.tickers)} tickers" in start
    assert_books_reconcile(m)


def test_the_command_reads_the_nightly_schedules_config(unpromoted, tmp_path):
    """No --config: the config the nightly schedule records (the one the retrains read)."""
    from app.nightly.schedule import record_schedule

    m = unpromoted
    config = _config(tmp_path, "cash", list(m.bench.tickers), m.manifest["interval"])
    record_schedule(m.home, cron="0 2 * * 1-5", tz="America/New_York", config=config, fmt="crontab")
    assert main(["--home", str(m.home), "paper", "--champion", "--once", *ONCE]) == 1  # cash: no_champion
    assert (
        not m.fake.orders and "cash ([gate] before_champion)" in events(m.home, "start")["message"].iloc[-1]
    )


def test_the_command_with_cash_waits(unpromoted, tmp_path):
    m = unpromoted
    config = _config(tmp_path, "cash", list(m.bench.tickers), m.manifest["interval"])
    argv = ["--home", str(m.home), "paper", "--champion", "--once", "--config", str(config), *ONCE]
    assert main(argv) == 1  # no_champion: the cron job says so
    assert not m.fake.orders and read_heartbeat(m.home).status == "no_champion"


def test_the_benchmark_setting():
    bench, what = paper_benchmark(Config().with_updates(data={"tickers": ["B", "A", "B"]}))
    assert bench is not None and bench.tickers == ("B", "A") and "equal weight of 2 tickers" in what
    assert bench.bundle_id == benchmark_id(("B", "A")) != benchmark_id(("A", "B"))
    assert bench.act(np.zeros((1, bench.obs_dim))).tolist() == [[0.5, 0.5]]
    cash, what = paper_benchmark(
        Config().with_updates(data={"tickers": ["A"]}, gate={"before_champion": "cash"})
    )
    assert cash is None and "cash" in what
    none, what = paper_benchmark(Config())  # synthetic data, no tickers, no index: no universe known
    assert none is None and "no universe known" in what
    with pytest.raises(ConfigError):
        parse_config({"gate": {"before_champion": "bonds"}})
