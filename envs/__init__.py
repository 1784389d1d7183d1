"""envs: the vectorized trading environment (pure ``reset``/``step``) and its shells.

Importing the package registers the gymnasium env and names its settings (``EnvParams``), and loads no
torch: the env itself is ``envs.trading`` (``reset``, ``step``), ``envs.vec_env.TradingVecEnv`` and
``envs.observation``."""

from envs.gym_registration import ENV_ID
from envs.params import EnvParams

__all__ = ["ENV_ID", "EnvParams"]
