"""``envs.backtest_step.backtest_step`` (the backtest engine's step) against ``step``: bitwise the same
accounting, observations, termination and restarts."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from data.toy import toy_market
from envs import trading
from envs.backtest_step import asset_prices, backtest_step
from envs.trading import EnvParams


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("interval", [1, 3])
def test_backtest_step_matches_step_bitwise(precision, interval):
    market = toy_market(400, 5, 3, seed=1)
    # A high bust floor terminates envs (and restarts them at random bars, some of which then run
    # out of data and restart again): every branch of the restart logic is exercised.
    params = EnvParams(
        decision_interval=interval,
        episode_len=10_000,
        precision=precision,
        bust_frac=0.97,
        broker="flat",
        cost_rate=0.01,
    )
    n = 6
    state, obs = trading.reset(market, params, n, torch.Generator().manual_seed(3), start=0)
    lean_state, lean_obs = state, obs
    prices = asset_prices(market, params)
    gen = torch.Generator().manual_seed(5)
    restarts = 0
    with torch.inference_mode():
        for _ in range(300 // interval):
            action = torch.rand(n, market.num_assets, generator=gen) * 1.5 - 0.2
            state, obs, _, term, trunc, info = trading.step(market, params, state, action)
            lean_state, lean_obs, lean_term, value, notional, traded = backtest_step(
                market, params, lean_state, action, prices
            )
            restarts += int((term | trunc).sum())
            assert torch.equal(lean_term, term)
            assert torch.equal(value, info["value"])
            assert torch.equal(notional, info["traded_notional"])
            assert torch.equal(traded, info["shares_traded"])
            assert torch.equal(lean_obs, obs)
            for f in ("t", "cash", "shares", "value", "rng"):
                assert torch.equal(getattr(lean_state, f), getattr(state, f)), f
    assert restarts > 0


def test_asset_prices_dtype():
    market = toy_market(50, 3, 2, seed=0)
    params = dataclasses.replace(EnvParams(), precision="float64")
    open_, close = asset_prices(market, params)
    assert open_.dtype == close.dtype == torch.float64
    assert torch.equal(open_, market.open.to(torch.float64))
