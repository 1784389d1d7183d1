"""Paper trading's pre-trade estimate is the env's execution model: for the same bars and order, the
fill price `app.paper.fill_model` predicts is the price the env fills at, and an order the backtest
would not place (under `min_order_notional`) is not placed in paper trading either."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from app.paper.fill_model import (
    ExecutionCosts,
    execution_costs,
    fill_inputs,
    impact_scales,
    model_fill,
    model_price,
    worked_orders,
)
from app.paper.options import PaperOptions
from app.paper.orders import DecisionSnapshot, RiskLimits, plan_orders
from data.loader import MarketSplits, with_volume_scale
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


def _paper_inputs(market, params: EnvParams, t: int, volume_scale: float = 1.0):
    """Paper's fill inputs at decision bar ``t`` from the market's bars at or before ``t`` only (a
    bundle trained with ``[data] volume_scale``)."""
    bars = {
        name: getattr(market, name)[: t + 1].double().numpy() for name in ("close", "high", "low", "volume")
    }
    manifest = {"env_params": dataclasses.asdict(params), "data": {"volume_scale": volume_scale}}
    costs = execution_costs(manifest)
    assert costs.volume_scale == volume_scale
    fill_session = int(market.session_id[t + 1])
    inputs = fill_inputs(costs, bars, market.session_id[: t + 1].numpy(), fill_session, 390)
    return costs, inputs


@pytest.mark.parametrize("volume_scale", [1.0, 4.0])
def test_paper_and_the_env_fill_the_same_order_the_same_on_the_same_bars(volume_scale):
    """Two decisions buying a thin asset past its volume cap, a sale of a liquid one: from the bars
    alone (its own windows, the spread estimate, the cap, the worked order), paper's fill of each
    order is the env's, quantity and price; with ``[data] volume_scale`` too (the env's market
    scaled by the loader's own function, paper's bars as fetched)."""
    base = toy_market(num_steps=22 * 390, num_assets=3, num_features=2, seed=4)
    # Asset 0's closes bounce 8 bp either side (a quoted spread the estimator sees in the bars).
    side = torch.where(
        torch.rand(base.close.shape, generator=torch.Generator().manual_seed(5)) < 0.5, 1.0, -1.0
    )
    bounce = torch.ones_like(base.close)
    bounce[:, 0] += 8e-4 * side[:, 0]
    close = base.close * bounce
    market = dataclasses.replace(
        base,
        close=close,
        high=torch.maximum(base.high, close),
        low=torch.minimum(base.low, close),
        volume=base.volume * torch.tensor([1.0, 1.0, 2e-4]),
        daily_vol=None,
        adv=None,
        expected_volume=None,
        half_spread=None,
    )
    unscaled = market
    split = MarketSplits(
        market, market.slice(0, 390), market.slice(390, 780), market.slice(780, market.num_steps)
    )
    market = with_volume_scale(split, volume_scale).full
    params = EnvParams(
        initial_cash=1.0e6, decision_interval=5, episode_len=10, precision="float64", trade_info=True
    )
    assert params.spread == "estimate" and params.max_participation > 0
    t0 = 21 * 390 + 100  # 21 sessions of history behind it: the full 20-session windows
    state, _ = trading.reset(market, params, 1, start=t0)
    held = torch.tensor([[3_000.0, 0.0, 0.0]], dtype=torch.float64)
    state = dataclasses.replace(state, shares=held, cash=state.cash - float(held[0, 0] * market.close[t0, 0]))
    action = torch.tensor([[0.0, 0.05, 0.5]])
    decisions, fills, checked = [], {}, 0
    for t in (t0, t0 + params.decision_interval):
        px_open = market.open[t + 1].double()
        value_open = float(state.cash[0]) + float((state.shares[0] * px_open).sum())
        wanted = action[0].double() * value_open / px_open - state.shares[0]  # the env's order, uncapped
        out = trading.step(market, params, state, action)
        traded, fill = out.info["shares_traded"][0], out.info["fill_price"][0]
        costs, inputs = _paper_inputs(market, params, t, volume_scale)
        if volume_scale != 1.0:  # the cap and the impact move with the scale; the bars paper reads do not
            _, plain = _paper_inputs(unscaled, params, t)
            np.testing.assert_allclose(inputs.cap, plain.cap * volume_scale, rtol=1e-12)
            np.testing.assert_allclose(inputs.impact, plain.impact / volume_scale**0.5, rtol=1e-6)
        memory = worked_orders(decisions, fills, costs.impact_memory)
        for a, ticker in enumerate(market.tickers):
            if abs(float(wanted[a])) * float(px_open[a]) < params.min_order_notional:
                assert float(traded[a]) == 0.0  # not placed, by paper's planner either (too_small)
                continue
            side = "buy" if wanted[a] > 0 else "sell"
            qty, price = model_fill(
                costs, inputs, a, float(px_open[a]), side, abs(float(wanted[a])), memory.get(ticker, 0.0)
            )
            assert qty == pytest.approx(abs(float(traded[a])), rel=1e-6), (t, ticker)
            assert price == pytest.approx(float(fill[a]), rel=1e-7), (t, ticker)
            checked += 1
        decisions.append(str(t))
        fills[str(t)] = {tk: float(traded[a]) for a, tk in enumerate(market.tickers) if float(traded[a]) != 0}
        state = out.state
        # The thin asset's buy is capped at the bar's expected volume, and a half-spread above the floor
        # is charged somewhere (the estimate is read, not the constant).
        assert float(traded[2]) < float(wanted[2]) * 0.5
    assert checked >= 4
    assert memory.get(market.tickers[2], 0.0) > 0  # the second buy of the thin asset added to the first
    assert float(inputs.half[0]) > 3 * (params.slippage_bps + params.spread_bps) * 1e-4


def test_the_planner_cuts_an_order_to_the_volume_cap():
    limits = RiskLimits(daily_loss_limit=None)
    decision = dataclasses.replace(_decision(0.0, 50.0, 10_000.0, 0.0), cap={"AAA": 12.5})
    orders, notes = plan_orders(decision, np.array([0.5]), ("AAA",), "b" * 64, limits, fractional=False)
    assert [(o.side, o.qty) for o in orders] == [("buy", 12.0)]  # 100 shares wanted, whole shares
    assert any("volume cap" in n for n in notes)
    held = dataclasses.replace(_decision(200.0, 50.0, 0.0, 0.0), cap={"AAA": 12.5})
    orders, _ = plan_orders(held, np.array([0.0]), ("AAA",), "b" * 64, limits)
    assert [(o.side, o.qty) for o in orders] == [("sell", 12.5)]
