"""SAC with an ensemble of K critics (min or mean target) on the vectorized trading env.

One readable, importable file, the same ``train(args, env, callbacks, init, eval_fn) -> TrainResult``
shape as ``agents.ppo``:

- actor: the same :class:`~agents.policy.Policy` as PPO (diagonal Gaussian over ``A + 1`` logits,
  action ``softmax(raw)[:, :A]``), trained with the reparameterization trick. The entropy term is that
  of the raw Gaussian sample (the softmax is not invertible, so the logits are treated as the action
  for the entropy bonus); the temperature ``alpha`` is tuned to a target entropy per dimension.
- critics: ``K`` Q-networks in one :class:`CriticEnsemble` (batched weights ``(K, in, out)``), each a
  per-asset encoder of (position weight, features, proposed weight) shared across assets, pooled
  (mean and action-weighted sum) with cash fraction, time of day and the proposed cash weight.
  Polyak-averaged target copies.
- target (:func:`ensemble_target`): ``r + gamma * (1 - terminated) * (agg_k Q'_k(s', a') - alpha *
  log pi(a'|s'))`` with ``agg`` = min over the K targets (pessimistic, as clipped double-Q) or their
  mean (as in ensemble methods that rely on the ensemble's averaging). Truncated transitions keep
  their bootstrap: ``s'`` is ``info["final_obs"]`` and only ``terminated`` stops it.
- the actor loss uses the ensemble mean of the online critics.
- replay buffer on the env's device: raw observations (normalized at sampling time with the current
  running statistics), actions, rewards, next observations, terminations.

Worker/learner split: :func:`collect_step` steps the envs and fills the buffer; :func:`update` does
one gradient step of critics, actor and temperature from a sampled batch.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from agents.args import SACArgs
from agents.checkpoint import Checkpoint
from agents.networks import NUM_GLOBAL
from agents.policy import Policy, gaussian_log_prob
from agents.training import Callback, EvalFn, EvalHook, TrainResult, make_optimizer, notify, policy_for_env
from envs.observation import asset_width

# --- critic ensemble -------------------------------------------------------------------------------


class EnsembleLinear(nn.Module):
    """K independent linear layers applied as one batched matmul: ``(K, B, in) -> (K, B, out)``."""

    def __init__(self, num: int, in_dim: int, out_dim: int, std: float = math.sqrt(2)) -> None:
        super().__init__()
        weight = torch.empty(num, in_dim, out_dim)
        for k in range(num):  # the same orthogonal init as the actor's layers, per member
            nn.init.orthogonal_(weight[k], std)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(torch.zeros(num, 1, out_dim))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class CriticEnsemble(nn.Module):
    """K Q-networks ``Q_k(s, a) -> (K, N)`` over normalized observations and env actions (weights)."""

    def __init__(self, num_critics: int, num_assets: int, num_features: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.num_critics, self.num_assets, self.num_features = num_critics, num_assets, num_features
        k = num_critics
        # (weight, tradable, features, proposed weight)
        self.encoder = EnsembleLinear(k, asset_width(num_features) + 1, embed)
        self.hidden1 = EnsembleLinear(k, 2 * embed + NUM_GLOBAL + 1, hidden)
        self.hidden2 = EnsembleLinear(k, hidden, hidden)
        self.out = EnsembleLinear(k, hidden, 1, std=1.0)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        n, a, f, k = obs.shape[0], self.num_assets, self.num_features, self.num_critics
        glob = obs[:, :NUM_GLOBAL]
        width = asset_width(f)
        per_asset = torch.cat([obs[:, NUM_GLOBAL:].reshape(n, a, width), action.unsqueeze(-1)], dim=2)
        x = per_asset.reshape(1, n * a, width + 1).expand(k, -1, -1)
        emb = torch.relu(self.encoder(x)).reshape(k, n, a, -1)  # (K, N, A, E)
        held = (action.unsqueeze(-1) * emb).sum(dim=2)  # (K, N, E): what the action buys
        cash = (1.0 - action.sum(dim=1, keepdim=True)).clamp(min=0.0)  # (N, 1)
        ctx = torch.cat([emb.mean(dim=2), held, torch.cat([glob, cash], 1).expand(k, -1, -1)], dim=2)
        h = torch.relu(self.hidden2(torch.relu(self.hidden1(ctx))))
        return self.out(h).squeeze(-1)  # (K, N)


def ensemble_target(
    next_q: Tensor,
    rewards: Tensor,
    terminated: Tensor,
    next_logprob: Tensor,
    *,
    gamma: float,
    alpha: float | Tensor,
    mode: str = "min",
) -> Tensor:
    """Soft Bellman target ``(N,)`` from the K target critics' ``next_q (K, N)`` (min or mean over K)."""
    if mode == "min":
        agg = next_q.min(dim=0).values
    elif mode == "mean":
        agg = next_q.mean(dim=0)
    else:
        raise ValueError(f"unknown critic target {mode!r} (min or mean)")
    return rewards + gamma * (1.0 - terminated) * (agg - alpha * next_logprob)


