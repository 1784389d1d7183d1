"""Registers the trading env with Gymnasium as ``podracer/Trading-v0`` (on ``import envs``).

- ``gymnasium.make_vec("podracer/Trading-v0", num_envs=N, market=m, params=p, device=..., seed=...)``
  builds a :class:`~envs.vec_env.TradingVecEnv` directly (the *vector entry point*: one batched
  env, torch tensors, same-step autoreset), not N copies of a single env;
- ``gymnasium.make("podracer/Trading-v0", market=m, params=p)`` builds the single-env numpy view
  :class:`~envs.single_env.TradingEnv` (and ``make_vec(..., vectorization_mode="sync")`` N of them).

Entry points are strings, so registering imports neither class. Without ``import envs`` first,
the id ``"envs:podracer/Trading-v0"`` makes Gymnasium import the package itself.
"""

from __future__ import annotations

import gymnasium

ENV_ID = "podracer/Trading-v0"


def register() -> None:
    """Register :data:`ENV_ID` (idempotent)."""
    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="envs.single_env:TradingEnv",
        vector_entry_point="envs.vec_env:TradingVecEnv",
        disable_env_checker=False,
    )


register()
