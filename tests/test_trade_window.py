"""A policy's trade window (``NetworkConfig.trade_window``): decisions later in their session than the
window hold the book; the direct learner's simulation trades that way as the env does, and the window
survives a save and load."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import ppo_market

from agents import direct
from agents.networks import NetworkConfig
from agents.policy import Policy
from backtests import engine
from data.errors import ConfigError
from envs.observation import TIME_OF_DAY
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def _random_policy(**config) -> Policy:
    torch.manual_seed(0)
    policy = Policy(NetworkConfig(4, 2, **config))
    with torch.no_grad():
        for p in policy.net.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return policy


def _obs(policy: Policy, time_of_day: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    obs = torch.randn(len(time_of_day), policy.obs_dim)
    current = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.1]])
    obs[:, 2:].view(3, 4, 4)[..., 0] = current
    obs[:, TIME_OF_DAY] = torch.tensor(time_of_day)
    return obs, current


@pytest.mark.parametrize("rate", [1.0, 0.25])
def test_decisions_after_the_window_hold_the_current_weights(rate):
    windowed = _random_policy(trade_window=0.1, rebalance_rate=rate)
    every = _random_policy(rebalance_rate=rate)  # the same weights, no window
    obs, current = _obs(windowed, [0.05, 0.1, 0.5])
    action, reference = windowed.act(obs), every.act(obs)
    assert torch.equal(action[:2], reference[:2])  # inside the window (its edge included): as without
    assert torch.equal(action[2], current[2])  # after it: the book as it stands
    assert windowed.frozen_act() is None  # (the backtests' fast path trades at every decision)
    assert (every.frozen_act() is not None) == (rate == 1.0)
    with pytest.raises(ValueError, match="needs the"):
        windowed.to_action(torch.zeros(3, 5))


def test_the_window_is_saved_and_a_policy_saved_without_it_trades_every_decision(tmp_path):
    policy = _random_policy(trade_window=0.1)
    obs, _ = _obs(policy, [0.05, 0.5, 0.9])
    policy.save(tmp_path / "p")
    loaded = Policy.load(tmp_path / "p")
    assert loaded.config.trade_window == 0.1 and torch.equal(loaded.act(obs), policy.act(obs))
    spec = json.loads((tmp_path / "p" / "spec.json").read_text())
    del spec["architecture"]["trade_window"]
    (tmp_path / "p" / "spec.json").write_text(json.dumps(spec))
    assert Policy.load(tmp_path / "p").config.trade_window == 1.0


def test_a_window_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="trade_window"):
        NetworkConfig(4, 2, trade_window=0.0)
    with pytest.raises(ConfigError, match="trade_window"):
        direct.DirectArgs(trade_window=1.5)


def test_a_direct_pod_with_a_window_trades_at_each_sessions_first_decision_as_the_env_does():
    """60-bar sessions, a decision every 5 bars: time of day 1/60 at a session's first decision, 6/60
    at its second; a window of 0.05 trades at the first only. The simulation's net returns equal the
    env's (frictionless fill), and the env's book turns over only at the sessions' first decisions."""
    market = ppo_market()
    params = EnvParams(  # (no per-share fee: the simulation leaves it to the backtest)
        decision_interval=5, impact_coef=0.0, max_participation=0.0, min_order_notional=0.0, fee_scale=0.0
    )
    args = direct.DirectArgs(
        total_steps=64, horizon=4, batch_paths=4, hidden=8, embed=4, rebalance_rate=1.0, trade_window=0.05
    )
    policy = direct.train(args, TradingVecEnv(market, params, num_envs=1, seed=0)).policy
    assert policy.config.trade_window == 0.05
    decisions = direct.decisions_of(market, 5)
    with torch.no_grad():
        net, _ = direct.simulate(policy, decisions, torch.tensor([0]), 24, params)
    result = engine.run_backtest(market.slice(0, 25 * 5 + 1), params, {"pod": policy}, baselines=())
    assert torch.allclose(net[0].double(), result.returns[:24, 0], atol=2e-5)
    first = torch.arange(24) % 12 == 0  # rows 0 and 12: the sessions' first decisions
    turnover = result.turnover[:24, 0]
    assert float(turnover[0]) > 0.5  # the book is bought from cash at the first decision
    assert float(turnover[~first].max()) < 0.05  # held: only the drift to the fill is traded


def test_a_population_of_windowed_direct_pods_is_each_pods_own_run():
    """The population backend holds the book as ``direct.train`` does (the pods' shared window)."""
    from test_population_direct import AGENT, PODS, _population_vs_separate, _same_run

    train, _valid, _test = ppo_market().split_sessions(0.6, 0.2)
    params = EnvParams(decision_interval=5)
    window = {"trade_window": 0.05, "rebalance_rate": 1.0}
    args = [direct.DirectArgs(**{**AGENT, "total_steps": 200, **pod, **window}) for pod in PODS[:2]]
    alone, together, _stack = _population_vs_separate(train, params, args, [None] * 2)
    _same_run(alone, together)
    assert all(p.policy.config.trade_window == 0.05 for p in together)


def test_an_exported_open_policy_holds_and_demeans_as_the_torch_policy(tmp_path):
    """The bundle's graph holds after the window and demeans the encoder's features (onnxruntime
    against ``Policy.act``), observations on both sides of the window."""
    import numpy as np
    from test_paper_support import make_run

    from app.bundle import load_bundle
    from app.export import export_bundle, sample_observations

    run = make_run(tmp_path)
    old = Policy.load(run.run_dir / "champion")
    config = NetworkConfig(
        old.num_assets, old.config.num_features, embed=8, hidden=16, asset_layers=1,
        trade_window=0.1, rebalance_rate=1.0, demean_features=True,
    )  # fmt: skip
    torch.manual_seed(1)
    policy = Policy(config, old.meta)
    with torch.no_grad():
        for p in policy.net.parameters():
            p.mul_(3.0)
    policy.obs_norm.copy_from(old.obs_norm)
    policy.save(run.run_dir / "champion")
    bundle = load_bundle(export_bundle(run.run_dir, out=tmp_path / "bundle"))
    obs = sample_observations(bundle.num_assets, bundle.num_features, num=64, seed=7)
    obs[:, TIME_OF_DAY] = np.linspace(0.0, 1.0, 64, dtype=np.float32)
    got, want = bundle.act(obs), policy.act(torch.as_tensor(obs)).numpy()
    assert np.max(np.abs(got - want)) < 1e-5
    held = obs[:, TIME_OF_DAY] > 0.1
    current = obs[:, 2:].reshape(64, bundle.num_assets, -1)[..., 0]
    assert held.any() and np.allclose(got[held], current[held], atol=1e-6)
