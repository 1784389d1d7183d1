"""Peer RL libraries train on the trading env through its adapters (a few thousand env-steps each).

Stable-Baselines3's PPO through :class:`envs.sb3.SB3VecEnv` and skrl's PPO through
``wrap_env(IsaacLabEnv(...), wrapper="isaaclab")``. Both libraries are in the ``test`` extra; the
tests skip cleanly where they are not installed. What is checked: training runs to its step
budget, the env was stepped that many times, losses are finite and the weights moved.
"""

from __future__ import annotations

import math

import pytest
import torch

from envs.isaaclab import IsaacLabEnv
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")

PARAMS = EnvParams(decision_interval=3, episode_len=16)
NUM_ENVS = 16


class CountingEnv(TradingVecEnv):
    """Counts env-steps (decisions of one env) taken through ``step``."""

    env_steps = 0

    def step(self, action):
        self.env_steps += self.num_envs
        return super().step(action)


def _params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in module.parameters()])


def test_sb3_ppo_trains_through_the_adapter(market):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from envs.sb3 import SB3VecEnv

    losses: list[float] = []

    class Losses(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_start(self) -> None:  # the previous update's metrics are still recorded here
            losses.extend(v for k, v in self.logger.name_to_value.items() if k.endswith("loss"))

    env = CountingEnv(market, PARAMS, num_envs=NUM_ENVS, seed=0)
    model = PPO(
        "MlpPolicy",
        SB3VecEnv(env),
        n_steps=32,
        batch_size=128,
        n_epochs=2,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [32, 32]},
    )
    before = _params(model.policy)
    model.learn(total_timesteps=4 * 32 * NUM_ENVS, callback=Losses())
    assert env.env_steps == model.num_timesteps == 4 * 32 * NUM_ENVS
    losses.extend(v for k, v in model.logger.name_to_value.items() if k.endswith("loss"))
    assert len(losses) >= 3 * 3 and all(math.isfinite(float(v)) for v in losses)
    after = _params(model.policy)
    assert torch.isfinite(after).all() and not torch.equal(before, after)


def test_skrl_ppo_trains_through_the_isaaclab_adapter(market):
    pytest.importorskip("skrl")
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.trainers.torch import SequentialTrainer

    class Actor(GaussianMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            GaussianMixin.__init__(self)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(self.num_observations, 32),
                torch.nn.Tanh(),
                torch.nn.Linear(32, self.num_actions),
            )
            self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs, role):
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Critic(DeterministicMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            DeterministicMixin.__init__(self)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(self.num_observations, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
            )

        def compute(self, inputs, role):
            return self.net(inputs["observations"]), {}

    native = CountingEnv(market, PARAMS, num_envs=NUM_ENVS, seed=0)
    env = wrap_env(IsaacLabEnv(native), wrapper="isaaclab", verbose=False)
    assert env.num_envs == NUM_ENVS and env.observation_space.shape == (native.obs_dim,)
    models = {
        "policy": Actor(env.observation_space, env.action_space, env.device),
        "value": Critic(env.observation_space, env.action_space, env.device),
    }
    cfg = PPO_CFG(rollouts=32, learning_epochs=2, mini_batches=4)
    cfg.experiment.write_interval = 0  # no TensorBoard files; tracking data stays in memory
    cfg.experiment.checkpoint_interval = 0
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=32, num_envs=env.num_envs, device=env.device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )
    before = _params(models["policy"])
    trainer_cfg = {"timesteps": 4 * 32, "headless": True, "disable_progressbar": True}
    SequentialTrainer(env=env, agents=agent, cfg={**trainer_cfg, "close_environment_at_exit": False}).train()
    assert native.env_steps == 4 * 32 * NUM_ENVS
    losses = agent.tracking_data["Loss / Policy loss"] + agent.tracking_data["Loss / Value loss"]
    assert len(losses) == 2 * 4 and all(math.isfinite(v) for v in losses)
    after = _params(models["policy"])
    assert torch.isfinite(after).all() and not torch.equal(before, after)
