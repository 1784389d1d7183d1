"""Stable-Baselines3 surface: the trading env as an SB3 ``VecEnv`` (numpy at the boundary).

    from stable_baselines3 import PPO
    from envs.sb3 import SB3VecEnv
    model = PPO("MlpPolicy", SB3VecEnv(TradingVecEnv(market, params, num_envs=64)), n_steps=32)
    model.learn(100_000)

:class:`SB3VecEnv` steps the whole batch with one call of the wrapped
:class:`~envs.vec_env.TradingVecEnv` (no Python loop over envs in the step); observations, rewards
and dones cross as numpy arrays (zero-copy views of the env's CPU tensors; one device-to-host copy
on a GPU). SB3's ``VecEnv`` contract needs one info dict per env: they are fresh empty dicts, and
only the envs that finished an episode get SB3's ``terminal_observation`` (the vector env's
``info["final_obs"]`` row) and ``TimeLimit.truncated`` entries, which SB3's PPO uses to bootstrap
time limits. Same-step autoreset, as SB3 expects: the returned observation of a done env is
already its next episode's first one.

stable-baselines3 is an optional library (the ``peers``/``test`` extras): importing this module
without it raises a one-line :class:`~data.errors.PodracerError` saying how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from data.errors import PodracerError
from envs.vec_env import TradingVecEnv

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices
except ModuleNotFoundError as exc:  # optional library: one clear line instead of a traceback
    raise PodracerError(
        "envs.sb3 needs stable-baselines3: pip install 'podracer[peers]' (or stable-baselines3)"
    ) from exc


def _numpy(x: Tensor) -> np.ndarray:
    """A numpy view of ``x`` (CPU), or a host copy (other devices)."""
    return x.detach().cpu().numpy()


class SB3VecEnv(VecEnv):
    """A :class:`~envs.vec_env.TradingVecEnv` behind SB3's ``VecEnv`` API (single-env spaces)."""

    def __init__(self, env: TradingVecEnv) -> None:
        self.env = env
        self._actions: Tensor | None = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    # --- the step -------------------------------------------------------------------------------
    def reset(self) -> np.ndarray:
        """Restart every env (seeded by the last :meth:`seed` call, once, as SB3 envs are)."""
        seed = self._seeds[0]
        options = self._options[0] or None
        obs, _ = self.env.reset(seed=seed, options=options)
        self._reset_seeds()
        self._reset_options()
        return _numpy(obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = torch.as_tensor(actions, dtype=torch.float32, device=self.env.device)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        self._actions = None
        done = terminated | truncated
        dones = _numpy(done)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        finished = np.flatnonzero(dones)
        if finished.size:  # only done envs carry SB3's end-of-episode entries
            final_obs = _numpy(info["final_obs"])
            time_limit = _numpy(truncated & ~terminated)
            for i in finished:
                infos[i]["terminal_observation"] = final_obs[i]
                infos[i]["TimeLimit.truncated"] = bool(time_limit[i])
        return _numpy(obs), _numpy(reward.to(torch.float32)), dones, infos

    def close(self) -> None:
        self.env.close()

    # --- SB3's per-env attribute API (one env object serves every index) --------------------------
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"SB3VecEnv: the trading envs share one batch; cannot set {attr_name!r} per env")

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        raise AttributeError(f"SB3VecEnv: no per-env methods (asked for {method_name!r})")

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]
