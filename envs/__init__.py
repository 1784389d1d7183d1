"""envs: the vectorized trading environment (pure ``reset``/``step``) and its shells."""

from envs.trading import EnvParams, EnvState, obs_dim, observe, reset, reset_where, split_obs, step
from envs.vec_env import TradingVecEnv

__all__ = [
    "EnvParams",
    "EnvState",
    "TradingVecEnv",
    "obs_dim",
    "observe",
    "reset",
    "reset_where",
    "split_obs",
    "step",
]