# --- replay buffer ---------------------------------------------------------------------------------


class ReplayBuffer:
    """A ring buffer of transitions on the device (raw observations)."""

    def __init__(self, buffer_size: int, obs_dim: int, action_dim: int, device: torch.device) -> None:
        z = {"device": device, "dtype": torch.float32}
        self.buffer_size, self.size, self.pos = buffer_size, 0, 0
        self.obs = torch.zeros(buffer_size, obs_dim, **z)  # (C, obs_dim) raw
        self.next_obs = torch.zeros(buffer_size, obs_dim, **z)  # (C, obs_dim) raw, final_obs at episode ends
        self.actions = torch.zeros(buffer_size, action_dim, **z)  # (C, A) env actions
        self.rewards = torch.zeros(buffer_size, **z)  # (C,)
        self.terminated = torch.zeros(buffer_size, **z)  # (C,) 1.0 only for real terminal states

    def add(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, next_obs: Tensor, terminated: Tensor
    ) -> None:
        n = obs.shape[0]
        idx = (torch.arange(n, device=obs.device) + self.pos) % self.buffer_size
        self.obs[idx] = obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards.to(torch.float32)
        self.next_obs[idx] = next_obs
        self.terminated[idx] = terminated.to(torch.float32)
        self.pos = (self.pos + n) % self.buffer_size
        self.size = min(self.buffer_size, self.size + n)

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, Tensor]:
        idx = torch.randint(0, self.size, (batch_size,), generator=generator, device=generator.device)
        idx = idx.to(self.obs.device)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "terminated": self.terminated[idx],
        }


# --- worker and learner ----------------------------------------------------------------------------


@dataclass
class SACLearner:
    """Everything the learner updates: actor (the policy), critics, targets, temperature, optimizers."""

    policy: Policy
    critics: CriticEnsemble
    target_critics: CriticEnsemble
    log_alpha: Tensor  # () learnable log-temperature
    actor_opt: torch.optim.Optimizer
    critic_opt: torch.optim.Optimizer
    alpha_opt: torch.optim.Optimizer
    target_entropy: float


