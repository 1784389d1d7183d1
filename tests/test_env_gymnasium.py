"""The trading env in Gymnasium's terms, and its Isaac Lab / SB3 surfaces matching the native env.

A real ``gymnasium.vector.VectorEnv`` (spaces, same-step autoreset metadata, ``make_vec``), the
single-env numpy view passing Gymnasium's ``check_env``, and parity: for the same actions every
adapter hands back the native env's observations, rewards and episode ends (final observations
included). The SB3 parity test needs stable-baselines3 (the ``test`` extra) and skips without it.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import envs
from data.errors import PodracerError
from envs.isaaclab import IsaacLabEnv
from envs.single_env import TradingEnv
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")),
]


#: Short episodes so a few steps cross autoresets (time-outs) in every env.
PARAMS = EnvParams(decision_interval=3, episode_len=5)


def _actions(num_steps: int, num_envs: int, num_assets: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(num_envs, num_assets, generator=g) for _ in range(num_steps)]


def test_is_a_gymnasium_vector_env_with_real_spaces(market):
    env = TradingVecEnv(market, PARAMS, num_envs=3)
    assert isinstance(env, gymnasium.vector.VectorEnv)
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert env.unwrapped is env
    box = gymnasium.spaces.Box
    assert isinstance(env.single_observation_space, box) and isinstance(env.single_action_space, box)
    assert env.single_observation_space.shape == (env.obs_dim,)
    assert env.observation_space.shape == (3, env.obs_dim)
    assert env.single_action_space.shape == (4,) and env.action_space.shape == (3, 4)
    assert env.single_action_space.dtype == np.float32
    assert float(env.single_action_space.low.min()) == 0.0  # "weights": long-only
    shares = TradingVecEnv(market, EnvParams(action_mode="shares"), num_envs=2)
    assert float(shares.single_action_space.low.min()) == -1.0
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor)  # torch tensors, not numpy
    assert env.observation_space.contains(obs.numpy())


def test_same_step_autoreset_info(market):
    env = TradingVecEnv(market, PARAMS, num_envs=4, seed=1)
    for action in _actions(PARAMS.episode_len, 4, 4):
        obs, _, terminated, truncated, info = env.step(action)
    done = terminated | truncated
    assert bool(done.all())  # every env timed out on its 5th decision
    assert torch.equal(info["_final_obs"], done)
    # the returned obs are the new episodes' first ones; final_obs the ones they ended on
    assert torch.all(env.state.step_count == 0)
    assert not torch.equal(obs, info["final_obs"])


def test_make_vec_builds_the_batched_env(market):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a missing autoreset_mode would warn
        env = gymnasium.make_vec(envs.ENV_ID, num_envs=5, market=market, params=PARAMS, seed=2)
    assert type(env) is TradingVecEnv and env.num_envs == 5
    assert env.spec is not None and env.spec.id == "podracer/Trading-v0"
    direct = TradingVecEnv(market, PARAMS, num_envs=5, seed=2)
    for action in _actions(7, 5, 4):
        a, b = env.step(action), direct.step(action)
        for x, y in zip(a[:4], b[:4], strict=True):
            assert torch.equal(x, y)
    # The module:id form imports the package itself.
    again = gymnasium.make_vec("envs:podracer/Trading-v0", num_envs=2, market=market, params=PARAMS)
    assert isinstance(again, TradingVecEnv)


def test_single_env_view_passes_check_env(market):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*infinity.*")  # unbounded z-score features
        check_env(TradingEnv(market, PARAMS), skip_render_check=True)
        check_env(gymnasium.make(envs.ENV_ID, market=market, params=PARAMS).unwrapped, skip_render_check=True)
        check_env(
            TradingEnv(market, EnvParams(action_mode="shares", decision_interval=3)), skip_render_check=True
        )


def test_single_env_view_matches_the_vector_env(market):
    single = TradingEnv(market, PARAMS, seed=4)
    vec = TradingVecEnv(market, PARAMS, num_envs=1, seed=4)
    obs, _ = single.reset(seed=4)
    vobs, _ = vec.reset(seed=4)
    np.testing.assert_array_equal(obs, vobs[0].numpy())
    ends = 0
    for action in _actions(12, 1, 4):
        obs, reward, terminated, truncated, info = single.step(action[0].numpy())
        vobs, vrew, vterm, vtrunc, vinfo = vec.step(action)
        assert reward == float(vrew[0]) and (terminated, truncated) == (bool(vterm[0]), bool(vtrunc[0]))
        assert info["value"] == vinfo["value"][0].item()
        if terminated or truncated:
            ends += 1
            np.testing.assert_array_equal(obs, vinfo["final_obs"][0].numpy())  # the episode's last obs
            obs, _ = single.reset(seed=10 + ends)
            vobs, _ = vec.reset(seed=10 + ends)
        np.testing.assert_array_equal(obs, vobs[0].numpy())
    assert ends == 2


@pytest.mark.parametrize("device", DEVICES)
def test_isaaclab_adapter_matches_native_without_copies(market, device):
    native = TradingVecEnv(market, PARAMS, num_envs=6, seed=5, device=device)
    lab = IsaacLabEnv(TradingVecEnv(market, PARAMS, num_envs=6, seed=5, device=device))
    assert lab.unwrapped is lab and lab.num_envs == 6 and lab.device == torch.device(device)
    assert lab.single_observation_space["policy"] == native.single_observation_space
    assert lab.single_action_space == native.single_action_space and lab.num_actions == 4
    assert lab.observation_space["policy"].shape == (6, native.obs_dim)
    assert lab.cfg.is_finite_horizon is False and lab.max_episode_length == PARAMS.episode_len
    obs, _ = native.reset(seed=3)
    lab_obs, extras = lab.reset(seed=3)
    assert torch.equal(lab_obs["policy"], obs) and "log" in extras
    for action in _actions(11, 6, 4):
        action = action.to(device)
        obs, reward, terminated, truncated, info = native.step(action)
        lab_obs, lab_reward, lab_term, lab_trunc, extras = lab.step(action)
        assert torch.equal(lab_obs["policy"], obs) and torch.equal(lab_reward, reward)
        assert torch.equal(lab_term, terminated) and torch.equal(lab_trunc, truncated)
        assert torch.equal(extras["final_obs"], info["final_obs"])
        assert lab_obs["policy"].device.type == lab_reward.device.type == torch.device(device).type
        # no copies: the adapter hands out the env's own tensors
        assert lab._get_observations()["policy"] is lab_obs["policy"]
        assert lab_term.dtype == torch.bool and lab_reward.dtype == torch.float32


def test_isaaclab_episode_length_buf_drives_time_outs(market):
    """rsl_rl randomizes ``episode_length_buf`` at start; the env must then time out earlier."""
    lab = IsaacLabEnv(TradingVecEnv(market, PARAMS, num_envs=3, seed=0))
    lab.episode_length_buf = torch.tensor([0, 2, 4])
    assert torch.equal(lab.episode_length_buf, torch.tensor([0, 2, 4]))
    first_timeout = torch.full((3,), -1)
    for i, action in enumerate(_actions(5, 3, 4)):
        _, _, terminated, truncated, _ = lab.step(action)
        first_timeout = torch.where((first_timeout < 0) & truncated, i, first_timeout)
    assert first_timeout.tolist() == [4, 2, 0]


def test_rsl_rl_style_loop(market):
    """What an rsl_rl runner sees through Isaac Lab's RslRlVecEnvWrapper logic (re-stated here, rsl_rl
    is not a dependency): policy obs from ``_get_observations``, ``dones = terminated | truncated``,
    ``extras["time_outs"] = truncated`` for an infinite-horizon task."""
    lab = IsaacLabEnv(TradingVecEnv(market, PARAMS, num_envs=4, seed=0))
    env = lab.unwrapped
    num_actions = gymnasium.spaces.flatdim(env.single_action_space)
    lab.reset()
    obs = env._get_observations()["policy"]
    dones_seen = 0
    for _ in range(PARAMS.episode_len):
        obs_dict, rew, terminated, truncated, extras = lab.step(torch.rand(env.num_envs, num_actions))
        dones = (terminated | truncated).long()
        if not env.cfg.is_finite_horizon:
            extras["time_outs"] = truncated
        dones_seen += int(dones.sum())
        obs = obs_dict["policy"]
    assert obs.shape == (4, lab.env.obs_dim) and dones_seen == 4 and bool(extras["time_outs"].all())


def test_sb3_adapter_matches_native(market):
    pytest.importorskip("stable_baselines3")
    from envs.sb3 import SB3VecEnv

    native = TradingVecEnv(market, PARAMS, num_envs=6, seed=7)
    sb3 = SB3VecEnv(TradingVecEnv(market, PARAMS, num_envs=6, seed=7))
    assert sb3.observation_space == native.single_observation_space
    assert sb3.action_space == native.single_action_space
    obs, _ = native.reset(seed=11)
    sb3.seed(11)
    np.testing.assert_array_equal(sb3.reset(), obs.numpy())
    ends = 0
    for action in _actions(11, 6, 4):
        obs, reward, terminated, truncated, info = native.step(action)
        s_obs, s_rew, s_done, s_infos = sb3.step(action.numpy())
        assert isinstance(s_obs, np.ndarray) and s_obs.dtype == np.float32
        np.testing.assert_array_equal(s_obs, obs.numpy())
        np.testing.assert_array_equal(s_rew, reward.numpy())
        np.testing.assert_array_equal(s_done, (terminated | truncated).numpy())
        assert len(s_infos) == 6
        for i, inf in enumerate(s_infos):
            if s_done[i]:
                ends += 1
                np.testing.assert_array_equal(inf["terminal_observation"], info["final_obs"][i].numpy())
                assert inf["TimeLimit.truncated"] == bool(truncated[i] and not terminated[i])
            else:
                assert inf == {}
    assert ends == 12  # two time-outs per env
    assert sb3.get_attr("obs_dim") == [native.obs_dim] * 6
    assert sb3.env_is_wrapped(gymnasium.Wrapper) == [False] * 6


def test_sb3_adapter_without_sb3_is_a_one_line_error(monkeypatch):
    for name in [m for m in sys.modules if m == "stable_baselines3" or m.startswith("stable_baselines3.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # "not installed"
    monkeypatch.delitem(sys.modules, "envs.sb3", raising=False)
    with pytest.raises(PodracerError, match=r"needs stable-baselines3: pip install") as err:
        importlib.import_module("envs.sb3")
    assert "\n" not in str(err.value)
