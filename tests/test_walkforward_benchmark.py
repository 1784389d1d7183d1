"""The walk-forward's account before its first champion qualifies (``[gate] before_champion``):
the benchmark (``backtests.stitched.BenchmarkInCharge``) is the backtest's buy-and-hold, bought
through the same fills (at every decision until the volume cap lets the book be built) and held without
churn, then handed to the first champion as holdings; or cash.
"""

from __future__ import annotations

import pytest
import torch

from app.config import parse_config
from app.walkforward.account import StitchedAccount
from app.walkforward.plan import plan_folds
from app.walkforward.run import bars_only
from backtests.capacity import CAPITAL_LEVELS
from backtests.engine import capacity_name
from backtests.stitched import ACCOUNT, BenchmarkInCharge, run_stitched, run_stitched_capacity
from data.loader import synthetic_market
from envs.trading import EnvParams

pytestmark = pytest.mark.usefixtures("one_thread")

# A null market (no planted signal): nothing for a champion to learn.
SYNTHETIC_MARKET = {"num_tickers": 4, "num_sessions": 6, "seed": 5, "signal": 0.0}  # the `market` fixture


def _benchmark(market) -> BenchmarkInCharge:
    return BenchmarkInCharge(market.num_assets, market.num_features)


def _column(result, name: str) -> torch.Tensor:
    return result.equity[:, result.index(name)]


def _build(result, column: int) -> int:
    """How many decisions the column's buy took: the decisions that traded, all at the start."""
    traded = (result.trades[:, column] != 0).any(dim=-1)
    build = int(traded.nonzero().max()) + 1
    assert bool(traded[:build].all()) and not bool(traded[build:].any())
    return build


# The champion's action mode and risk limits do not bind the benchmark: it fills as buy-and-hold does.
@pytest.mark.parametrize(
    "params",
    [
        EnvParams(decision_interval=15),
        EnvParams(decision_interval=15, action_mode="shares", max_weight=0.1, max_participation=1e-4),
    ],
    ids=["weights", "shares-capped"],
)
def test_with_no_champion_the_account_is_buy_and_hold_as_the_cap_lets_it(market, params):
    result = run_stitched(market, params, [_benchmark(market)], [0])
    account, bench = _column(result, ACCOUNT), _column(result, "buy_and_hold")
    assert torch.allclose(account, bench, rtol=1e-12)
    col = result.index(ACCOUNT)
    assert torch.equal(result.shares[:, col], result.shares[:, result.index("buy_and_hold")])
    # Entry costs while the book is built (the volume cap cuts each buy), then no trade at all.
    build = _build(result, col)
    assert float(result.costs[0, col]) > 0.0 and float(result.costs[build:, col].sum()) == 0.0
    # This thin market's volumes hold a $1M account's buys under the cap: more invested each decision.
    invested = result.weights[:, col].sum(dim=-1)
    assert build > 1 and float(invested[0]) < float(invested[build - 1])


def test_the_first_champion_trades_from_the_benchmarks_holdings(market):
    params = EnvParams(decision_interval=15, max_participation=0.0)  # its sells in one fill
    sells_all = lambda obs: torch.zeros(obs.shape[0], market.num_assets)  # noqa: E731
    switch = 3 * 390  # the first bar of session 3
    result = run_stitched(market, params, [_benchmark(market), sells_all], [0, switch])
    account, bench = _column(result, ACCOUNT), _column(result, "buy_and_hold")
    k = switch // params.decision_interval
    assert torch.allclose(account[:k], bench[:k], rtol=1e-12)
    col = result.index(ACCOUNT)
    # Its first decision sells exactly what the benchmark bought; the account is in cash from then on.
    assert torch.allclose(result.shares[k, col], -result.shares[0, col])
    assert bool((result.shares[k + 1 :, col] == 0).all())
    assert float(result.weights[k, col].abs().sum()) == 0.0
    assert bool((account[k + 1 :] == account[k]).all())


def test_the_capacity_pass_replays_the_benchmark_at_every_size(market):
    params = EnvParams(decision_interval=15)
    levels = CAPITAL_LEVELS[:3]
    result = run_stitched_capacity(market, params, [_benchmark(market)], [0], levels=levels)
    for level in levels:
        account = _column(result, capacity_name(ACCOUNT, level))
        bench = _column(result, capacity_name("buy_and_hold", level))
        assert torch.allclose(account, bench, rtol=1e-9)


# --- the account of a walk-forward ----------------------------------------------------------------

LAYOUT = {"train_sessions": 3, "valid_sessions": 10, "gate_sessions": 0, "step_sessions": 3}


@pytest.fixture(scope="module")
def folds():
    full = synthetic_market(num_tickers=3, num_sessions=24, seed=2, signal=0.0).full
    full = bars_only(full)
    return full, plan_folds(full, parse_config({"walkforward": LAYOUT}).walkforward)


def _account(folds, before_champion: str) -> StitchedAccount:
    full, plans = folds
    account = StitchedAccount(full, plans, EnvParams(), torch.device("cpu"), before_champion=before_champion)
    for plan in plans:
        account.add(plan, None)
    return account


def test_a_walkforward_with_no_qualified_champion_tracks_buy_and_hold(folds):
    account = _account(folds, "benchmark")
    assert len(folds[1]) >= 3 and account.labels[0] == "benchmark (no qualified champion)"
    result = account.run()
    mine, bench = _column(result, ACCOUNT), _column(result, "buy_and_hold")
    # Over several folds: bought from the span's first decision, never re-bought at a fold's start.
    assert torch.allclose(mine, bench, rtol=1e-12)
    assert _build(result, result.index(ACCOUNT)) < result.num_steps // 3
    capacity = account.capacity()
    for level in CAPITAL_LEVELS:
        assert torch.allclose(
            _column(capacity, capacity_name(ACCOUNT, level)),
            _column(capacity, capacity_name("buy_and_hold", level)),
            rtol=1e-9,
        )


def test_with_before_champion_cash_the_account_stays_flat(folds):
    account = _account(folds, "cash")
    assert account.labels[0] == "cash (no qualified champion)"
    result = account.run()
    assert bool((_column(result, ACCOUNT) == result.initial_value).all())
    assert float(result.costs[:, result.index(ACCOUNT)].sum()) == 0.0


def test_an_unknown_holding_is_refused(folds):
    full, plans = folds
    with pytest.raises(ValueError, match="before_champion"):
        StitchedAccount(full, plans, EnvParams(), torch.device("cpu"), before_champion="index")
