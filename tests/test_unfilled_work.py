"""``[env] unfilled = "work"``: the part of an order the volume cap cut keeps filling on the bars after
the fill bar until the next decision, by hand on a flat work_market, in the torch step and the reference;
the backtest step fills as the env's step does; the native kernel leaves such steps to torch."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from helpers import flat_liquidity_market

from envs import trading
from envs.backtest_step import asset_prices, backtest_step
from envs.fast_step import step_kernel
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


def test_the_backtest_step_fills_as_the_env_step(work_market):
    """The same bars and orders through the backtest step and the env's step: the same fills bit for
    bit, over decisions that each leave a remainder (the known answer: 75 shares a decision)."""
    state, _ = trading.reset(work_market, PARAMS, 1, start=0)
    prices = asset_prices(work_market, PARAMS)
    env_state, bt_state, traded = state, state, []
    for action in ([1.0, 0.0], [1.0, 0.0], [0.0, 0.0]):
        action = torch.tensor([action])
        env = trading.step(work_market, PARAMS, env_state, action)
        bt = backtest_step(work_market, PARAMS, bt_state, action, prices)
        assert torch.equal(bt.shares_traded, env.info["shares_traded"])
        assert torch.equal(bt.traded_notional, env.info["traded_notional"])
        for name in ("t", "cash", "shares", "value", "order"):
            assert torch.equal(getattr(bt.state, name), getattr(env.state, name)), name
        env_state, bt_state = env.state, bt.state
        traded.append(float(bt.shares_traded[0, 0]))
    # 25 shares a bar, 3 bars a decision: 75 bought twice of the 10,000 wanted, then 75 of 150 sold
    assert traded == pytest.approx([75.0, 75.0, -75.0], abs=1e-3)
    first = backtest_step(work_market, PARAMS, state, torch.tensor([[1.0, 0.0]]), prices)
    assert float(first.shares_traded[0, 0]) == pytest.approx(75.0, abs=1e-3)
    assert float(first.state.cash[0]) == pytest.approx(_cash_by_hand(PARAMS, 75.0), abs=2e-3)


def test_the_fast_step_leaves_it_to_torch(work_market):
    """The native kernel does not work a remainder: a fast step with "work" runs torch's step."""
    state, _ = trading.reset(work_market, PARAMS, 1, start=0)
    action = torch.tensor([[1.0, 0.0]])
    assert step_kernel(work_market, PARAMS, state, fast=True, fallback_to_compile=False) == "eager"
    fast = trading.step(work_market, PARAMS, state, action, fast=True, fallback_to_compile=False)
    assert float(fast.info["shares_traded"][0, 0]) == pytest.approx(75.0, abs=1e-3)
    drop = dataclasses.replace(PARAMS, unfilled="drop")
    if native.library() is not None:
        assert step_kernel(work_market, drop, state, fast=True, fallback_to_compile=False) == "native"
