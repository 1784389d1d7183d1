"""envs: the vectorized trading environment (pure ``reset``/``step``) and its shells."""

from envs.gym_registration import ENV_ID
from envs.observation import NUM_GLOBAL, obs_dim, split_obs
from envs.trading import EnvParams, EnvState, StepResult, observe, reset, reset_where, step, step_env
from envs.vec_env import TradingVecEnv

__all__ = [
    "ENV_ID",
    "NUM_GLOBAL",
    "EnvParams",
    "EnvState",
    "StepResult",
    "TradingVecEnv",
    "obs_dim",
    "observe",
    "reset",
    "reset_where",
    "split_obs",
    "step",
    "step_env",
]
