"""The broker's fees, computed by hand: at Alpaca (the default profile) a buy pays no commission and
a sell pays the SEC Section 31 fee on its proceeds plus the FINRA TAF per share sold, capped per
trade, each rounded up to the cent per order; the flat profile charges ``cost_rate`` on both sides. Every kernel of the env step (eager,
native C, backtest step, plain-Python reference) charges the same."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from data.toy import toy_market
from envs import trading
from envs.backtest_step import asset_prices, backtest_step
from envs.execution import FRICTIONLESS
from envs.fast_step import step_kernel
from envs.kernels import native
from envs.reference import ReferenceEnv
from envs.trading import EnvParams

PRICE = 100.0
CASH = 2.0e7
# Slippage 0 and no execution model: every fill is at exactly $100, so the fees are all that moves cash.
PARAMS = EnvParams(initial_cash=CASH, decision_interval=2, episode_len=10, slippage_bps=0.0, **FRICTIONLESS)


@pytest.fixture(scope="module")
def fee_flat_market():
    base = toy_market(num_steps=40, num_assets=2, num_features=2, bars_per_session=20, seed=0)
    flat = torch.full_like(base.close, PRICE)
    return dataclasses.replace(base, open=flat, high=flat.clone(), low=flat.clone(), close=flat.clone())


def _kernels(market, params, state, action):
    """``{kernel: (cash, cost)}`` of one step from ``state``."""
    eager = trading.step(market, params, state, action)
    outs = {"eager": (float(eager.state.cash[0]), float(eager.info["cost"][0]))}
    bt = backtest_step(market, params, state, action, asset_prices(market, params))
    outs["backtest"] = (float(bt.state.cash[0]), None)
    if native.compiler() is not None and params.precision == "float32":
        assert step_kernel(market, params, state, True) == "native"
        fast = trading.step(market, params, state, action, fast=True)
        outs["native"] = (float(fast.state.cash[0]), float(fast.info["cost"][0]))
    return eager.state, outs


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_an_alpaca_buy_pays_no_commission_and_a_sell_pays_the_sec_fee_and_the_capped_taf(
    fee_flat_market, precision
):
    params = dataclasses.replace(PARAMS, precision=precision)
    assert params.broker == "alpaca"
    # Buy 100,000 shares of asset 0 and 1,562.5 of asset 1 at $100 (weights 1/2 and 1/128): no fee.
    buy = torch.tensor([[0.5, 0.0078125]])
    state, _ = trading.reset(fee_flat_market, params, 1, start=0)
    ref = ReferenceEnv(fee_flat_market, params, 0, int(state.rng[0]))
    *_, ref_info = ref.step(buy[0].tolist())
    bought, outs = _kernels(fee_flat_market, params, state, buy)
    outs["reference"] = (ref.cash, ref_info["cost"])
    spent = (100_000 + 1_562.5) * PRICE
    for name, (cash, cost) in outs.items():
        assert cash == pytest.approx(CASH - spent, abs=1e-6), name
        assert cost in (None, 0.0), name
    assert bought.shares[0].tolist() == pytest.approx([100_000.0, 1_562.5])

    # Sell everything: $10,156,250 of proceeds, on a session of 2024 ($27.80 per million then). Each
    # fee of each order rounded up to the cent, as Alpaca charges them.
    sell = torch.zeros(1, 2)
    sec = [27.8e-6 * 100_000 * PRICE, 27.8e-6 * 1_562.5 * PRICE]  # $278.00 and $4.34375 -> $4.35
    taf = [8.30, 1_562.5 * 0.000166]  # 100,000 shares hit the $8.30 cap; 1,562.5 pay $0.259375 -> $0.26
    fees = sum(math.ceil(round(x * 100, 9)) / 100 for x in sec + taf)
    assert fees == pytest.approx(278.00 + 4.35 + 8.30 + 0.26)
    _, outs = _kernels(fee_flat_market, params, bought, sell)
    *_, ref_info = ref.step(sell[0].tolist())
    outs["reference"] = (ref.cash, ref_info["cost"])
    for name, (cash, cost) in outs.items():
        assert cash == pytest.approx(CASH - fees, abs=1e-3), name
        if cost is not None:
            assert cost == pytest.approx(fees, abs=1e-3), name


def test_the_flat_profile_charges_cost_rate_on_both_sides(fee_flat_market):
    params = dataclasses.replace(PARAMS, broker="flat", cost_rate=0.001)
    state, _ = trading.reset(fee_flat_market, params, 1, start=0)
    step = trading.step(fee_flat_market, params, state, torch.tensor([[0.5, 0.0]]))
    shares = float(step.state.shares[0, 0])
    # Weights size the order on the value at the open; the commission then scales the buy to fit.
    assert shares * PRICE * 1.001 == pytest.approx(min(CASH, 0.5 * CASH * 1.001), rel=1e-9)
    assert float(step.info["cost"][0]) == pytest.approx(0.001 * shares * PRICE, rel=1e-9)
    sold = trading.step(fee_flat_market, params, step.state, torch.zeros(1, 2))
    assert float(sold.info["cost"][0]) == pytest.approx(0.001 * shares * PRICE, rel=1e-6)


def test_an_unknown_broker_is_a_one_line_error():
    with pytest.raises(ValueError, match="broker"):
        EnvParams(broker="ibkr")  # type: ignore[arg-type]