def _sample_action(
    policy: Policy, obs: Tensor, norm_obs: Tensor, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Reparameterized sample: ``(env action (N, A), log-prob of the raw sample (N,))``."""
    mean, std, _ = policy.dist_params(norm_obs)
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    raw = mean + std * noise
    return policy.to_action(raw, obs), gaussian_log_prob(raw, mean, std)


@torch.no_grad()
def collect_step(
    policy: Policy,
    env: Any,
    buffer: ReplayBuffer,
    obs: Tensor,
    generator: torch.Generator,
    *,
    update_norm: bool,
) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """One vectorized env step with the stochastic policy (the worker); returns the next obs etc."""
    if update_norm:
        policy.obs_norm.update(obs)
    action, _ = _sample_action(policy, obs, policy.obs_norm.normalize(obs), generator)
    next_obs, reward, terminated, truncated, info = env.step(action)
    done = terminated | truncated
    real_next = torch.where(done.unsqueeze(1), info["final_obs"], next_obs) if bool(done.any()) else next_obs
    buffer.add(obs, action, reward, real_next, terminated)
    return next_obs, reward, done, info


def update(
    learner: SACLearner, batch: dict[str, Tensor], args: SACArgs, generator: torch.Generator
) -> dict[str, float]:
    """One gradient step of critics, actor and temperature (the learner)."""
    policy, norm = learner.policy, learner.policy.obs_norm
    obs, next_obs = norm.normalize(batch["obs"]), norm.normalize(batch["next_obs"])
    alpha = learner.log_alpha.exp().detach()

    with torch.no_grad():
        next_action, next_logp = _sample_action(policy, batch["next_obs"], next_obs, generator)
        target = ensemble_target(
            learner.target_critics(next_obs, next_action),
            batch["rewards"],
            batch["terminated"],
            next_logp,
            gamma=args.gamma,
            alpha=alpha,
            mode=args.critic_target,
        )
    q = learner.critics(obs, batch["actions"])  # (K, B)
    critic_loss = 0.5 * (q - target.unsqueeze(0)).square().mean(dim=1).sum()
    learner.critic_opt.zero_grad(set_to_none=True)
    critic_loss.backward()
    nn.utils.clip_grad_norm_(learner.critics.parameters(), args.max_grad_norm)
    learner.critic_opt.step()

    action, logp = _sample_action(policy, batch["obs"], obs, generator)
    q_pi = learner.critics(obs, action).mean(dim=0)
    actor_loss = (alpha * logp - q_pi).mean()
    learner.actor_opt.zero_grad(set_to_none=True)
    actor_loss.backward()
    nn.utils.clip_grad_norm_(policy.net.parameters(), args.max_grad_norm)
    learner.actor_opt.step()

    alpha_loss = torch.zeros(())
    if args.autotune:
        alpha_loss = -(learner.log_alpha * (logp.detach() + learner.target_entropy)).mean()
        learner.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        learner.alpha_opt.step()

    with torch.no_grad():
        for p, tp in zip(learner.critics.parameters(), learner.target_critics.parameters(), strict=True):
            tp.lerp_(p, args.tau)
    return {
        "losses/critic_loss": float(critic_loss.detach()),
        "losses/actor_loss": float(actor_loss.detach()),
        "losses/alpha_loss": float(alpha_loss.detach()),
        "losses/alpha": float(alpha),
        "losses/q_mean": float(q.detach().mean()),
        "losses/q_ensemble_std": float(q.detach().std(dim=0).mean()),
        "losses/entropy_estimate": float(-logp.detach().mean()),
    }


def make_learner(policy: Policy, opt_state: dict | None, env: Any, args: SACArgs) -> SACLearner:
    """Critics (seeded), targets, temperature and optimizers around ``policy``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(args.seed + 1)
        critics = CriticEnsemble(args.num_critics, env.num_assets, env.num_features, args.embed, args.hidden)
    critics = critics.to(env.device)
    target = copy.deepcopy(critics).requires_grad_(False)
    log_alpha = torch.tensor(math.log(args.alpha), device=env.device, requires_grad=True)
    return SACLearner(
        policy=policy,
        critics=critics,
        target_critics=target,
        log_alpha=log_alpha,
        actor_opt=make_optimizer(policy, args.learning_rate, opt_state),
        critic_opt=torch.optim.Adam(critics.parameters(), lr=args.learning_rate),
        alpha_opt=torch.optim.Adam([log_alpha], lr=args.learning_rate),
        target_entropy=args.target_entropy_per_dim * policy.raw_dim,
    )


def train(
    args: SACArgs,
    env: Any,
    callbacks: Iterable[Callback] = (),
    init: Policy | Checkpoint | None = None,
    eval_fn: EvalFn | None = None,
) -> TrainResult:
    """Train SAC for ``args.total_steps`` env-steps (the arguments and callbacks of ``agents.ppo.train``).

    ``TrainResult.optimizer_state`` is the actor's optimizer state; critics start fresh on a warm start.
    """
    callbacks = tuple(callbacks)
    device = torch.device(env.device)
    policy, opt_state = policy_for_env(init, env, args, "sac")
    policy.train()
    learner = make_learner(policy, opt_state, env, args)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    buffer = ReplayBuffer(args.buffer_size, env.obs_dim, env.num_assets, device)

    num_envs = env.num_envs
    num_iters = max(1, math.ceil(args.total_steps / num_envs))
    log_every = max(1, math.ceil(2048 / num_envs))  # a history row every ~2k env-steps
    obs, _ = env.reset(seed=args.seed)
    ep_ret = torch.zeros(num_envs, device=device)
    finished: list[Tensor] = []
    history: list[dict[str, float]] = []
    row: dict[str, float] = {}
    evals = EvalHook(eval_fn, args.eval_every)
    env_steps, go_on = 0, True
    start = time.perf_counter()
    it = 0
    for it in range(1, num_iters + 1):
        obs, reward, done, info = collect_step(policy, env, buffer, obs, generator, update_norm=args.norm_obs)
        env_steps += num_envs
        ep_ret = ep_ret + reward
        if bool(done.any()):
            finished.append(ep_ret[done])
            ep_ret = torch.where(done, torch.zeros_like(ep_ret), ep_ret)
        if env_steps >= args.learning_starts and buffer.size >= args.batch_size:
            for _ in range(args.gradient_steps):
                row = update(learner, buffer.sample(args.batch_size, generator), args, generator)
        last = it == num_iters
        if it % log_every and not last and not evals.due(env_steps):
            continue
        elapsed = time.perf_counter() - start
        out = {
            **row,
            "env_steps": float(env_steps),
            "update": float(it),
            "charts/mean_reward": float(reward.mean()),
            "charts/mean_cost": float(info["cost"].mean()) if "cost" in info else float("nan"),
            "charts/steps_per_s": env_steps / max(elapsed, 1e-9),
            "charts/elapsed_s": elapsed,
            "charts/buffer_size": float(buffer.size),
        }
        if finished:
            out["charts/episodic_return"] = float(torch.cat(finished).mean())
            finished = []
        if evals.due(env_steps, last=last):
            out.update(evals.run(policy, env_steps))
            go_on = notify(callbacks, {"event": "eval", **out}) and go_on
        history.append(out)
        go_on = notify(callbacks, {"event": "update", **out}) and go_on
        if not go_on:
            break
    evals.finish(policy, history)
    policy.eval()
    return TrainResult(
        policy=policy,
        optimizer_state=learner.actor_opt.state_dict(),
        env_steps=env_steps,
        history=history,
        updates=it,
        stopped_by_callback=not go_on,
    )
