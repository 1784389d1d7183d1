"""``TradingEnv``: one trading env as a plain ``gymnasium.Env`` of numpy arrays.

For tools that want a single, non-vectorized env (``gymnasium.make``, ``check_env``, Gymnasium's
own ``SyncVectorEnv``, tutorials). It runs a one-env :class:`~envs.vec_env.TradingVecEnv` (the same step
kernel as any one-env vector env: the native kernel on the CPU, else eager) and converts at the boundary, so it is as slow as any one-env Python loop: train on
the vector env (or its adapters) instead.

Episodes end the Gymnasium way: the step that ends an episode returns the observation it ended on
(the vector env's ``info["final_obs"]`` row) and ``terminated``/``truncated``; the caller then calls
:meth:`reset`. ``info`` holds the step's pre-reset quantities as numpy scalars (``cost``,
``traded_notional``, ``value``, ``step_count``, ``bar_t``, ...).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from torch import Tensor

from data.market import MarketData
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv, action_box, observation_box

#: Vector-env info entries that make no sense for one env (its obs already is the final one).
_VECTOR_ONLY = ("final_obs", "_final_obs", "shares_traded")


class TradingEnv(gymnasium.Env):
    """One trading env (numpy in and out); see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        market: MarketData,
        params: EnvParams | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        self.vec = TradingVecEnv(market, params, num_envs=1, device=device, seed=seed)
        self.params = self.vec.params
        self.obs_dim = self.vec.obs_dim
        self.observation_space = observation_box(self.vec.obs_dim)
        self.action_space = action_box(self.vec.params, self.vec.action_dim)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.vec.reset(seed=seed, options=options)
        return _row(obs), _info(info)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        batch = torch.as_tensor(np.asarray(action, dtype=np.float32).reshape(1, -1))
        obs, reward, terminated, truncated, info = self.vec.step(batch)
        done = bool(terminated[0]) or bool(truncated[0])
        # The vector env already restarted a done env; a single env hands back the last observation.
        last = info["final_obs"] if done else obs
        return _row(last), float(reward[0]), bool(terminated[0]), bool(truncated[0]), _info(info)


def _row(x: Tensor) -> np.ndarray:
    return x[0].detach().cpu().numpy().copy()


def _info(info: dict[str, Tensor]) -> dict[str, Any]:
    return {k: v[0].detach().cpu().numpy() for k, v in info.items() if k not in _VECTOR_ONLY}
