"""Isaac Gym surfaces, both ways, without importing ``isaacgym``.

- :class:`VecTaskAdapter` presents a :class:`~envs.vec_env.TradingVecEnv` with Isaac Gym's
  ``VecTask`` surface (``num_envs``, ``num_obs``, ``num_acts``, ``obs_buf``, ``rew_buf``,
  ``reset_buf``, ``progress_buf``, ``extras["time_outs"]``, ``step(actions) -> (obs_dict, rew,
  reset, extras)``, ``reset()``, ``reset_idx(env_ids)``), so Isaac Gym-style trainers (rl_games,
  rsl_rl) can drive the trading env.
- :func:`from_vec_task` wraps an imported Isaac Gym ``VecTask`` (or an Isaac Lab env behind an
  rsl_rl-style wrapper: ``step -> (obs, rew, dones, extras)``) as a Gymnasium-vector-style env
  with the attributes our trainers read (``reset() -> (obs, info)``, ``step(a) -> (obs, reward,
  terminated, truncated, info)``, ``num_envs``, ``obs_dim``, ``action_dim``, spaces, ``device``).

``isaacgym`` is not on PyPI and is deprecated in favour of Isaac Lab; nothing here imports it.
:func:`isaacgym_available` tells whether it could be imported.

Reset conventions differ: our env resets in the same step (the returned observation of a done env
is its next episode's first one; the last one is ``extras["final_obs"]``). Isaac Gym tasks
report ``reset_buf`` and usually reset those envs on their next step; :func:`from_vec_task` passes
the task's observation through and also exposes it as ``info["final_obs"]`` (the best available
for bootstrapping time-outs, as rl_games does).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs import trading
from envs.vec_env import TradingVecEnv


def isaacgym_available() -> bool:
    """True when the ``isaacgym`` package can be imported (it is never imported here)."""
    return importlib.util.find_spec("isaacgym") is not None


class VecTaskAdapter:
    """Our trading env behind Isaac Gym's ``VecTask`` surface (buffers updated in place)."""

    def __init__(self, env: TradingVecEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.num_obs = env.obs_dim
        self.num_observations = env.obs_dim
        self.num_acts = env.action_dim
        self.num_actions = env.action_dim
        self.num_states = 0
        self.device = str(env.device)
        self.rl_device = str(env.device)
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.max_episode_length = env.params.episode_len
        dev = env.device
        self.obs_buf = torch.zeros(self.num_envs, self.num_obs, dtype=torch.float32, device=dev)
        self.states_buf = torch.zeros(self.num_envs, 0, dtype=torch.float32, device=dev)
        self.rew_buf = torch.zeros(self.num_envs, dtype=torch.float32, device=dev)
        self.reset_buf = torch.zeros(self.num_envs, dtype=torch.long, device=dev)
        self.timeout_buf = torch.zeros(self.num_envs, dtype=torch.long, device=dev)
        self.progress_buf = torch.zeros(self.num_envs, dtype=torch.long, device=dev)
        self.extras: dict[str, Any] = {}
        self.obs_dict: dict[str, Tensor] = {"obs": self.obs_buf}
        # Continue from the env's current state (TradingVecEnv resets itself on construction).
        assert env.state is not None
        self.obs_buf.copy_(trading.observe(env.market, env.state))
        self.progress_buf.copy_(env.state.step_count)

    def reset(self) -> dict[str, Tensor]:
        """Restart every env; returns ``{"obs": obs_buf}``."""
        obs, _ = self.env.reset()
        self.obs_buf.copy_(obs)
        self.rew_buf.zero_()
        self.reset_buf.zero_()
        self.timeout_buf.zero_()
        self.progress_buf.zero_()
        return self.obs_dict

    def reset_idx(self, env_ids: Tensor) -> None:
        """Restart only ``env_ids`` (indices) at fresh random start bars."""
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.env.device)
        mask[torch.as_tensor(env_ids, dtype=torch.long, device=self.env.device)] = True
        assert self.env.state is not None
        self.env.state, obs = trading.reset_where(
            self.env.market, self.env.params, self.env.state, mask, self.obs_buf
        )
        self.obs_buf.copy_(obs)
        self.progress_buf.masked_fill_(mask, 0)
        self.reset_buf.masked_fill_(mask, 0)
        self.timeout_buf.masked_fill_(mask, 0)

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Any]]:
        """One decision: ``(obs_dict, rew_buf, reset_buf, extras)``; done envs are already reset."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.obs_buf.copy_(obs)
        self.rew_buf.copy_(reward)
        self.reset_buf.copy_(terminated | truncated)
        self.timeout_buf.copy_(truncated)
        # progress_buf counts the decisions of the finished episode on its last step (as VecTask does).
        self.progress_buf.copy_(info["step_count"])
        self.extras = {**info, "time_outs": self.timeout_buf, "terminated": terminated}
        return self.obs_dict, self.rew_buf, self.reset_buf, self.extras

    def get_observations(self) -> Tensor:
        """The current observations (rsl_rl's accessor)."""
        return self.obs_buf


def _task_obs(out: Any) -> Tensor:
    """The policy observation tensor from a task's ``reset``/``step`` observation output."""
    if isinstance(out, Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "keys"):
        for key in ("obs", "policy"):
            if key in out:
                return out[key]
    raise TypeError(
        f"cannot find observations in {type(out).__name__} (expected a tensor or an 'obs'/'policy' entry)"
    )


def _first_attr(task: Any, *names: str) -> Any:
    for name in names:
        value = getattr(task, name, None)
        if value is not None:
            return value
    return None


def _space_or_box(space: Any, dim: int, low: float, high: float) -> Any:
    """The task's space when it has the right shape; else a float32 ``gymnasium.spaces.Box`` of ``dim``."""
    shape = getattr(space, "shape", None)
    if shape is not None and tuple(shape) == (dim,):
        return space
    return gymnasium.spaces.Box(low, high, shape=(dim,), dtype=np.float32)


class VecTaskEnv:
    """An Isaac Gym / Isaac Lab vectorized task as a Gymnasium-vector-style env of tensors."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.num_envs = int(task.num_envs)
        num_obs = _first_attr(task, "num_obs", "num_observations")
        num_acts = _first_attr(task, "num_acts", "num_actions")
        if num_obs is None or num_acts is None:
            raise TypeError("task must expose num_obs (or num_observations) and num_acts (or num_actions)")
        self.obs_dim = int(num_obs)
        self.action_dim = int(num_acts)
        self.num_assets = self.action_dim
        self.device = torch.device(_first_attr(task, "rl_device", "device") or "cpu")
        self.single_observation_space = _space_or_box(
            getattr(task, "observation_space", None), self.obs_dim, -np.inf, np.inf
        )
        self.single_action_space = _space_or_box(
            getattr(task, "action_space", None), self.action_dim, -1.0, 1.0
        )
        self.params = None
        self.market = None

    def reset(self, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        """Reset the task (``seed`` is ignored: Isaac tasks are seeded at creation)."""
        out = self.task.reset()
        if isinstance(out, tuple):  # Isaac Lab wrappers return (obs, extras)
            out = out[0]
        if out is None:  # some VecTask versions reset lazily and return nothing
            out = self.task.obs_dict if hasattr(self.task, "obs_dict") else self.task.obs_buf
        return _task_obs(out).to(self.device), {}

    def step(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """``(obs, reward, terminated, truncated, info)``: the task's resets split by ``time_outs``."""
        obs_out, reward, reset, extras = self.task.step(action)
        extras = dict(extras or {})
        done = torch.as_tensor(reset, device=self.device).bool()
        time_outs = extras.get("time_outs")
        if time_outs is None:
            time_outs = torch.zeros_like(done)
        time_outs = torch.as_tensor(time_outs, device=self.device).bool()
        truncated = done & time_outs
        terminated = done & ~time_outs
        obs = _task_obs(obs_out).to(self.device)
        info = {**extras, "final_obs": obs}
        return obs, torch.as_tensor(reward, device=self.device).float(), terminated, truncated, info


def from_vec_task(task: Any) -> VecTaskEnv:
    """Wrap an Isaac Gym ``VecTask`` (or Isaac Lab rsl_rl-style env) for our trainers."""
    return VecTaskEnv(task)
