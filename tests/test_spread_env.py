"""The env's half-spread per asset and time of day (``[env] spread = "estimate"``): every kernel (torch
step, native C kernel, backtest step, plain-Python reference) and the backtest's accounting price a
fill at the decision bar's estimate, floored at ``spread_bps``; ``spread = "fixed"`` ignores the
estimate; ``MarketData.half_spread`` reads no bar after the decision bar."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from helpers import flat_liquidity_market

from backtests.accounting import fill_prices
from data.toy import toy_market
from envs import trading
from envs.backtest_step import asset_prices, backtest_step
from envs.fast_step import step_kernel
from envs.kernels import native
from envs.reference import ReferenceEnv
from envs.trading import EnvParams

PRICE, VOLUME, DAILY_VOL, ADV, CASH = 100.0, 1000.0, 0.02, 1.0e4, 1.0e6
PARAMS = EnvParams(
    initial_cash=CASH,
    decision_interval=2,
    episode_len=10,
    spread="estimate",
    spread_bps=2.0,
    slippage_bps=1.0,
    max_participation=0.025,
    impact_coef=0.5,
    broker="flat",
    cost_rate=0.001,
)
# The planted estimate: asset 0 at 6 bp (above the 2 bp floor), asset 1 at 0.5 bp (under it).
PLANTED = (6e-4, 0.5e-4)


@pytest.fixture(scope="module")
def spread_market():
    """Two assets at a flat $100, 1000 shares a bar, known liquidity and a planted half-spread."""
    return flat_liquidity_market(
        PRICE, VOLUME, DAILY_VOL, ADV, half_spread=torch.tensor(PLANTED).expand(40, 2).contiguous()
    )


def _cash_by_hand(params: EnvParams, shares: float, half: float) -> float:
    """Cash after buying ``shares`` of a $100 asset at half-spread ``half`` (docs/env.md)."""
    frac = params.slippage_bps / 1e4 + half + params.impact_coef * DAILY_VOL * math.sqrt(shares / ADV)
    return CASH - shares * PRICE * (1 + frac) * (1 + params.cost_rate)


def _cash(spread_market, params, action) -> dict[str, float]:
    """Each kernel's cash after one decision."""
    state, _ = trading.reset(spread_market, params, 1, start=0)
    outs = {"eager": float(trading.step(spread_market, params, state, action).state.cash[0])}
    outs["backtest"] = float(
        backtest_step(spread_market, params, state, action, asset_prices(spread_market, params)).state.cash[0]
    )
    ref = ReferenceEnv(spread_market, params, 0, int(state.rng[0]))
    ref.step(action[0].tolist())
    outs["reference"] = ref.cash
    if native.compiler() is not None and params.precision == "float32":
        assert step_kernel(spread_market, params, state, True) == "native"
        outs["native"] = float(trading.step(spread_market, params, state, action, fast=True).state.cash[0])
    return outs


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("asset, half", [(0, PLANTED[0]), (1, 2e-4)])
def test_a_fill_pays_the_estimate_above_the_floor_and_the_floor_below_it(
    spread_market, precision, asset, half
):
    params = dataclasses.replace(PARAMS, precision=precision)
    action = torch.zeros(1, 2)
    action[0, asset] = 1.0  # 10_000 shares wanted, capped at 25
    want = _cash_by_hand(params, 25.0, half)
    # Asset 0: $1.75 of slippage + half-spread (7 bp of $2500) and $1.25 of impact.
    for name, got in _cash(spread_market, params, action).items():
        assert got == pytest.approx(want, abs=2e-3), (name, asset)


def test_the_backtest_accounting_prices_at_the_same_half_spread(spread_market):
    params = dataclasses.replace(PARAMS, precision="float64", trade_info=True)
    state, _ = trading.reset(spread_market, params, 1, start=0)
    out = trading.step(spread_market, params, state, torch.tensor([[0.5, 0.5]]))
    traded = out.info["shares_traded"].to(torch.float64).unsqueeze(0)  # (K=1, N=1, A)
    accounted = fill_prices(spread_market, params, traded, 1)[0]
    torch.testing.assert_close(accounted, out.info["fill_price"].to(torch.float64), rtol=1e-6, atol=0)
    assert float(accounted[0, 0]) > float(accounted[0, 1])  # 6 bp against the 2 bp floor


def test_fixed_mode_ignores_the_estimate(spread_market):
    """``spread = "fixed"``: every fill pays ``spread_bps``, whatever ``half_spread`` holds; with an
    estimate under the floor everywhere, ``"estimate"`` fills the same."""
    action = torch.tensor([[0.5, 0.5]])
    fixed = dataclasses.replace(PARAMS, spread="fixed")
    wide = dataclasses.replace(spread_market, half_spread=torch.full_like(spread_market.close, 0.01))
    narrow = dataclasses.replace(spread_market, half_spread=torch.full_like(spread_market.close, 1e-6))
    base = _cash(spread_market, fixed, action)
    assert base == _cash(wide, fixed, action)  # exactly
    for name, got in _cash(narrow, PARAMS, action).items():
        assert got == pytest.approx(base[name], rel=1e-12), name
    assert base["eager"] == pytest.approx(2 * _cash_by_hand(fixed, 25.0, 2e-4) - CASH, abs=2e-3)


def test_the_estimate_at_a_decision_bar_reads_no_later_bar():
    spread_market = toy_market(num_steps=40 * 8, num_assets=3, num_features=2, bars_per_session=40, seed=5)
    cut = 5 * 40 + 17
    high, low, close = spread_market.high.clone(), spread_market.low.clone(), spread_market.close.clone()
    high[cut + 1 :] *= 1.01
    low[cut + 1 :] *= 0.99
    close[cut + 1 :] *= 1.002
    changed = dataclasses.replace(spread_market, high=high, low=low, close=close, half_spread=None)
    assert torch.equal(changed.half_spread[: cut + 1], spread_market.half_spread[: cut + 1])
    assert not torch.equal(changed.half_spread, spread_market.half_spread)
    # Sliced with the market, as the other trailing estimates are.
    assert torch.equal(spread_market.slice(40, 80).half_spread, spread_market.half_spread[40:80])
