"""Every baseline trades under the run's execution rules, the volume cap included: no baseline fill
takes more than ``max_participation`` of its fill bar's expected volume, in a backtest and in the
capacity curve; a capped buy-and-hold builds its book over several decisions, then holds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from backtests import baselines, capacity, engine, report
from backtests.baselines import is_baseline
from backtests.boosted import fit_boosted
from backtests.engine import BacktestResult
from backtests.linear import fit_linear
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.stitched import ACCOUNT, BenchmarkInCharge, run_stitched
from data.loader import synthetic_market
from envs.trading import EnvParams

INTERVAL = 15
CAP = 0.025


@pytest.fixture(scope="module")
def splits():
    # Thin volumes for a $1M account: the cap binds on the first buys (the baselines' fills were
    # several times the cap before it applied to them).
    return synthetic_market(
        num_tickers=12, num_sessions=12, seed=0, signal=1.0, train_frac=0.5, valid_frac=0.25
    )


@pytest.fixture(scope="module")
def rankers(splits):
    return {
        "linear": fit_linear(splits.train, splits.valid, INTERVAL),
        "boosted": fit_boosted(splits.train, splits.valid, INTERVAL),
    }


def _participation(result: BacktestResult, column: int) -> torch.Tensor:
    """Each fill's shares over its fill bar's expected volume ``(K, A)`` (0 where nothing filled)."""
    shares = result.shares[:, column].abs().to(torch.float64)
    volume = result.fill_volume.to(torch.float64)
    assert not bool(((shares > 0) & (volume <= 0)).any())  # no fill on a bar expected to trade nothing
    return torch.where(shares > 0, shares / volume.clamp(min=1e-300), 0.0)


def _check_capped(result: BacktestResult, cap: float) -> dict[str, float]:
    """The largest participation of every baseline column, each at most ``cap``."""
    peaks = {}
    for column, name in enumerate(result.names):
        base = name.split("@")[0].split("~")[0]
        if not is_baseline(base):
            continue
        peaks[name] = float(_participation(result, column).max())
        assert peaks[name] <= cap * (1 + 1e-6), (name, peaks[name])
    return peaks


def test_no_baseline_fill_exceeds_the_cap_in_a_backtest(splits, rankers) -> None:
    params = EnvParams(decision_interval=INTERVAL, max_participation=CAP)
    result = engine.run_backtest(splits.test, params, **rankers)
    assert {"buy_and_hold", "equal_weight", "cash", "linear", "boosted"} <= set(result.names)
    peaks = _check_capped(result, CAP)
    # The cap binds (the test is not vacuous): buy-and-hold's first buy and the rankers reach it.
    for name in ("buy_and_hold", "equal_weight", "linear"):
        assert peaks[name] == pytest.approx(CAP, rel=1e-4), name
    assert peaks["cash"] == 0.0
    # Without the cap the same baselines take several times the cap: the rule is what holds them.
    free = engine.run_backtest(splits.test, EnvParams(decision_interval=INTERVAL, max_participation=0.0))
    assert float(_participation(free, free.index("buy_and_hold")).max()) > 2 * CAP


def test_the_capacity_curves_baselines_obey_the_cap(splits, rankers) -> None:
    params = EnvParams(decision_interval=INTERVAL, max_participation=CAP)
    sizes = capacity.run_capacity(splits.test, params, {}, levels=(1e4, 1e6, 1e8), **rankers)
    names = set(sizes.names)
    for name in capacity.CAPACITY_BASELINES:
        at_cost = capacity.cost_name(engine.capacity_name(name, params.initial_cash), 1.0)
        assert {f"{name}@10000", f"{name}@1e+08", at_cost} <= names
    peaks = _check_capped(sizes, CAP)
    assert peaks["buy_and_hold@1e+08"] == pytest.approx(CAP, rel=1e-4)
    assert peaks["buy_and_hold@10000"] < CAP  # a small account never meets the cap


def test_a_capped_buy_and_hold_builds_its_book_then_holds(splits) -> None:
    market = splits.test
    result = engine.run_backtest(
        market, EnvParams(decision_interval=INTERVAL, max_participation=CAP), baselines=("buy_and_hold",)
    )
    col = result.index("buy_and_hold")
    traded = (result.shares[:, col].abs().sum(dim=-1) > 0).numpy()
    invested = result.weights[:, col].sum(dim=-1).numpy()
    build = int(np.flatnonzero(traded).max()) + 1  # decisions that traded: the build, in a row
    assert build > 1 and traded[:build].all() and not traded[build:].any()
    assert invested[0] < 0.9  # the cap cut the first buy
    # Built: at most BUILT_CASH of the value left in cash, then only the prices move the weights.
    assert invested[build - 1] >= 1 - baselines.BUILT_CASH
    assert float(result.turnover[build:, col].abs().sum()) == 0.0
    # The holding marks computed at once are the env's own zero-order steps.
    params = engine._long_horizon(
        EnvParams(decision_interval=INTERVAL, max_participation=CAP), result.num_steps
    )
    static = baselines.static_weights(market, ("buy_and_hold",))
    fast = baselines.run_static(market, params, static, result.num_steps, 0)
    slow = baselines.run_static(market, params, static, result.num_steps, 0, through_env=True)
    torch.testing.assert_close(fast.equity, slow.equity, rtol=1e-12, atol=1e-6)
    torch.testing.assert_close(fast.shares, slow.shares)
    # An account the cap does not bind buys in one decision, as before the cap applied.
    small = engine.run_backtest(
        market,
        EnvParams(decision_interval=INTERVAL, max_participation=CAP, initial_cash=1e4),
        baselines=("buy_and_hold",),
    )
    assert int((small.shares[:, 0].abs().sum(dim=-1) > 0).sum()) == 1


def test_the_walkforward_benchmark_is_the_capped_buy_and_hold(splits) -> None:
    market = splits.test
    params = EnvParams(decision_interval=INTERVAL, max_participation=CAP)
    bench = BenchmarkInCharge(market.num_assets, market.num_features)
    result = run_stitched(market, params, [bench], [0])
    account, hold = result.index(ACCOUNT), result.index("buy_and_hold")
    torch.testing.assert_close(result.equity[:, account], result.equity[:, hold], rtol=1e-9, atol=0.0)
    torch.testing.assert_close(result.shares[:, account], result.shares[:, hold])
    assert float(_participation(result, account).max()) <= CAP * (1 + 1e-6)
    # A second replay with the same benchmark object decides the same (a fresh account forgets).
    again = run_stitched(market, params, [bench], [0])
    torch.testing.assert_close(again.equity[:, again.index(ACCOUNT)], result.equity[:, account])


def test_the_verdicts_benchmark_is_defined_while_buy_and_hold_builds(splits) -> None:
    market = splits.test
    params = EnvParams(decision_interval=INTERVAL, max_participation=CAP)
    half = lambda obs: torch.full((obs.shape[0], market.num_assets), 0.5 / market.num_assets)  # noqa: E731
    result = engine.run_backtest(market, params, {"champion": half})
    doc = report.metrics_document(
        result, window="test", benchmark="buy_and_hold", seed=0, annualization=TRADING_DAYS_PER_YEAR
    )
    excess = doc.oos_test.excess["buy_and_hold"]
    assert all(math.isfinite(v) for v in (excess.beta, excess.alpha_per_day, excess.mean_per_day))
    assert doc.strategies["buy_and_hold"].sharpe_ratio is not None
