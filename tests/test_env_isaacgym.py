"""Isaac Gym surfaces: our env as a VecTask, and a (fake) VecTask as our env. No isaacgym needed."""

from __future__ import annotations

import subprocess
import sys

import torch

from data.toy import toy_market
from envs.isaacgym import VecTaskAdapter, from_vec_task
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv


class FakeVecTask:
    """A VecTask-shaped point-mass task: obs = position, action = velocity, Isaac Gym conventions.

    Reward -|x|; ``reset_buf`` when |x| > 2 (failure) or after ``max_episode_length`` steps
    (``timeout_buf``); flagged envs are reset at the start of the next step, like VecTask tasks.
    """

    def __init__(self, num_envs=6, max_episode_length=5, device="cpu"):
        self.num_envs, self.num_obs, self.num_acts = num_envs, 2, 2
        self.device = self.rl_device = device
        self.max_episode_length = max_episode_length
        self.obs_buf = torch.zeros(num_envs, 2, device=device)
        self.rew_buf = torch.zeros(num_envs, device=device)
        self.reset_buf = torch.ones(num_envs, dtype=torch.long, device=device)
        self.timeout_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.progress_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.extras = {}
        self.reset_calls = []

    def reset_idx(self, env_ids):
        self.reset_calls.append(env_ids.tolist())
        self.obs_buf[env_ids] = 0.0
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 0
        self.timeout_buf[env_ids] = 0

    def reset(self):
        self.reset_idx(torch.arange(self.num_envs, device=self.device))
        return {"obs": self.obs_buf}

    def step(self, actions):
        env_ids = self.reset_buf.nonzero().squeeze(-1)
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.obs_buf += actions
        self.progress_buf += 1
        self.rew_buf[:] = -self.obs_buf.abs().sum(1)
        failed = self.obs_buf.abs().max(1).values > 2.0
        self.timeout_buf[:] = (self.progress_buf >= self.max_episode_length) & ~failed
        self.reset_buf[:] = failed | self.timeout_buf.bool()
        self.extras = {"time_outs": self.timeout_buf}
        return {"obs": self.obs_buf}, self.rew_buf, self.reset_buf, self.extras


def _market():
    return toy_market(num_steps=200, num_assets=3, num_features=2, bars_per_session=50, seed=4)


def test_adapter_exposes_vectask_surface():
    env = TradingVecEnv(_market(), EnvParams(decision_interval=2, episode_len=3), num_envs=4, seed=1)
    task = VecTaskAdapter(env)
    assert (task.num_envs, task.num_obs, task.num_acts) == (4, env.obs_dim, 3)
    obs_dict = task.reset()
    assert obs_dict["obs"] is task.obs_buf and task.obs_buf.shape == (4, env.obs_dim)
    for i in range(3):
        obs_dict, rew, reset, extras = task.step(torch.full((4, 3), 0.3))
        assert rew is task.rew_buf and reset is task.reset_buf and rew.shape == (4,)
        assert torch.equal(task.obs_buf, obs_dict["obs"])
        if i < 2:
            assert torch.equal(task.progress_buf, torch.full((4,), i + 1))
            assert not bool(reset.any())
    # Third decision: every episode times out (truncated, not terminated) and is already reset.
    assert torch.equal(reset, torch.ones(4, dtype=torch.long))
    assert torch.equal(extras["time_outs"], torch.ones(4, dtype=torch.long))
    assert torch.all(extras["final_obs"][:, 0] < 0.2)  # invested before the reset
    assert torch.all(task.obs_buf[:, 0] == 1.0)  # all cash after it


def test_adapter_reset_idx_restarts_only_those_envs():
    env = TradingVecEnv(_market(), EnvParams(decision_interval=2, episode_len=50), num_envs=4, seed=2)
    task = VecTaskAdapter(env)
    task.step(torch.full((4, 3), 0.3))
    task.step(torch.full((4, 3), 0.3))
    before_t = env.state.t.clone()
    before_obs = task.obs_buf.clone()
    task.reset_idx(torch.tensor([1, 3]))
    assert torch.equal(task.progress_buf, torch.tensor([2, 0, 2, 0]))
    assert torch.equal(env.state.step_count, torch.tensor([2, 0, 2, 0]))
    assert torch.equal(env.state.t[[0, 2]], before_t[[0, 2]])
    assert torch.equal(task.obs_buf[[0, 2]], before_obs[[0, 2]])
    assert torch.all(task.obs_buf[[1, 3], 0] == 1.0) and torch.all(before_obs[[1, 3], 0] < 0.2)
    assert torch.all(env.state.value[[1, 3]] == env.params.initial_cash)
    # The restarted envs step on normally from their new start bars.
    _, _, reset, _ = task.step(torch.full((4, 3), 0.1))
    assert torch.equal(env.state.t[[1, 3]], task.env.state.t[[1, 3]])
    assert not bool(reset.any())


def test_from_vec_task_splits_resets_into_terminated_and_truncated():
    task = FakeVecTask(num_envs=3, max_episode_length=4)
    env = from_vec_task(task)
    assert (env.num_envs, env.obs_dim, env.action_dim) == (3, 2, 2)
    assert env.single_action_space.shape == (2,)
    obs, info = env.reset()
    assert obs.shape == (3, 2)
    # env 0 drifts out of bounds at step 3 (terminated); the others time out at step 4.
    action = torch.tensor([[0.8, 0.0], [0.1, 0.0], [0.0, -0.1]])
    seen = []
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(action)
        seen.append((terminated.tolist(), truncated.tolist()))
        assert torch.equal(reward, -obs.abs().sum(1))
    assert seen[2] == ([True, False, False], [False, False, False])
    assert seen[3] == ([False, False, False], [False, True, True])
    assert "final_obs" in info and "time_outs" in info
    # The task resets flagged envs itself on the next step (VecTask convention).
    env.step(action)
    assert task.reset_calls[-1] == [1, 2]


def test_round_trip_adapter_then_from_vec_task_matches_env():
    params = EnvParams(decision_interval=2, episode_len=4, reward="return")
    direct = TradingVecEnv(_market(), params, num_envs=5, seed=9)
    wrapped = from_vec_task(VecTaskAdapter(TradingVecEnv(_market(), params, num_envs=5, seed=9)))
    # Both continue the generator seeded at construction.
    obs_a, _ = direct.reset()
    obs_b, _ = wrapped.reset()
    assert torch.equal(obs_a, obs_b)
    gen = torch.Generator().manual_seed(0)
    for _ in range(9):
        action = torch.rand(5, 3, generator=gen) * 0.4
        a = direct.step(action)
        b = wrapped.step(action)
        for x, y in zip(a[:4], b[:4], strict=True):
            assert torch.equal(x, y)


def test_isaacgym_is_never_imported():
    code = "import sys, envs, envs.isaacgym; print('isaacgym' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
