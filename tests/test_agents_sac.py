"""SAC with a critic ensemble: target (min/mean), ensemble independence, replay, determinism, save/load."""

from __future__ import annotations

import pytest
import torch
from helpers import toy_env

from agents import sac, training
from agents.checkpoint import Checkpoint
from agents.policy import Policy
from data.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def _small(**kw):
    base = {"total_steps": 64, "learning_starts": 16, "batch_size": 16, "buffer_size": 256, "num_critics": 3}
    return sac.SACArgs(**{**base, **kw})


def test_ensemble_target_min_and_mean():
    next_q = torch.tensor([[1.0, 4.0], [3.0, 2.0], [2.0, 0.0]])  # K=3 critics, 2 transitions
    rewards = torch.tensor([0.5, 1.0])
    terminated = torch.tensor([0.0, 1.0])
    logp = torch.tensor([-2.0, 7.0])
    t_min = sac.ensemble_target(next_q, rewards, terminated, logp, gamma=0.9, alpha=0.1, mode="min")
    t_mean = sac.ensemble_target(next_q, rewards, terminated, logp, gamma=0.9, alpha=0.1, mode="mean")
    # transition 0: min 1.0, mean 2.0; soft value adds -alpha*logp = +0.2; transition 1 is terminal
    assert torch.allclose(t_min, torch.tensor([0.5 + 0.9 * (1.0 + 0.2), 1.0]))
    assert torch.allclose(t_mean, torch.tensor([0.5 + 0.9 * (2.0 + 0.2), 1.0]))
    with pytest.raises(ValueError):
        sac.ensemble_target(next_q, rewards, terminated, logp, gamma=0.9, alpha=0.1, mode="max")


def test_critic_members_are_independent_and_depend_on_the_action():
    torch.manual_seed(0)
    critics = sac.CriticEnsemble(4, num_assets=5, num_features=3, embed=8, hidden=16)
    obs = torch.randn(6, 2 + 5 * 5)  # envs.observation.obs_dim(5, 3)
    a1 = torch.softmax(torch.randn(6, 6), 1)[:, :5]
    a2 = torch.softmax(torch.randn(6, 6), 1)[:, :5]
    q = critics(obs, a1)
    assert q.shape == (4, 6)
    assert not torch.allclose(q[0], q[1])  # different inits
    assert not torch.allclose(q, critics(obs, a2))
    # member k's output only depends on member k's weights
    with torch.no_grad():
        critics.out.weight[2].add_(1.0)
    q2 = critics(obs, a1)
    assert torch.allclose(q2[[0, 1, 3]], q[[0, 1, 3]]) and not torch.allclose(q2[2], q[2])


def test_replay_buffer_wraps_around():
    buf = sac.ReplayBuffer(5, obs_dim=2, action_dim=1, device=torch.device("cpu"))
    for i in range(3):
        obs = torch.full((2, 2), float(i))
        buf.add(obs, torch.zeros(2, 1), torch.full((2,), float(i)), obs + 1, torch.zeros(2, dtype=torch.bool))
    assert buf.size == 5 and buf.pos == 1
    assert buf.rewards.tolist() == [2.0, 0.0, 1.0, 1.0, 2.0]  # slot 0 overwritten by the third add
    batch = buf.sample(8, torch.Generator().manual_seed(0))
    assert batch["obs"].shape == (8, 2) and torch.equal(batch["next_obs"], batch["obs"] + 1)


def test_truncated_transitions_store_final_obs_and_are_not_terminal(toy):
    env = toy_env(toy)
    policy, _ = training.policy_for_env(None, env, _small(), "sac")
    buf = sac.ReplayBuffer(64, env.obs_dim, env.num_assets, torch.device("cpu"))
    obs, _ = env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):  # episode_len=8: the 8th step truncates every env
        prev = buf.pos
        obs_next, _, done, info = sac.collect_step(policy, env, buf, obs, gen, update_norm=True)
        obs = obs_next
    assert bool(done.all())
    assert torch.equal(buf.next_obs[prev : prev + 4], info["final_obs"])
    assert not torch.equal(buf.next_obs[prev : prev + 4], obs_next)
    assert float(buf.terminated.sum()) == 0.0


def test_sac_trains_deterministically_and_saves(tmp_path, toy):
    args = _small(seed=5)
    a = sac.train(args, toy_env(toy))
    b = sac.train(args, toy_env(toy))
    wa, wb = a.policy.net.state_dict(), b.policy.net.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a.env_steps == 64 and any("losses/critic_loss" in row for row in a.history)
    Checkpoint(a.policy, a.optimizer_state).save(tmp_path / "s")
    loaded = Policy.load(tmp_path / "s")
    obs = torch.randn(3, loaded.obs_dim)
    assert loaded.meta.algo == "sac" and torch.equal(loaded.act(obs), a.policy.act(obs))
    warm = sac.train(_small(seed=6), toy_env(toy), init=Checkpoint.load(tmp_path / "s"))
    assert warm.env_steps == 64


def test_invalid_sac_args():
    with pytest.raises(ConfigError, match="critic_target"):
        sac.SACArgs(critic_target="max")
    with pytest.raises(ConfigError, match="num_critics"):
        sac.SACArgs(num_critics=0)
