"""Isaac Lab surface: the trading env in the shape of an Isaac Lab *direct-workflow* env.

:class:`IsaacLabEnv` wraps a :class:`~envs.vec_env.TradingVecEnv` (no copies: every tensor it
returns is the env's own, on the env's device, CPU or GPU) with what Isaac Lab's ``DirectRLEnv``
exposes and what the RL libraries' Isaac Lab wrappers read:

- ``reset(seed=None, options=None) -> ({"policy": obs}, extras)``;
- ``step(actions) -> ({"policy": obs}, reward, terminated, truncated, extras)``: ``(N,)`` float32
  rewards and bool ``terminated`` / ``truncated`` (time-outs), envs reset in the same step as Isaac
  Lab's do (``extras`` is the env's info, with ``final_obs`` the pre-reset observation, and an
  empty ``"log"`` dict where Isaac Lab puts episode logs);
- ``num_envs``, ``device``, ``unwrapped``, ``single_observation_space`` (a ``Dict`` with the
  ``"policy"`` ``Box``), ``single_action_space``, the batched ``observation_space`` /
  ``action_space``, ``max_episode_length``, ``episode_length_buf`` (settable: rsl_rl randomizes it
  to spread the envs' time-outs), ``cfg.is_finite_horizon`` (False: truncations are time-outs to
  bootstrap), ``_get_observations()``, ``seed()``, ``render_mode``, ``close()``.

So ``skrl.envs.wrappers.torch.wrap_env(IsaacLabEnv(env), wrapper="isaaclab")`` trains it with skrl
(``benchmarks/vs_peers.py``), and rsl_rl-style runners, which read exactly these attributes
through Isaac Lab's ``RslRlVecEnvWrapper`` logic, can drive it. Isaac Lab itself is not needed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium
import torch
from gymnasium.vector.utils import batch_space
from torch import Tensor

from envs import trading
from envs.vec_env import TradingVecEnv


@dataclass(frozen=True)
class IsaacLabCfg:
    """The part of Isaac Lab's env config that wrappers read."""

    num_envs: int
    decimation: int = 1
    #: False: a truncation is a time-out of a continuing task (rsl_rl then bootstraps it).
    is_finite_horizon: bool = False


class IsaacLabEnv:
    """A :class:`~envs.vec_env.TradingVecEnv` in Isaac Lab's direct-workflow shape."""

    metadata: dict[str, Any] = {"render_modes": [None]}
    render_mode: str | None = None

    def __init__(self, env: TradingVecEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.device = env.device
        self.cfg = IsaacLabCfg(num_envs=env.num_envs)
        self.max_episode_length = env.params.episode_len
        self.single_observation_space = gymnasium.spaces.Dict({"policy": env.single_observation_space})
        self.single_action_space = env.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = env.action_space
        self._seed: int | None = None
        assert env.state is not None  # TradingVecEnv resets itself on construction
        self._obs = {"policy": _observe(env)}

    @property
    def unwrapped(self) -> IsaacLabEnv:
        return self

    @property
    def num_actions(self) -> int:
        return self.env.action_dim

    @property
    def episode_length_buf(self) -> Tensor:
        """Decisions taken in each env's episode ``(N,)`` int64 (the env truncates at ``max_episode_length``)."""
        assert self.env.state is not None
        return self.env.state.step_count

    @episode_length_buf.setter
    def episode_length_buf(self, value: Tensor) -> None:
        assert self.env.state is not None
        count = torch.as_tensor(value, device=self.device).to(torch.int64)
        count = count.clamp(0, self.max_episode_length - 1)  # an env must have a decision left
        self.env.state = dataclasses.replace(self.env.state, step_count=count)

    def seed(self, seed: int = -1) -> int:
        """Seed for the next :meth:`reset` (``-1``: keep the env's generator); returns it."""
        self._seed = None if seed == -1 else int(seed)
        return seed

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        seed = seed if seed is not None else self._seed
        self._seed = None
        obs, info = self.env.reset(seed=seed, options=options)
        self._obs = {"policy": obs}
        return self._obs, {**info, "log": {}}

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self._obs = {"policy": obs}
        info["log"] = {}
        return self._obs, reward, terminated, truncated, info

    def _get_observations(self) -> dict[str, Tensor]:
        """The current observations (what Isaac Lab's direct envs compute for ``get_observations``)."""
        return self._obs

    def render(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        self.env.close()


def _observe(env: TradingVecEnv) -> Tensor:
    assert env.state is not None
    return trading.observe(env.market, env.state)
