"""Accounting invariants, independent time indices, no lookahead, memory and device checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.toy import toy_market
from envs import trading
from envs.execution import FRICTIONLESS
from envs.fees import rates_on_date
from envs.observation import split_obs
from envs.trading import EnvParams


def _run(market, params, num_envs, steps, seed=0, policy=None, start=None):
    """Step ``steps`` times; yields (state_before, action, state_after, obs, reward, term, trunc, info)."""
    gen = torch.Generator().manual_seed(seed)
    state, obs = trading.reset(market, params, num_envs, gen, start=start)
    for _ in range(steps):
        if policy is not None:
            action = policy(obs)
        elif params.action_mode == "weights":
            action = torch.rand(num_envs, market.num_assets, generator=gen) * 0.6
        else:
            action = torch.rand(num_envs, market.num_assets, generator=gen) * 2 - 1
        before = state
        state, obs, reward, term, trunc, info = trading.step(market, params, state, action)
        yield before, action, state, obs, reward, term, trunc, info


TOY_MARKET = {
    "num_steps": 400,
    "num_assets": 5,
    "num_features": 4,
    "bars_per_session": 50,
    "seed": 7,
}  # `market`


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["weights", "shares"])
def test_accounting_invariants(market, mode, precision):
    params = EnvParams(
        action_mode=mode,
        decision_interval=2,
        episode_len=15,
        max_shares=3000.0,
        trade_info=True,
        precision=precision,
    )
    # float32 holdings: each shares * close product is rounded once (6e-8 relative), and cash flows
    # are computed from the rounded orders: $1 on a $1M book.
    rtol, dollar_atol = (1e-9, 1e-6) if precision == "float64" else (2e-7, 1.0)
    checked = 0
    for before, _, after, obs, _, _, _, info in _run(market, params, 16, 60):
        # value = cash + sum(shares * close) at the new decision bar (also for reset envs).
        close = market.close[after.t].double()
        torch.testing.assert_close(
            after.value, after.cash + (after.shares.double() * close).sum(1), rtol=rtol, atol=1e-6
        )
        # cost = the broker's fees on the fills, and the notional is what was traded at fill prices.
        torch.testing.assert_close(info["cost"], _fees_by_hand(params, info), rtol=1e-5, atol=1e-6)
        notional = (info["shares_traded"].abs() * info["fill_price"]).double().sum(1)
        torch.testing.assert_close(info["traded_notional"], notional, rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(info["asset_cost"].double().sum(1), info["cost"], rtol=1e-5, atol=1e-3)
        # Fill prices: open * (1 +- frac(q)), frac = slippage + half-spread + the square-root impact's
        # growth from the same-direction order m worked so far (decayed) to m + q, per share, at the
        # decision bar's liquidity (docs/env.md "Execution").
        fill_open = market.open[before.t + 1].double()
        traded = info["shares_traded"].double()
        sigma, adv = market.daily_vol[before.t].double(), market.adv[before.t].double()
        remembered = before.order.double() * params.impact_memory
        m = torch.where(traded > 0, remembered.clamp(min=0), (-remembered).clamp(min=0))
        q = traded.abs()
        growth = torch.where(q > 0, ((m + q) ** 1.5 - m**1.5) / q.clamp(min=1e-30), 0.0)
        # The half-spread: the decision bar's estimate for the asset, at least spread_bps.
        half = market.half_spread[before.t].double().clamp(min=params.spread_bps * 1e-4)
        frac = params.slippage_bps * 1e-4 + half + params.impact_coef * sigma * growth / adv.sqrt()
        # The order carried on: the fill added to the same-direction memory, or a new order.
        same = torch.where(traded > 0, remembered.clamp(min=0), remembered.clamp(max=0))
        worked = torch.where(traded == 0, remembered, same + traded)
        cont = after.step_count > 0
        torch.testing.assert_close(after.order.double()[cont], worked[cont], rtol=1e-5, atol=1e-3)
        want = fill_open * (1 + torch.sign(traded) * frac.clamp(max=1.0))
        fill = info["fill_price"].double()
        torch.testing.assert_close(fill, want, rtol=1e-6, atol=0.0)
        # No order under the minimum.
        assert bool(((traded.abs() * fill_open >= params.min_order_notional) | (traded == 0)).all())
        # No negative cash or holdings, ever.
        assert bool((after.cash >= 0).all()) and bool((after.shares >= 0).all())
        # Cash conservation over the step, for envs that did not reset.
        spent = (traded * want).sum(1)
        torch.testing.assert_close(
            after.cash[cont], (before.cash - spent - info["cost"])[cont], rtol=rtol, atol=dollar_atol
        )
        if mode == "shares":
            assert torch.equal(after.shares, after.shares.round())
        # Observation weights are consistent with the accounting.
        glob, per = split_obs(obs, market.num_assets, market.num_features)
        torch.testing.assert_close(glob[:, 0].double(), after.cash / after.value, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            per[..., 0].double(), after.shares.double() * close / after.value[:, None], rtol=1e-5, atol=1e-6
        )
        checked += 1
    assert checked == 60


def test_weights_are_clipped_and_rescaled(market):
    params = EnvParams(decision_interval=1, episode_len=50, cost_rate=0.0, slippage_bps=0.0, **FRICTIONLESS)
    state, _ = trading.reset(market, params, 2, start=10)
    action = torch.tensor([[-1.0, 2.0, 2.0, 0.0, 0.0], [0.1, 0.1, 0.0, 0.0, -5.0]])
    state, obs, *_ = trading.step(market, params, state, action)
    _, per = split_obs(obs, market.num_assets, market.num_features)
    fill = market.open[11].double()
    # Row 0: [0, 2, 2, 0, 0] sums above 1 -> [0, .5, .5, 0, 0] of the value at the fill.
    torch.testing.assert_close(state.shares[0] * fill, torch.tensor([0, 5e5, 5e5, 0, 0], dtype=torch.float64))
    # Row 1: [.1, .1, 0, 0, 0], the remaining 80% stays in cash.
    torch.testing.assert_close(state.cash[1], torch.tensor(8e5, dtype=torch.float64))
    assert float(per[1, 4, 0]) == 0.0


def test_shares_mode_limits_sells_to_holdings(market):
    params = EnvParams(action_mode="shares", max_shares=10.0, decision_interval=1, episode_len=50)
    state, _ = trading.reset(market, params, 1, start=0)
    state, *_ = trading.step(market, params, state, torch.tensor([[0.5, 0.34, 0.0, 0.0, 0.0]]))
    assert state.shares[0].tolist() == [5.0, 3.0, 0.0, 0.0, 0.0]
    state, *_, info = trading.step(market, params, state, torch.tensor([[-1.0, -0.1, -1.0, 0.0, 0.0]]))
    assert state.shares[0].tolist() == [0.0, 2.0, 0.0, 0.0, 0.0]
    assert info["shares_traded"][0].tolist() == [-5.0, -1.0, 0.0, 0.0, 0.0]


def _fees_by_hand(params: EnvParams, info: dict) -> torch.Tensor:
    """Buys pay buy_fee_rate of their notional; each asset's sell the rate on its proceeds plus the
    per-share fee capped per asset, each rounded up to the cent at Alpaca, at the rates of the toy
    market's sessions (January 2024: the schedules' first rows)."""
    traded = info["shares_traded"].double()
    notional = traded * info["fill_price"].double()
    bought, sold = notional.clamp(min=0), (-notional).clamp(min=0)
    sec, per_share, cap = rates_on_date(params, "2024-01-02")
    sec_fee, share_fee = sold * sec, ((-traded).clamp(min=0) * per_share).clamp(max=cap)
    if params.broker == "alpaca" and params.round_fees:
        sec_fee, share_fee = (torch.ceil(x * 100 - 1e-6).clamp(min=0) / 100 for x in (sec_fee, share_fee))
    return params.buy_fee_rate * bought.sum(1) + (sec_fee + share_fee).sum(1)


def test_round_trip_on_flat_prices_costs_exactly_the_cost_rate():
    market = toy_market(num_steps=50, num_assets=3, num_features=2, seed=0)
    flat = torch.full_like(market.close, 50.0)
    market = dataclasses.replace(market, open=flat, close=flat, high=flat, low=flat)
    params = EnvParams(
        decision_interval=1,
        episode_len=10,
        slippage_bps=0.0,
        broker="flat",
        cost_rate=0.01,
        reward="return",
        reward_scale=1.0,
        **FRICTIONLESS,
    )
    state, _ = trading.reset(market, params, 1, start=0)
    state, _, r1, *_ = trading.step(market, params, state, torch.full((1, 3), 0.2))  # buy 60% of value
    state, _, r2, *_ = trading.step(market, params, state, torch.zeros(1, 3))  # sell everything
    torch.testing.assert_close(r1, torch.tensor([-0.006]))
    # Bought $600k (cost $6k), sold it back at the same price (cost $6k).
    torch.testing.assert_close(float(state.cash[0]), 1e6 - 6e3 - 6e3, rtol=0.0, atol=1e-2)
    assert float(state.shares.abs().max()) == 0.0
    torch.testing.assert_close(float(r2[0]), 988e3 / 994e3 - 1, rtol=1e-6, atol=0.0)


def test_each_env_keeps_its_own_time_index(market):
    params = EnvParams(decision_interval=3, episode_len=7)
    gen = torch.Generator().manual_seed(1)
    state, _ = trading.reset(market, params, 32, gen)
    assert len(set(state.t.tolist())) > 16  # random, per-env starts
    # Desynchronise the episodes: env i has already taken i % 7 decisions.
    state = dataclasses.replace(state, step_count=torch.arange(32) % 7)
    for _ in range(10):
        prev = state
        state, _, _, term, trunc, info = trading.step(market, params, state, torch.full((32, 5), 0.1))
        done = term | trunc
        assert torch.equal(info["bar_t"], prev.t)
        assert torch.equal(state.t[~done], prev.t[~done] + 3)
        assert torch.equal(done, prev.step_count + 1 >= 7)
        assert 0 < int(done.sum()) < 32  # some envs reset while the others carry on
        assert torch.all(state.step_count[done] == 0) and torch.all(state.value[done] == params.initial_cash)


def _perturb_after(market, bar):
    """The same market with every bar after ``bar`` replaced by different random data."""
    gen = torch.Generator().manual_seed(99)
    changed = {}
    for name in ("open", "high", "low", "close", "volume", "features"):
        x = getattr(market, name).clone()
        x[bar + 1 :] = x[bar + 1 :] * (1.0 + 0.5 * torch.rand(x[bar + 1 :].shape, generator=gen))
        changed[name] = x
    return dataclasses.replace(market, **changed)


@pytest.mark.parametrize("mode", ["weights", "shares"])
def test_no_lookahead(market, mode):
    """Changing bars after t+1 changes nothing at or before the fill at t+1 (closed loop policy)."""
    params = EnvParams(action_mode=mode, decision_interval=4, episode_len=1000, max_shares=500.0)
    start, cut_decision = 20, 20 + 4 * 10  # the 11th decision is taken on bar 60, fills at bar 61
    other = _perturb_after(market, cut_decision + 1)

    def policy(obs):
        _, per = split_obs(obs, market.num_assets, market.num_features)
        score = torch.softmax(per[..., 2] + per[..., 0], dim=1)  # first feature + weight
        return score if mode == "weights" else score * 2 - 0.4

    runs = [list(_run(m, params, 3, 11, policy=policy, start=start)) for m in (market, other)]
    for (b0, a0, s0, o0, r0, *_, i0), (_b1, a1, s1, o1, r1, *_, i1) in zip(*runs, strict=True):
        bar = int(b0.t[0])
        assert bar <= cut_decision
        # The decision (from obs at bar <= t) and its fill at t+1 are identical.
        assert torch.equal(a0, a1)
        assert torch.equal(i0["shares_traded"], i1["shares_traded"])
        assert torch.equal(i0["cost"], i1["cost"])
        assert torch.equal(s0.cash, s1.cash) and torch.equal(s0.shares, s1.shares)
        if bar + 4 <= cut_decision + 1:
            assert torch.equal(o0, o1) and torch.equal(r0, r1)
    # The perturbation is real: the marks after the cut differ.
    assert not torch.equal(runs[0][-1][3], runs[1][-1][3])


def test_memory_state_and_obs_4096_by_100():
    market = toy_market(num_steps=64, num_assets=100, num_features=8, seed=0)
    params = EnvParams(decision_interval=1, episode_len=1)  # every env resets: obs and final_obs both live
    state, obs = trading.reset(market, params, 4096)
    state, obs, reward, term, trunc, info = trading.step(market, params, state, torch.full((4096, 100), 0.01))
    tensors = [*dataclasses.astuple(state), obs, reward, term, trunc, *info.values()]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    assert sum(storages.values()) < 100 * 2**20


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_unchanged_on_cuda(market):
    params = EnvParams(decision_interval=2, episode_len=5, reward="diff_sharpe")
    results = []
    for device in ("cpu", "cuda"):
        m = market.to(device)
        state, obs = trading.reset(m, params, 8, torch.Generator().manual_seed(0))
        gen = torch.Generator().manual_seed(1)
        for _ in range(12):
            action = (torch.rand(8, 5, generator=gen) * 0.3).to(device)
            state, obs, reward, *_ = trading.step(m, params, state, action)
        assert obs.device.type == device and reward.device.type == device
        results.append((state.value.cpu(), obs.cpu(), reward.cpu()))
    for cpu, cuda in zip(*results, strict=True):
        torch.testing.assert_close(cpu, cuda, rtol=1e-4, atol=1e-5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mode=st.sampled_from(["weights", "shares"]),
    reward=st.sampled_from(["log_return", "return", "diff_sharpe"]),
    cost_rate=st.floats(0.0, 0.5),
    slippage_bps=st.floats(0.0, 500.0),
    scale=st.sampled_from([0.0, 1e-3, 0.3, 1.0, 7.0, 1e30]),
    precision=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**16),
)
def test_invariants_hold_for_random_params(
    market, mode, reward, cost_rate, slippage_bps, scale, precision, seed
):
    params = EnvParams(
        action_mode=mode,
        reward=reward,
        broker="flat",
        cost_rate=cost_rate,
        slippage_bps=slippage_bps,
        decision_interval=3,
        episode_len=6,
        max_shares=2000.0,
        drawdown_penalty=0.2,
        precision=precision,
    )
    gen = torch.Generator().manual_seed(seed)
    state, obs = trading.reset(market, params, 8, gen)
    for _ in range(8):
        action = (torch.rand(8, market.num_assets, generator=gen) * 2 - 0.5) * scale
        state, obs, reward_t, term, trunc, info = trading.step(market, params, state, action)
        assert bool(torch.isfinite(obs).all()) and bool(torch.isfinite(reward_t).all())
        assert bool((state.cash >= 0).all()) and bool((state.shares >= 0).all())
        close = market.close[state.t].double()
        torch.testing.assert_close(
            state.value, state.cash + (state.shares.double() * close).sum(1), rtol=1e-6, atol=1e-3
        )
        torch.testing.assert_close(info["cost"], params.cost_rate * info["traded_notional"])
        # Never more invested than the portfolio is worth.
        _, per = split_obs(obs, market.num_assets, market.num_features)
        assert bool((per[..., 0].sum(1) <= 1.0 + 1e-5).all())
