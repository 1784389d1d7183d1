"""Basic contract tests of envs.trading / envs.vec_env: shapes, validation, episodes, autoreset."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from data.errors import DataError, PodracerError
from data.toy import toy_market
from envs import trading
from envs.trading import EnvParams, obs_dim, split_obs
from envs.vec_env import TradingVecEnv


@pytest.fixture
def market():
    return toy_market(num_steps=300, num_assets=4, num_features=3, bars_per_session=50, seed=1)


def test_reset_shapes_and_fresh_obs(market):
    params = EnvParams(decision_interval=2, episode_len=10)
    state, obs = trading.reset(market, params, 5, torch.Generator().manual_seed(0))
    assert obs.shape == (5, obs_dim(4, 3)) == (5, 2 + 4 * 4)
    assert obs.dtype == torch.float32
    glob, per = split_obs(obs, 4, 3)
    assert torch.all(glob[:, 0] == 1.0)
    assert torch.equal(glob[:, 1], market.time_of_day[state.t])
    assert torch.all(per[..., 0] == 0.0)
    assert torch.equal(per[..., 1:], market.features[state.t])
    assert torch.all(state.value == params.initial_cash)
    # Random starts leave room for a full episode.
    assert int(state.t.max()) <= market.num_steps - 1 - 2 * 10


def test_params_validation_names_field():
    with pytest.raises(ValueError, match="cost_rate"):
        EnvParams(cost_rate=-0.1)
    with pytest.raises(ValueError, match="action_mode"):
        EnvParams(action_mode="long_short")
    with pytest.raises(ValueError, match="decision_interval"):
        EnvParams(decision_interval=0)
    with pytest.raises(PodracerError, match="reward"):
        EnvParams(reward="sharpe")
    with pytest.raises(ValueError, match="initial_cash"):
        EnvParams(initial_cash=float("nan"))


@pytest.mark.parametrize("bad", ["nan", "inf", "shape"])
def test_bad_action_raises_before_state_changes(market, bad):
    params = EnvParams(decision_interval=1, episode_len=5)
    state, _ = trading.reset(market, params, 3, torch.Generator().manual_seed(0))
    before = dataclasses.astuple(state)
    action = torch.full((3, 4), 0.1)
    if bad == "nan":
        action[1, 2] = float("nan")
    elif bad == "inf":
        action[0, 0] = float("inf")
    else:
        action = torch.full((3, 5), 0.1)
    with pytest.raises(ValueError, match="action"):
        trading.step(market, params, state, action)
    for a, b in zip(before, dataclasses.astuple(state), strict=True):
        assert torch.equal(a, b)


def test_vec_env_roundtrip_and_truncation(market):
    params = EnvParams(decision_interval=3, episode_len=4)
    env = TradingVecEnv(market, params, num_envs=6, seed=3)
    assert env.obs_dim == obs_dim(4, 3) and env.action_dim == 4
    assert env.single_observation_space.shape == (env.obs_dim,)
    obs, info = env.reset(seed=3)
    for _ in range(4):
        t_before = env.state.t.clone()
        obs, reward, terminated, truncated, info = env.step(torch.full((6, 4), 0.25))
        assert torch.equal(info["bar_t"], t_before)
        assert reward.shape == terminated.shape == truncated.shape == (6,)
    # Every env has taken episode_len decisions: all truncated and reset in the same step.
    assert bool(truncated.all()) and not bool(terminated.any())
    assert torch.all(env.state.step_count == 0)
    assert torch.all(env.state.value == params.initial_cash)
    assert torch.equal(obs[:, 0], torch.ones(6))
    # final_obs keeps the pre-reset, fully invested observation.
    assert torch.all(info["final_obs"][:, 0] < 0.05)
    assert torch.equal(info["t"], env.state.t)


def test_fixed_start_truncates_at_end_of_data(market):
    params = EnvParams(decision_interval=7, episode_len=10_000)
    state, _ = trading.reset(market, params, 2, start=250)
    steps = 0
    while True:
        state_t = state.t.clone()
        state, obs, reward, term, trunc, info = trading.step(market, params, state, torch.full((2, 4), 0.2))
        steps += 1
        if bool(trunc.any()):
            break
        assert steps < 100
    assert bool(trunc.all())
    # The last decision's mark bar is the last bar that leaves room for nothing more.
    assert int(state_t[0]) + 7 <= market.num_steps - 1 < int(state_t[0]) + 14
    assert steps == (market.num_steps - 1 - 250) // 7


def test_start_out_of_range_and_short_market(market):
    params = EnvParams(decision_interval=5, episode_len=3)
    with pytest.raises(DataError, match="start"):
        trading.reset(market, params, 2, start=market.num_steps - 5)
    short = market.slice(0, 5)
    with pytest.raises(DataError, match="bars"):
        trading.reset(short, params, 2)
