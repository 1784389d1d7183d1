"""PPO's formulas for P pods at once: pure tensor functions with a leading pod axis.

Each is the population's copy of a single run's formula, op for op, so pod ``p``'s numbers are its
separate run's to float rounding: :func:`pod_actions` is ``Policy.to_action``, :func:`pod_gae` is
``agents.rollout.compute_gae`` and :func:`pod_ppo_loss` is ``agents.ppo.minibatch_loss``, with every
hyper-parameter a per-pod tensor. :class:`~agents.population.learner.Population` runs them inside
its graphed steps (no host synchronisation here).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from agents.policy import current_weights, gaussian_entropy, gaussian_log_prob


def pod_actions(raw: Tensor, obs: Tensor, rebalance: Tensor, action_mode: str, num_assets: int) -> Tensor:
    """``Policy.to_action`` of every pod: ``raw (P, M, R)``, raw ``obs (P, M, obs_dim)``, each pod's
    ``rebalance (P, 1, 1)`` rate; returns ``(P, M, A)``."""
    a = num_assets
    if action_mode != "weights":
        return raw[..., :a].clamp(-1.0, 1.0)
    target = torch.softmax(raw, dim=-1)[..., :a]
    p, m = obs.shape[:2]
    current = current_weights(obs.reshape(p * m, -1), a).reshape(p, m, a).to(raw.dtype)
    moved = current + rebalance * (target - current)
    return torch.where(rebalance >= 1.0, target, moved)


def pod_gae(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    next_value: Tensor,
    gamma: Tensor,
    gamma_lambda: Tensor,
    *,
    out: Tensor,
) -> Tensor:
    """GAE advantages of every env of every pod into ``out``: ``rewards``, ``values``, ``dones`` and
    ``out`` are ``(P, T, N)``, ``next_value (P, N)``, per-pod ``gamma`` and ``gamma * lambda`` ``(P, 1)``."""
    num_steps = rewards.shape[1]
    last = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        following = next_value if t == num_steps - 1 else values[:, t + 1]
        alive = 1.0 - dones[:, t]
        delta = rewards[:, t] + gamma * following * alive - values[:, t]
        last = delta + gamma_lambda * alive * last
        out[:, t] = last
    return out


class PodLoss(NamedTuple):
    """The PPO loss of one minibatch of every pod; each ``(P,)`` but the sample-wise ratios ``(P, M)``."""

    loss: Tensor
    pg_loss: Tensor
    v_loss: Tensor
    entropy: Tensor
    logratio: Tensor  # (P, M)
    ratio: Tensor  # (P, M)


def pod_ppo_loss(
    mean: Tensor,
    std: Tensor,
    new_value: Tensor,
    raw: Tensor,
    old_logprob: Tensor,
    old_value: Tensor,
    adv: Tensor,
    returns: Tensor,
    clip: Tensor,
    ent_coef: Tensor,
    vf_coef: Tensor,
    *,
    norm_adv: bool,
    clip_vloss: bool,
) -> PodLoss:
    """``agents.ppo.minibatch_loss`` of every pod: the new ``mean (P, M, R)``, ``std (P, R)`` and
    ``new_value (P, M)`` against the minibatch's ``raw (P, M, R)`` and ``(P, M)`` old log-probability,
    old value, advantage and return; ``clip (P, 1)``, ``ent_coef`` and ``vf_coef (P,)``."""
    new_logprob = gaussian_log_prob(raw, mean, std.unsqueeze(1))
    logratio = new_logprob - old_logprob
    if norm_adv and adv.shape[1] > 1:
        adv = (adv - adv.mean(dim=1, keepdim=True)) / (adv.std(dim=1, keepdim=True) + 1e-8)
    ratio = logratio.exp()
    clipped = ratio.clamp(1 - clip, 1 + clip)
    pg_loss = torch.max(-adv * ratio, -adv * clipped).mean(dim=1)
    unclipped = (new_value - returns).square()
    if clip_vloss:
        clipped_value = old_value + (new_value - old_value).clamp(-clip, clip)
        v_loss = 0.5 * torch.max(unclipped, (clipped_value - returns).square()).mean(dim=1)
    else:
        v_loss = 0.5 * unclipped.mean(dim=1)
    entropy = gaussian_entropy(std)
    loss = pg_loss - ent_coef * entropy + vf_coef * v_loss
    return PodLoss(loss, pg_loss, v_loss, entropy, logratio, ratio)
