"""envs.kernels.compiled (torch.compile with an eager fallback), the compiled env step and the compiled
backtest loop: equal to the eager paths up to float rounding, and the switches that choose them.

Compiling costs seconds, so each compiled graph here is built once per session (one market shape,
one set of params) and shared by the tests through module fixtures.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from agents.networks import NetworkConfig
from agents.policy import Policy, PolicyMeta
from backtests import engine, policy_loop
from data.toy import crashed, toy_market, with_gaps
from envs import fast_step, trading
from envs.backtest_loop import BacktestLoop
from envs.backtest_step import asset_prices, backtest_step
from envs.fast_step import COMPILE_MIN_ENVS, CUDA_COMPILE_MIN_ENVS, step_flags
from envs.kernels import native
from envs.kernels.compiled import Compiled, check_mode
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv


def test_compile_failure_falls_back_to_eager_once(caplog):
    def branchy(x):
        if x.sum() > 0:  # data-dependent control flow: no single graph, so fullgraph compile fails
            return x + 1
        return x - 1

    fn = Compiled(branchy, "branchy")
    with caplog.at_level(logging.WARNING, logger="envs.kernels.compiled"):
        out = fn(torch.ones(3))
        again = fn(-torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0)) and torch.equal(again, torch.full((3,), -2.0))
    assert not fn.active and fn.failure
    assert sum("torch.compile of branchy failed" in r.getMessage() for r in caplog.records) == 1


def test_genuine_input_error_propagates_and_keeps_compiling():
    fn = Compiled(lambda x, y: x + y, "add")
    with pytest.raises(RuntimeError):
        fn(torch.ones(3), torch.ones(4))  # fails while tracing, and eagerly too: the input's fault
    assert fn.active


def test_mode_validation():
    assert check_mode("auto") == "auto"
    with pytest.raises(ValueError, match="compile must be one of auto, on, off"):
        check_mode("yes")
    market = toy_market(400, 3, 2)
    small = TradingVecEnv(market, num_envs=8)
    # auto: the native kernel on the CPU from NATIVE_MIN_ENVS; torch.compile only from COMPILE_MIN_ENVS
    assert small.step_kernel == ("native" if native.library() is not None else "eager")
    assert TradingVecEnv(market, num_envs=8, params=EnvParams(trade_info=True)).step_kernel == "eager"
    assert TradingVecEnv(market, num_envs=COMPILE_MIN_ENVS).fast
    assert TradingVecEnv(market, num_envs=8, fast_step="on").fast
    assert not TradingVecEnv(market, num_envs=COMPILE_MIN_ENVS, fast_step="off").fast
    with pytest.raises(ValueError, match="fast_step must be one of auto, on, off"):
        TradingVecEnv(market, num_envs=8, fast_step="always")


def test_step_flags_auto_rule():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert step_flags("auto", cpu, 1) == (True, False)  # the native kernel, else eager
    assert step_flags("auto", cpu, COMPILE_MIN_ENVS) == (True, True)
    assert step_flags("auto", gpu, CUDA_COMPILE_MIN_ENVS - 1) == (False, False)
    assert step_flags("auto", gpu, CUDA_COMPILE_MIN_ENVS) == (True, True)
    assert step_flags("on", gpu, 1) == (True, True)
    assert not step_flags("off", cpu, 10**6).fast


@pytest.mark.parametrize(
    "limits",
    [{}, {"max_weight": 0.15, "turnover_penalty": 0.3}, {"gaps": True}],
    ids=["plain", "limits", "untradable-bars"],
)
def test_compiled_step_matches_eager(limits):
    # Autoresets (episode_len 6), costs and slippage on, per-asset trade info; float32 assets; with
    # and without the risk limits (a binding weight cap, a turnover penalty) and untradable bars.
    limits = dict(limits)
    market = toy_market(900, 5, 3, seed=1)
    # Dollar tolerance: float32 holdings round by an ulp of the share count times the price; with
    # held (untradable) positions the cash left after scaled buys shows it at a few cents, and so
    # does the execution model's per-asset fill price (three float32 roundings per notional).
    dollars = 1e-1
    if limits.pop("gaps", False):
        market, dollars = with_gaps(market, 0.3, seed=1), 0.5
    params = EnvParams(decision_interval=3, episode_len=6, trade_info=True, drawdown_penalty=0.1, **limits)
    state, _ = trading.reset(market, params, 32, torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    resets = 0
    for _ in range(15):
        action = torch.rand(32, 5, generator=gen) * 0.3
        eager = trading.step(market, params, state, action)
        fast = trading.step(market, params, state, action, fast=True)
        (s1, o1, r1, te1, tr1, i1), (s2, o2, r2, te2, tr2, i2) = eager, fast
        assert torch.equal(s1.t, s2.t) and torch.equal(s1.step_count, s2.step_count)
        assert torch.equal(s1.rng, s2.rng) and torch.equal(te1, te2) and torch.equal(tr1, tr2)
        for a, b in [(s1.cash, s2.cash), (s1.value, s2.value), (i1["cost"], i2["cost"])]:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=dollars)  # float32 per-asset rounding
        torch.testing.assert_close(s1.shares, s2.shares, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(o1, o2, rtol=1e-5, atol=1e-6)
        # (the dollar tolerance as a scaled return on the $1M book: $0.1 is 1e-7, times reward_scale)
        torch.testing.assert_close(r1, r2, rtol=1e-4, atol=dollars * 1e-6 * params.reward_scale)
        torch.testing.assert_close(i1["asset_cost"], i2["asset_cost"], rtol=1e-4, atol=1e-3)
        resets += int((te1 | tr1).sum())
        state = s1  # both continue from the same state
    assert resets > 0
    # Holdings in another memory layout take the same compiled graph (no failure, no fallback).
    odd = dataclasses.replace(state, shares=state.shares.t().contiguous().t())
    action = torch.rand(32, 5, generator=gen) * 0.3
    fast = trading.step(market, params, odd, action, fast=True)
    assert fast_step.step_kernel(market, params, odd, True) == "torch.compile"
    eager = trading.step(market, params, odd, action)
    torch.testing.assert_close(fast[0].value, eager[0].value, rtol=1e-5, atol=1e-2)


@pytest.fixture(scope="module")
def bust_market():
    """Two sessions of 6 assets, prices down 99% from bar 500 on (a fully invested book goes bust)."""
    return crashed(toy_market(2 * 390, 6, 3, seed=2), 500)


def _policy(market, all_in: bool) -> Policy:
    torch.manual_seed(0)
    config = NetworkConfig(num_assets=market.num_assets, num_features=market.num_features)
    meta = PolicyMeta(tickers=tuple(market.tickers), feature_names=tuple(market.feature_names))
    policy = Policy(config, meta).eval()
    if all_in:  # no cash: the crash takes the book under the termination floor
        with torch.no_grad():
            policy.net.actor_cash.bias.fill_(-20.0)
    return policy


@pytest.mark.parametrize("all_in", [False, True], ids=["no-termination", "terminated-in-a-block"])
def test_compiled_backtest_matches_eager(bust_market, all_in):
    market = bust_market.slice(0, 499) if not all_in else bust_market
    params = EnvParams(decision_interval=1)
    policy = _policy(market, all_in)
    runs = {
        mode: engine.run_backtest(market, params, {"champion": policy}, baselines=("cash",), compile=mode)
        for mode in ("off", "on")
    }
    eager, fast = runs["off"], runs["on"]
    assert fast.num_steps == eager.num_steps and fast.num_steps % 4 != 0  # the tail runs eagerly
    assert fast.terminated_at == eager.terminated_at
    # Decision 499 (bar 499) is marked at bar 500's close, after the crash: the last of a block of 4.
    assert eager.terminated_at[0] == (499 if all_in else -1)
    torch.testing.assert_close(fast.equity, eager.equity, rtol=1e-8, atol=1e-6)
    torch.testing.assert_close(fast.weights, eager.weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.costs, eager.costs, rtol=1e-4, atol=1e-3)
    # Per-asset trades are small every-bar rebalances: the float32 policy's rounding (~1e-7 of the
    # $1M book) shows as cents.
    torch.testing.assert_close(fast.trades, eager.trades, rtol=1e-4, atol=0.1)


@pytest.mark.parametrize(
    ("start_back", "num"), [(None, 9), (2, 8)], ids=["two-blocks-and-a-tail", "out-of-data-mid-block"]
)
def test_loop_matches_eager_steps_and_final_state(bust_market, start_back, num):
    # Same shapes as above, so the compiled block is reused. "out-of-data-mid-block": the second
    # decision of the first block is the last the data allows (done at block position 1), the env
    # restarts at a random bar and the later decisions go on from there.
    market = bust_market.slice(0, 499)
    params = EnvParams(decision_interval=1, precision="float64", episode_len=10**6)
    policy = _policy(market, False).frozen_act()
    prices = asset_prices(market, params)
    last = trading.last_decision_bar(market.num_steps, params)
    start = 0 if start_back is None else last - start_back + 1
    with torch.inference_mode():
        state, obs = trading.reset(market, params, 1, torch.Generator().manual_seed(5), start=start)
        loop = BacktestLoop(market, params, policy, prices)
        fast_state, fast_obs, (actions, value, notional, traded, term) = loop.run(state, obs, num)
        eager_values = []
        for _ in range(num):
            state, obs, _, v, _, _ = backtest_step(market, params, state, policy(obs), prices)
            eager_values.append(v)
    assert loop.compiled and actions.shape == (num, 1, market.num_assets) and term.shape == (num, 1)
    assert torch.equal(fast_state.t, state.t) and torch.equal(fast_state.rng, state.rng)
    if start_back is not None:
        assert int(state.t[0]) < start  # restarted
    torch.testing.assert_close(value, torch.stack(eager_values), rtol=1e-9, atol=1e-6)
    # The float32 policy's rounding moves trades by ~1e-7 of the $1M book: cents of cash.
    torch.testing.assert_close(fast_state.cash, state.cash, rtol=1e-9, atol=0.1)
    torch.testing.assert_close(fast_state.shares, state.shares, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fast_obs, obs, rtol=1e-5, atol=1e-6)


def test_auto_compiles_only_long_backtests(monkeypatch):
    calls = []

    class Spy:
        supported = staticmethod(lambda market: True)

        def __init__(self, *args, **kwargs):
            calls.append(args)
            raise RuntimeError("spy")

    monkeypatch.setattr(policy_loop, "BacktestLoop", Spy)
    market = toy_market(200, 3, 2)
    policy = _policy(market, False)
    params = EnvParams(decision_interval=1)
    engine.run_backtest(market, params, {"p": policy}, baselines=(), compile="auto")  # 199 decisions
    assert calls == []
    monkeypatch.setattr(engine, "COMPILE_MIN_DECISIONS", 100)
    with pytest.raises(RuntimeError, match="spy"):
        engine.run_backtest(market, params, {"p": policy}, baselines=(), compile="auto")
    with pytest.raises(ValueError, match="compile must be one of"):
        engine.run_backtest(market, params, {"p": policy}, compile="sometimes")
