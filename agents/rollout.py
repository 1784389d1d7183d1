"""The worker's side of an on-policy learner: rollout storage, collection and GAE.

``collect_rollout`` steps ``num_envs`` envs for ``num_steps`` steps with the current stochastic policy
and stores everything on the env's device, shaped ``(num_steps, num_envs, ...)`` (``Rollout``).
Observations are normalized with running statistics updated on the fly and stored in the network's
packed form (``PerAssetActorCritic.pack``: computed once, reused by every epoch of the update). When
an episode is truncated (time limit, not a real end), its reward is bootstrapped with
``gamma * V(final_obs)`` from ``info["final_obs"]``, so the time limit does not look like a terminal
state. ``compute_gae`` turns rewards and values into advantages and returns. The learner that
consumes them is :func:`agents.ppo.update`; a population of pods (:mod:`agents.population`) draws
each pod's action noise as ``rollout_noise`` draws it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agents.policy import Policy, gaussian_log_prob


@dataclass
class Rollout:
    """One rollout on the device, time-major ``(num_steps, num_envs, ...)``.

    The normalized observations are kept in the network's packed form
    (:meth:`~agents.networks.PerAssetActorCritic.pack`: per-asset inputs asset-minor plus the pooled,
    weight-free inputs), computed once when acting and reused by every epoch of the update.
    """

    packed: tuple[Tensor, ...]  # (S, N, ...) each: net.pack of the normalized observations acted on
    raw: Tensor  # (S, N, raw_dim) raw Gaussian samples (pre-softmax)
    logprobs: Tensor  # (S, N) log-probabilities of raw
    values: Tensor  # (S, N) critic values at obs
    rewards: Tensor  # (S, N) rewards, truncations bootstrapped with gamma * V(final_obs)
    dones: Tensor  # (S, N) 1.0 where the episode ended with this step (terminated or truncated)
    next_value: Tensor  # (N,) value of the observation after the last step

    @classmethod
    def empty(cls, num_steps: int, num_envs: int, policy: Policy, device: torch.device) -> Rollout:
        z = {"device": device, "dtype": torch.float32}
        with torch.no_grad():
            probe = policy.net.pack(torch.zeros(1, policy.obs_dim, **z))
        return cls(
            packed=tuple(torch.zeros(num_steps, num_envs, *p.shape[1:], **z) for p in probe),
            raw=torch.zeros(num_steps, num_envs, policy.raw_dim, **z),
            logprobs=torch.zeros(num_steps, num_envs, **z),
            values=torch.zeros(num_steps, num_envs, **z),
            rewards=torch.zeros(num_steps, num_envs, **z),
            dones=torch.zeros(num_steps, num_envs, **z),
            next_value=torch.zeros(num_envs, **z),
        )


@dataclass
class RolloutState:
    """What carries over between rollouts: the live observation and running episode stats."""

    obs: Tensor  # (N, obs_dim) raw observation of the envs' current state
    episode_return: Tensor  # (N,) sum of env rewards since the episode started
    episode_length: Tensor  # (N,) steps since the episode started


def rollout_noise(
    generator: torch.Generator, num_steps: int, num_envs: int, raw_dim: int, *, out: Tensor | None = None
) -> Tensor:
    """A rollout's action noise, ``(num_steps, num_envs, raw_dim)`` standard normal float32, in one
    draw from ``generator`` (into ``out`` when given: the same numbers)."""
    shape = (num_steps, num_envs, raw_dim)
    if out is not None:
        return torch.randn(shape, generator=generator, out=out)
    return torch.randn(shape, generator=generator, device=generator.device)


@torch.no_grad()
def collect_rollout(
    policy: Policy,
    env: Any,
    rollout: Rollout,
    state: RolloutState,
    generator: torch.Generator,
    *,
    gamma: float,
    update_norm: bool = True,
) -> tuple[RolloutState, dict[str, float]]:
    """Fill ``rollout`` with ``num_steps`` steps of every env (the worker); returns stats."""
    num_steps, num_envs = rollout.raw.shape[:2]
    obs = state.obs
    ep_ret, ep_len = state.episode_return, state.episode_length
    finished_returns: list[Tensor] = []
    finished_lengths: list[Tensor] = []
    reward_sum = torch.zeros((), device=obs.device)
    cost_sum = torch.zeros((), device=obs.device)
    noises = rollout_noise(generator, num_steps, num_envs, rollout.raw.shape[2]).to(rollout.raw)
    for step in range(num_steps):
        if update_norm:
            policy.obs_norm.update(obs)
        packed = policy.net.pack(policy.obs_norm.normalize(obs))
        mean, std, value = policy.dist_params_packed(packed)
        raw = mean + std * noises[step]
        for buffer, part in zip(rollout.packed, packed, strict=True):
            buffer[step] = part
        rollout.raw[step] = raw
        rollout.logprobs[step] = gaussian_log_prob(raw, mean, std)
        rollout.values[step] = value

        obs, reward, terminated, truncated, info = env.step(policy.to_action(raw, obs))
        reward = reward.to(torch.float32)
        done = terminated | truncated
        # A time limit is not a terminal state: bootstrap from the pre-reset observation.
        cut = truncated & ~terminated
        boot = torch.zeros_like(reward)
        if bool(cut.any()):
            final_norm = policy.obs_norm.normalize(info["final_obs"][cut])
            boot[cut] = gamma * policy.net.value(final_norm)
        rollout.rewards[step] = reward + boot
        rollout.dones[step] = done.to(torch.float32)

        reward_sum += reward.sum()
        if "cost" in info:
            cost_sum += info["cost"].sum()
        ep_ret = ep_ret + reward
        ep_len = ep_len + 1
        if bool(done.any()):
            finished_returns.append(ep_ret[done])
            finished_lengths.append(ep_len[done])
            ep_ret = torch.where(done, torch.zeros_like(ep_ret), ep_ret)
            ep_len = torch.where(done, torch.zeros_like(ep_len), ep_len)

    rollout.next_value = policy.net.value(policy.obs_norm.normalize(obs))
    n = num_steps * num_envs
    stats = {"charts/mean_reward": float(reward_sum) / n, "charts/mean_cost": float(cost_sum) / n}
    if finished_returns:
        stats["charts/episodic_return"] = float(torch.cat(finished_returns).mean())
        stats["charts/episodic_length"] = float(torch.cat(finished_lengths).float().mean())
    return RolloutState(obs, ep_ret, ep_len), stats


def compute_gae(
    rewards: Tensor, values: Tensor, dones: Tensor, next_value: Tensor, gamma: float, gae_lambda: float
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation over ``(S, N)`` tensors.

    ``dones[t]`` is 1 when the episode ended with step ``t`` (so ``values[t + 1]`` belongs to a new
    episode and must not be bootstrapped); ``next_value`` is the value after the last step.
    Returns ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        following = next_value if t == num_steps - 1 else values[t + 1]
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * following * alive - values[t]
        last = delta + gamma * gae_lambda * alive * last
        advantages[t] = last
    return advantages, advantages + values
