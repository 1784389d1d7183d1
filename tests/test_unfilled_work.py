"""``[env] unfilled = "work"``: the part of an order the volume cap cut keeps filling on the bars after
the fill bar until the next decision, by hand on a flat work_market, in the torch step and the reference;
the native kernel and the backtest step refuse it with a one-line error."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from helpers import flat_liquidity_market

from data.errors import ConfigError
from envs import trading
from envs.backtest_step import asset_prices, backtest_step
from envs.kernels import native
from envs.reference import ReferenceEnv
from envs.trading import EnvParams

PRICE, VOLUME, DAILY_VOL, ADV, CASH = 100.0, 1000.0, 0.02, 1.0e4, 1.0e6
PARAMS = EnvParams(
    initial_cash=CASH,
    decision_interval=3,
    episode_len=10,
    spread="fixed",
    spread_bps=2.0,
    slippage_bps=1.0,
    max_participation=0.025,  # 25 shares a bar
    impact_coef=0.5,
    broker="flat",
    cost_rate=0.001,
    unfilled="work",
)


@pytest.fixture(scope="module")
def work_market():
    return flat_liquidity_market(PRICE, VOLUME, DAILY_VOL, ADV)


def _cash_by_hand(params: EnvParams, shares: float) -> float:
    """Cash after buying ``shares`` of the $100 asset as one order (the square-root law on the sum)."""
    half = (params.slippage_bps + params.spread_bps) * 1e-4
    impact = params.impact_coef * DAILY_VOL / math.sqrt(ADV) * PRICE * shares**1.5
    return CASH - (shares * PRICE * (1 + half) + impact) * (1 + params.cost_rate)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_the_cut_part_fills_on_each_later_bar_of_the_interval(work_market, precision):
    """10,000 shares wanted, 25 a bar: the fill bar and the two bars after it (k = 3) fill 75 shares,
    paying the impact of one 75-share order; with "drop", 25."""
    params = dataclasses.replace(PARAMS, precision=precision)
    action = torch.tensor([[1.0, 0.0]])
    state, _ = trading.reset(work_market, params, 1, start=0)
    eager = trading.step(work_market, params, state, action)
    ref = ReferenceEnv(work_market, params, 0, int(state.rng[0]))
    *_, info = ref.step(action[0].tolist())
    for name, traded, cash in (
        ("eager", eager.info["shares_traded"][0].tolist(), float(eager.state.cash[0])),
        ("reference", info["shares_traded"], ref.cash),
    ):
        assert traded == pytest.approx([75.0, 0.0], abs=1e-3), name
        assert cash == pytest.approx(_cash_by_hand(params, 75.0), abs=2e-3), name
    # The order's impact memory holds all 75 shares (the next decision decays it).
    assert float(eager.state.order[0, 0]) == pytest.approx(75.0, abs=1e-3)
    dropped = dataclasses.replace(params, unfilled="drop")
    out = trading.step(work_market, dropped, state, action)
    assert float(out.info["shares_traded"][0, 0]) == pytest.approx(25.0, abs=1e-4)
    assert float(out.state.cash[0]) == pytest.approx(_cash_by_hand(params, 25.0), abs=2e-3)


def test_an_untradable_bar_fills_nothing_of_the_remainder(work_market):
    tradable = work_market.tradable.clone()
    tradable[2, 0] = False  # the first bar after the fill bar
    gap = dataclasses.replace(work_market, tradable=tradable, listed=None)
    action = torch.tensor([[1.0, 0.0]])
    state, _ = trading.reset(gap, PARAMS, 1, start=0)
    eager = trading.step(gap, PARAMS, state, action)
    ref = ReferenceEnv(gap, PARAMS, 0, int(state.rng[0]))
    *_, info = ref.step(action[0].tolist())
    assert float(eager.info["shares_traded"][0, 0]) == pytest.approx(50.0, abs=1e-3)
    assert info["shares_traded"][0] == pytest.approx(50.0, abs=1e-3)
    assert float(eager.state.cash[0]) == pytest.approx(ref.cash, abs=2e-3)


def test_the_native_kernel_and_the_backtest_step_refuse_it(work_market):
    state, _ = trading.reset(work_market, PARAMS, 1, start=0)
    action = torch.tensor([[1.0, 0.0]])
    if native.compiler() is not None:
        with pytest.raises(ConfigError, match="unfilled"):
            trading.step(work_market, PARAMS, state, action, fast=True)
    with pytest.raises(ConfigError, match="unfilled"):
        backtest_step(work_market, PARAMS, state, action, asset_prices(work_market, PARAMS))
