"""``TradingVecEnv``: a stateful, Gymnasium-vector-style shell around the pure ``envs.trading``.

``obs, info = env.reset(); obs, reward, terminated, truncated, info = env.step(action)``, all
tensors on ``env.device``. Autoreset is same-step (Gymnasium's ``SAME_STEP`` mode): the returned
``obs`` of a done env is already its next episode's first observation and
``info["final_obs"]`` holds the observation the episode ended on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from data.market import MarketData
from envs import trading
from envs.backends.compiled import check_mode
from envs.observation import obs_dim
from envs.trading import EnvParams, EnvState

#: ``compile="auto"`` takes the fast step (native on CPU, torch.compile elsewhere) from this many envs on
#: (docs/env.md).
COMPILE_MIN_ENVS = 1024


@dataclass(frozen=True)
class Box:
    """A tiny stand-in for ``gymnasium.spaces.Box`` (gymnasium is not a dependency)."""

    low: np.ndarray
    high: np.ndarray
    shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def uniform(cls, low: float, high: float, shape: tuple[int, ...]) -> Box:
        return cls(
            low=np.full(shape, low, dtype=np.float32),
            high=np.full(shape, high, dtype=np.float32),
            shape=shape,
            dtype=np.dtype(np.float32),
        )

    def contains(self, x: np.ndarray | Tensor) -> bool:
        """True when ``x`` has this shape and lies within the bounds."""
        arr = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
        return arr.shape == self.shape and bool(np.all(arr >= self.low) and np.all(arr <= self.high))

    def sample(self, generator: np.random.Generator | None = None) -> np.ndarray:
        """A uniform sample (infinite bounds are replaced by a standard normal draw)."""
        rng = generator or np.random.default_rng()
        finite = np.isfinite(self.low) & np.isfinite(self.high)
        out = rng.standard_normal(self.shape).astype(np.float32)
        bounded = rng.uniform(np.where(finite, self.low, 0), np.where(finite, self.high, 1)).astype(
            np.float32
        )
        return np.where(finite, bounded, out)


class TradingVecEnv:
    """``num_envs`` trading environments stepped as one batch on ``device``."""

    def __init__(
        self,
        market: MarketData,
        params: EnvParams | None = None,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: str = "auto",
    ) -> None:
        self.params = params if params is not None else EnvParams()
        self.device = torch.device(device)
        self.market = market.to(self.device)
        self.num_envs = int(num_envs)
        self.num_assets = self.market.num_assets
        self.num_features = self.market.num_features
        self.obs_dim = obs_dim(self.num_assets, self.num_features)
        self.action_dim = self.num_assets
        self.single_observation_space = Box.uniform(-np.inf, np.inf, (self.obs_dim,))
        if self.params.action_mode == "weights":
            self.single_action_space = Box.uniform(0.0, 1.0, (self.action_dim,))
        else:
            self.single_action_space = Box.uniform(-1.0, 1.0, (self.action_dim,))
        self.observation_space = Box.uniform(-np.inf, np.inf, (self.num_envs, self.obs_dim))
        self.action_space = Box(
            low=np.broadcast_to(self.single_action_space.low, (self.num_envs, self.action_dim)).copy(),
            high=np.broadcast_to(self.single_action_space.high, (self.num_envs, self.action_dim)).copy(),
            shape=(self.num_envs, self.action_dim),
            dtype=np.dtype(np.float32),
        )
        # The fast step (envs.backends.native on CPU, .compiled elsewhere): "auto" takes it from
        # COMPILE_MIN_ENVS envs on, where it measured faster than eager and its one-off build
        # repays itself (docs/env.md); smaller batches stay eager (bitwise the tested path).
        mode = check_mode(compile)
        self.compiled = mode == "on" or (mode == "auto" and self.num_envs >= COMPILE_MIN_ENVS)
        self._seed = int(seed)
        self.state: EnvState | None = None
        # Validates num_envs and that the market is long enough before anyone steps.
        self.reset(seed=self._seed)

    def reset(self, seed: int | None = None, start: int | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """Fresh episodes for every env (random starts, or all at bar ``start``)."""
        if seed is not None:
            self._generator = torch.Generator().manual_seed(int(seed))
        self.state, obs = trading.reset(self.market, self.params, self.num_envs, self._generator, start=start)
        return obs, {"t": self.state.t}

    def step(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """One decision for every env: ``(obs, reward, terminated, truncated, info)``."""
        assert self.state is not None  # set in __init__
        self.state, obs, reward, terminated, truncated, info = trading.step(
            self.market, self.params, self.state, action, compiled=self.compiled
        )
        return obs, reward, terminated, truncated, info

    def __repr__(self) -> str:
        return (
            f"TradingVecEnv(num_envs={self.num_envs}, num_assets={self.num_assets}, "
            f"num_features={self.num_features}, device={self.device}, compiled={self.compiled}, "
            f"params={self.params})"
        )
