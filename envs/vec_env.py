"""``TradingVecEnv``: a ``gymnasium.vector.VectorEnv`` around the pure ``envs.trading``.

``obs, info = env.reset(); obs, reward, terminated, truncated, info = env.step(action)``, all
**torch tensors** on ``env.device`` (Gymnasium's vector API allows any array type; its
``ArrayConversion`` wrappers or :mod:`envs.sb3` give numpy at the boundary). The spaces are real
``gymnasium.spaces.Box`` (float32): ``single_observation_space`` ``(obs_dim,)``,
``single_action_space`` ``(A,)`` and their batched forms.

Autoreset is Gymnasium's ``AutoresetMode.SAME_STEP`` (declared in ``metadata["autoreset_mode"]``):
a done env restarts inside the step that ended its episode, the returned ``obs`` row is the new
episode's first observation and ``info["final_obs"]`` holds the observation the episode ended on.
One difference in layout from ``SyncVectorEnv``'s same-step infos, which hold ``final_obs`` as an
object array filled only for done envs (mask ``_final_obs``) and ``final_info`` per env:
here ``info["final_obs"]`` is one dense ``(N, obs_dim)`` tensor (rows of envs that are not done
equal ``obs``), ``info["_final_obs"]`` is ``terminated | truncated``, and every other info entry
already describes the step before any reset (so it is the final info of done envs).

Registered as ``podracer/Trading-v0`` (``envs.gym_registration``): ``gymnasium.make_vec(
"podracer/Trading-v0", num_envs=N, market=..., params=...)`` builds this class.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from torch import Tensor

from data.market import MarketData
from envs import trading
from envs.fast_step import step_flags, step_kernel
from envs.observation import obs_dim
from envs.trading import EnvParams, EnvState


def observation_box(obs_dim: int) -> gymnasium.spaces.Box:
    """One env's observation space: unbounded float32 ``(obs_dim,)`` (features are z-scores)."""
    return gymnasium.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32)


def action_box(params: EnvParams, num_assets: int) -> gymnasium.spaces.Box:
    """One env's action space: target weights in [0, 1] or delta-share fractions in [-1, 1]."""
    low = 0.0 if params.action_mode == "weights" else -1.0
    return gymnasium.spaces.Box(low, 1.0, shape=(num_assets,), dtype=np.float32)


class TradingVecEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` trading environments stepped as one batch on ``device`` (tensors in and out).

    ``fast_step`` (the config's ``[env] fast_step``): ``"on"`` steps through the fast path (the
    native C kernel on CPU, ``torch.compile`` elsewhere), ``"off"`` eagerly, ``"auto"`` takes each
    fast kernel from the batch size where it pays (:func:`envs.fast_step.step_flags`);
    :attr:`step_kernel` says which one runs.

    >>> import torch
    >>> from data.toy import toy_market
    >>> from envs import EnvParams
    >>> from envs.vec_env import TradingVecEnv
    >>> market = toy_market(num_steps=200, num_assets=3, num_features=2)
    >>> env = TradingVecEnv(market, EnvParams(decision_interval=5, episode_len=4), num_envs=8, seed=0)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, obs.dtype, env.single_action_space.shape
    (torch.Size([8, 14]), torch.float32, (3,))
    >>> for _ in range(4):
    ...     obs, reward, terminated, truncated, info = env.step(torch.full((8, 3), 0.3))
    >>> reward.shape, bool(truncated.all())  # the 4th decision ends every episode (episode_len=4)
    (torch.Size([8]), True)
    >>> bool(torch.equal(info["final_obs"], obs))  # obs: the new episodes' first observations
    False
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        market: MarketData,
        params: EnvParams | None = None,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int = 0,
        fast_step: str = "auto",
    ) -> None:
        self.params = params if params is not None else EnvParams()
        self.device = torch.device(device)
        self.market = market.to(self.device)
        self.num_envs = int(num_envs)
        self.num_assets = self.market.num_assets
        self.num_features = self.market.num_features
        self.obs_dim = obs_dim(self.num_assets, self.num_features)
        self.action_dim = self.num_assets
        self.single_observation_space = observation_box(self.obs_dim)
        self.single_action_space = action_box(self.params, self.action_dim)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        # The fast step: the native C kernel on CPU, torch.compile elsewhere ("auto": envs.fast_step).
        self.fast, self._fallback_to_compile = step_flags(fast_step, self.device, self.num_envs)
        self._seed = int(seed)
        self.state: EnvState | None = None
        # Validates num_envs and that the market is long enough before anyone steps.
        self.reset(seed=self._seed)

    def reset(
        self,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        *,
        start: int | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Fresh episodes for every env (random starts, or all at bar ``start``; also
        ``options={"start": bar}``, Gymnasium's way to pass it)."""
        if options and "start" in options:
            start = options["start"]
        if seed is not None:
            super().reset(seed=int(seed))  # seeds self.np_random, as Gymnasium envs do
            self._generator = torch.Generator().manual_seed(int(seed))
        self.state, obs = trading.reset(self.market, self.params, self.num_envs, self._generator, start=start)
        return obs, {"t": self.state.t}

    def step(
        self, action: Tensor, *, validate: bool = True
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """One decision for every env: ``(obs, reward, terminated, truncated, info)``.

        ``validate=False`` skips the action checks (``envs.trading.step``'s: a host sync per step on
        a GPU) for a caller whose actions are known to be finite and shaped ``(N, A)``."""
        assert self.state is not None  # set in __init__
        self.state, obs, reward, terminated, truncated, info = trading.step(
            self.market,
            self.params,
            self.state,
            action,
            validate=validate,
            fast=self.fast,
            fallback_to_compile=self._fallback_to_compile,
        )
        info["_final_obs"] = terminated | truncated  # Gymnasium's mask name for same-step final_obs
        return obs, reward, terminated, truncated, info

    @property
    def step_kernel(self) -> str:
        """What :meth:`step` runs: ``"native"``, ``"torch.compile"`` or ``"eager"``."""
        assert self.state is not None  # set in __init__
        return step_kernel(self.market, self.params, self.state, self.fast, self._fallback_to_compile)

    def __repr__(self) -> str:
        return (
            f"TradingVecEnv(num_envs={self.num_envs}, num_assets={self.num_assets}, "
            f"num_features={self.num_features}, device={self.device}, fast={self.fast}, "
            f"params={self.params})"
        )
