"""Paper trading's pre-trade estimate is the env's execution model: for the same bars and order, the
fill price `app.paper.fill_model` predicts is the price the env fills at, and an order the backtest
would not place (under `min_order_notional`) is not placed in paper trading either."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from app.paper.fill_model import ExecutionCosts, impact_scales, model_price
from app.paper.options import PaperOptions
from app.paper.orders import DecisionSnapshot, RiskLimits, plan_orders
from data.toy import toy_market
from envs import trading
from envs.execution import impact_table
from envs.trading import EnvParams

PARAMS = EnvParams(
    initial_cash=1.0e6,
    decision_interval=5,
    episode_len=10,
    spread="fixed",
    spread_bps=2.0,
    slippage_bps=1.0,
    max_participation=0.0,  # the paper trader sends the whole order: the env fills it whole too
    impact_coef=0.5,
    min_order_notional=1.0,
    cost_rate=0.0,
    precision="float64",
    trade_info=True,
)
COSTS = ExecutionCosts(
    slippage_bps=PARAMS.slippage_bps, spread_bps=PARAMS.spread_bps, impact_coef=PARAMS.impact_coef
)
DECISION = 500  # a decision bar of the second session: a session of liquidity history behind it


@pytest.fixture(scope="module")
def thin_market():
    """Two sessions of three assets, the third traded 10,000 times thinner: there impact matters."""
    base = toy_market(num_steps=2 * 390, num_assets=3, num_features=2, seed=3)
    volume = base.volume * torch.tensor([1.0, 1e-2, 1e-4])
    return dataclasses.replace(base, volume=volume, daily_vol=None, adv=None)


def test_the_impact_scale_is_the_envs(thin_market):
    """Paper computes the scale from the fetched bars up to the decision bar (float64); the env reads
    its table at the decision bar: the same number."""
    bars = slice(0, DECISION + 1)
    paper = impact_scales(
        thin_market.close[bars].double().numpy(),
        thin_market.volume[bars].double().numpy(),
        thin_market.session_id[bars].numpy(),
    )
    np.testing.assert_allclose(paper, impact_table(thin_market)[DECISION].double().numpy(), rtol=1e-5)


def test_the_predicted_price_is_the_envs_fill_price(thin_market):
    state, _ = trading.reset(thin_market, PARAMS, 1, start=DECISION)
    # Sell what asset 0 holds, buy assets 1 and 2 (asset 2 a large order: impact is visible).
    held = torch.tensor([[4_000.0, 0.0, 0.0]], dtype=torch.float64)
    state = dataclasses.replace(
        state, shares=held, cash=state.cash - float(held[0, 0] * thin_market.close[DECISION, 0])
    )
    out = trading.step(thin_market, PARAMS, state, torch.tensor([[0.0, 0.1, 0.9]]))
    traded = out.info["shares_traded"][0]
    fill = out.info["fill_price"][0]
    assert bool((traded[0] < 0) & (traded[1:] > 0).all())
    bars = slice(0, DECISION + 1)
    scales = impact_scales(
        thin_market.close[bars].double().numpy(),
        thin_market.volume[bars].double().numpy(),
        thin_market.session_id[bars].numpy(),
    )
    open_fill = thin_market.open[DECISION + 1].double()
    for a in range(3):
        side = "buy" if traded[a] > 0 else "sell"
        predicted = model_price(COSTS, float(open_fill[a]), side, abs(float(traded[a])), float(scales[a]))
        assert predicted == pytest.approx(float(fill[a]), rel=1e-7), a
    # Beyond the half-spread: the large order pays a visible impact, and the model predicts it.
    half = (PARAMS.slippage_bps + PARAMS.spread_bps) * 1e-4
    assert float(fill[2] / open_fill[2] - 1.0) > 2 * half


def _decision(qty: float, price: float, cash: float, impact: float) -> DecisionSnapshot:
    value = cash + qty * price
    return DecisionSnapshot(
        pd.Timestamp("2024-01-03 15:00", tz="UTC"),
        np.zeros((1, 1), np.float32),
        np.array([price]),
        np.array([qty]),
        value,
        cash,
        np.array([qty * price / value]),
        (),
        impact={"AAA": impact},
        costs=COSTS,
    )


def test_a_sell_whose_proceeds_are_under_the_minimum_is_not_placed_as_in_the_env(thin_market):
    """$1.0002 of shares at the decision price nets under $1 after the half-spread and impact: the
    env drops that sale, and so does the paper planner (it compares the proceeds, not the notional)."""
    price, impact = 100.0, 0.01
    limits = RiskLimits(daily_loss_limit=None)
    for qty, placed in ((0.010002, False), (0.0101, True)):
        orders, _ = plan_orders(
            _decision(qty, price, 1_000.0, impact), np.array([0.0]), ("AAA",), "b" * 64, limits
        )
        assert [o.side for o in orders] == (["sell"] if placed else []), qty
        # The env, same holding and price, the same impact scale: it keeps the dust.
        flat = torch.full_like(thin_market.close, price)
        env_market = dataclasses.replace(
            thin_market,
            open=flat,
            high=flat.clone(),
            low=flat.clone(),
            close=flat.clone(),
            daily_vol=torch.full_like(flat, impact),
            adv=torch.ones_like(flat),
        )
        state, _ = trading.reset(env_market, PARAMS, 1, start=DECISION)
        holding = torch.tensor([[qty, 0.0, 0.0]], dtype=torch.float64)
        state = dataclasses.replace(state, shares=holding)
        out = trading.step(env_market, PARAMS, state, torch.tensor([[0.0, 0.0, 0.0]]))
        sold = -float(out.info["shares_traded"][0, 0])
        assert sold == (pytest.approx(qty) if placed else 0.0), qty


def test_a_buy_under_the_minimum_is_not_placed():
    limits = RiskLimits(daily_loss_limit=None)
    # 0.4% of $200: an $0.80 buy.
    orders, _ = plan_orders(_decision(0.0, 50.0, 200.0, 0.0), np.array([0.004]), ("AAA",), "b" * 64, limits)
    assert orders == []
    orders, _ = plan_orders(_decision(0.0, 50.0, 200.0, 0.0), np.array([0.006]), ("AAA",), "b" * 64, limits)
    assert [(o.side, o.notional) for o in orders] == [("buy", pytest.approx(1.2))]


def test_paper_takes_the_bundles_minimum_order():
    options = PaperOptions(limits=RiskLimits(daily_loss_limit=None))
    assert options.for_bundle({"env_params": {"min_order_notional": 25.0}}).limits.min_order_notional == 25.0
    # Never under the broker's minimum ($1 for a fractional order), even for a frictionless bundle.
    assert options.for_bundle({"env_params": {"min_order_notional": 0.0}}).limits.min_order_notional == 1.0
    assert options.for_bundle({}).limits.min_order_notional == EnvParams.min_order_notional
    capped = PaperOptions(weight_cap_from_bundle=True).for_bundle(
        {"env_params": {"max_weight": 0.2, "min_order_notional": 5.0}}
    )
    assert (capped.limits.max_weight, capped.limits.min_order_notional) == (0.2, 5.0)
