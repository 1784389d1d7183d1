"""PPO (clipped objective, GAE) on the vectorized trading env, readable and importable.

Read top to bottom like the paper (Schulman et al. 2017) with the implementation details of
CleanRL's ``ppo_continuous_action.py``:

1. ``collect_rollout`` (the worker, :mod:`agents.rollout`) steps ``num_envs`` envs for ``num_steps``
   steps with the current stochastic policy and stores everything on the env's device, shaped
   ``(num_steps, num_envs, ...)``, observations normalized on the fly and time limits bootstrapped
   with ``gamma * V(final_obs)`` (a time limit is not a terminal state).
2. ``compute_gae`` (:mod:`agents.rollout`) turns rewards and values into advantages and returns.
3. ``update`` (the learner) runs ``update_epochs`` passes of minibatch Adam over the flattened batch
   (``b_`` prefix; ``mb_`` inside the minibatch loop): ``minibatch_loss`` (clipped surrogate, clipped
   value loss, advantage normalization, entropy bonus; optionally through ``torch.compile``, see
   ``compiles``), global grad-norm clipping, fused Adam.
4. ``train`` alternates the two, evaluates ``eval_fn`` every ``eval_every`` env-steps, calls the
   callbacks after every update (one returning ``False`` stops training, as in Stable-Baselines3)
   and returns a ``TrainResult``; the plumbing PPO shares with SAC lives in :mod:`agents.training`.

The action distribution is a diagonal Gaussian over ``A + 1`` logits; the env gets
``softmax(raw)[:, :A]`` (see ``agents.policy``). Log-probabilities are those of the raw sample.

Determinism: the network is initialised under a forked RNG seeded with ``args.seed``, all sampling and
minibatch shuffles use a private ``torch.Generator`` and the env is reset with the same seed, so a run
on the CPU is reproducible bit for bit (tests check identical weights after N updates). A rollout's
action noise is one draw at its start (:func:`agents.rollout.rollout_noise`), not one per step: a
population of pods (:mod:`agents.population`) then draws each pod's noise with one launch per update
instead of one per step (on a CPU the numbers are those of per-step draws whenever
``num_envs * raw_dim`` is a multiple of 16, torch's normal sampler's block).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from agents.args import COMPILE_MIN_MINIBATCHES, PPOArgs
from agents.checkpoint import Checkpoint
from agents.policy import Policy, gaussian_entropy, gaussian_log_prob
from agents.rollout import Rollout, RolloutState, collect_rollout, compute_gae
from agents.training import Callback, EvalFn, EvalHook, TrainResult, make_optimizer, notify, policy_for_env
from envs.kernels.compiled import cached

# --- loss pieces -----------------------------------------------------------------------------------


def policy_loss(
    new_logprob: Tensor, old_logprob: Tensor, advantages: Tensor, clip_coef: float | Tensor
) -> Tensor:
    """Clipped surrogate objective, as a loss (to minimise)."""
    ratio = (new_logprob - old_logprob).exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)
    return torch.max(unclipped, clipped).mean()


def value_loss(
    new_value: Tensor, old_value: Tensor, returns: Tensor, clip_coef: float | Tensor, clip_vloss: bool = True
) -> Tensor:
    """0.5 * squared error; with ``clip_vloss`` the pessimistic max with the clipped prediction."""
    unclipped = (new_value - returns).square()
    if not clip_vloss:
        return 0.5 * unclipped.mean()
    clipped_value = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
    return 0.5 * torch.max(unclipped, (clipped_value - returns).square()).mean()


def minibatch_loss(
    net: torch.nn.Module,
    packed: tuple[Tensor, ...],
    sample: Tensor,
    coefs: Tensor,
    norm_adv: bool,
    clip_vloss: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The PPO loss of one minibatch: ``(loss, pg_loss, v_loss, entropy, logratio)``.

    ``sample`` holds the per-sample columns ``[raw (R), logprob, value, advantage, return]``;
    ``coefs`` the coefficients ``[clip_coef, ent_coef, vf_coef]`` as a tensor, so that a pod with
    mutated coefficients reuses the compiled graph instead of compiling another one.
    """
    raw_dim = sample.shape[1] - 4
    mb_raw, old_logprob, old_value, adv, returns = sample.split([raw_dim, 1, 1, 1, 1], dim=1)
    old_logprob, old_value, adv, returns = (c.squeeze(1) for c in (old_logprob, old_value, adv, returns))
    clip_coef, ent_coef, vf_coef = coefs[0], coefs[1], coefs[2]
    mean, new_value = net.forward_packed(*packed)
    mean = mean[:, :raw_dim]
    std = net.std()[:raw_dim]
    new_logprob = gaussian_log_prob(mb_raw, mean, std)
    logratio = new_logprob - old_logprob
    if norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = policy_loss(new_logprob, old_logprob, adv, clip_coef)
    v_loss = value_loss(new_value, old_value, returns, clip_coef, clip_vloss)
    entropy = gaussian_entropy(std)
    loss = pg_loss - ent_coef * entropy + vf_coef * v_loss
    return loss, pg_loss, v_loss, entropy, logratio


def compiles(args: PPOArgs, num_envs: int) -> bool:
    """Whether a run with ``args`` on ``num_envs`` envs takes the compiled minibatch loss."""
    if args.compile != "auto":
        return args.compile == "on"
    steps = args.num_updates(num_envs) * args.update_epochs * args.num_minibatches
    return steps >= COMPILE_MIN_MINIBATCHES


def _loss_fn(compiled: bool, key: tuple) -> Callable[..., tuple[Tensor, ...]]:
    """The minibatch loss: eager, or compiled once per process and shape."""
    if not compiled:
        return minibatch_loss
    return cached(("agents.ppo.minibatch_loss", key), lambda: minibatch_loss, "the PPO loss")


def shuffle(generator: torch.Generator, batch_size: int, *, out: Tensor | None = None) -> Tensor:
    """An epoch's minibatch order: a random permutation of ``batch_size`` samples from ``generator``
    (into ``out`` when given: the same numbers)."""
    if out is not None:
        return torch.randperm(batch_size, generator=generator, out=out)
    return torch.randperm(batch_size, generator=generator, device=generator.device)


def update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    args: PPOArgs,
    generator: torch.Generator,
) -> dict[str, float]:
    """PPO update on one rollout (the learner); returns ``losses/...`` metrics."""
    advantages, returns = compute_gae(
        rollout.rewards, rollout.values, rollout.dones, rollout.next_value, args.gamma, args.gae_lambda
    )
    batch_size = rollout.raw.shape[0] * rollout.raw.shape[1]
    b_packed = [p.reshape(batch_size, *p.shape[2:]) for p in rollout.packed]
    b_values = rollout.values.reshape(-1)
    b_returns = returns.reshape(-1)
    # The per-sample vectors side by side, so a minibatch gathers them with one index_select.
    columns = [rollout.raw, rollout.logprobs, rollout.values, advantages, returns]
    b_sample = torch.cat([c.reshape(batch_size, -1) for c in columns], dim=1)
    minibatch_size = max(1, batch_size // args.num_minibatches)
    sources = [*b_packed, b_sample]
    coefs = torch.tensor([args.clip_coef, args.ent_coef, args.vf_coef], device=b_sample.device)
    compiled = compiles(args, rollout.raw.shape[1])
    # Per minibatch size (the last one may be smaller): gather buffers, reused, and the loss function.
    gathered: dict[int, tuple[list[Tensor], Callable[..., tuple[Tensor, ...]]]] = {}

    clipfracs: list[Tensor] = []
    approx_kl = torch.zeros(())
    for _epoch in range(args.update_epochs):
        perm = shuffle(generator, batch_size).to(b_sample.device)
        for start in range(0, batch_size, minibatch_size):
            mb = perm[start : start + minibatch_size]
            if len(mb) not in gathered:
                buffers = [src.new_empty((len(mb), *src.shape[1:])) for src in sources]
                key = (str(b_sample.device), tuple(tuple(b.shape) for b in buffers))
                gathered[len(mb)] = buffers, _loss_fn(compiled, key)
            buffers, loss_fn = gathered[len(mb)]
            for src, out in zip(sources, buffers, strict=True):
                torch.index_select(src, 0, mb, out=out)  # (into a reused buffer: faster than src[mb])
            *mb_packed, mb_sample = buffers
            loss, pg_loss, v_loss, entropy, logratio = loss_fn(
                policy.net, tuple(mb_packed), mb_sample, coefs, args.norm_adv, args.clip_vloss
            )
            with torch.no_grad():
                ratio = logratio.exp()
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.net.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and float(approx_kl) > args.target_kl:
            break

    var_y = b_returns.var()
    explained_var = float("nan") if float(var_y) == 0 else float(1 - (b_returns - b_values).var() / var_y)
    return {
        "losses/policy_loss": float(pg_loss.detach()),
        "losses/value_loss": float(v_loss.detach()),
        "losses/entropy": float(entropy.detach()),
        "losses/approx_kl": float(approx_kl),
        "losses/clipfrac": float(torch.stack(clipfracs).mean()),
        "losses/explained_variance": explained_var,
        "losses/log_std": float(policy.net.log_std.detach().mean()),
    }


# --- training loop ---------------------------------------------------------------------------------


def train(
    args: PPOArgs,
    env: Any,
    callbacks: Iterable[Callback] = (),
    init: Policy | Checkpoint | None = None,
    eval_fn: EvalFn | None = None,
) -> TrainResult:
    """Train PPO on a ``TradingVecEnv`` for ``args.total_steps`` env-steps (or until a callback stops).

    ``init`` warm-starts from a policy (weights + normalization) or a checkpoint (also the optimizer
    state). ``eval_fn(policy) -> {name: value}`` is logged as ``eval/<name>``. Every callback gets
    ``{"event": "update" | "eval", "env_steps": ..., "update": ..., metrics...}`` and returns ``True``
    to continue or ``False`` to stop (:class:`agents.training.Callback`).

    >>> from data.toy import toy_market
    >>> from envs.vec_env import TradingVecEnv
    >>> env = TradingVecEnv(toy_market(num_assets=3), num_envs=4, device="cpu")
    >>> result = train(PPOArgs(total_steps=256, num_steps=16), env)
    >>> type(result).__name__, result.env_steps, result.updates, len(result.history)
    ('TrainResult', 256, 4, 4)
    >>> result.policy.act(env.reset(seed=0)[0]).shape  # target weights of 3 assets, for 4 envs
    torch.Size([4, 3])
    >>> def first_two_updates(event):
    ...     return event["update"] < 2  # False stops training after the current update
    >>> train(PPOArgs(total_steps=256, num_steps=16), env, callbacks=[first_two_updates]).updates
    2
    """
    callbacks = tuple(callbacks)
    device = torch.device(env.device)
    policy, opt_state = policy_for_env(init, env, args, "ppo")
    policy.train()
    optimizer = make_optimizer(policy, args.learning_rate, opt_state)
    generator = torch.Generator(device=device).manual_seed(args.seed)

    num_envs = env.num_envs
    num_updates = args.num_updates(num_envs)
    rollout = Rollout.empty(args.num_steps, num_envs, policy, device)
    obs, _ = env.reset(seed=args.seed)
    zeros = torch.zeros(num_envs, device=device)
    state = RolloutState(obs, zeros.clone(), zeros.clone())

    history: list[dict[str, float]] = []
    evals = EvalHook(eval_fn, args.eval_every)
    env_steps = 0
    go_on = True
    start = time.perf_counter()
    update_idx = 0
    for update_idx in range(1, num_updates + 1):
        if args.anneal_lr:
            frac = 1.0 - (update_idx - 1) / num_updates
            for group in optimizer.param_groups:
                group["lr"] = frac * args.learning_rate
        t0 = time.perf_counter()
        state, row = collect_rollout(
            policy, env, rollout, state, generator, gamma=args.gamma, update_norm=args.norm_obs
        )
        t1 = time.perf_counter()
        row.update(update(policy, optimizer, rollout, args, generator))
        t2 = time.perf_counter()
        env_steps += args.batch_size(num_envs)
        elapsed = time.perf_counter() - start
        row.update(
            {
                "env_steps": float(env_steps),
                "update": float(update_idx),
                "charts/learning_rate": optimizer.param_groups[0]["lr"],
                "charts/steps_per_s": env_steps / max(elapsed, 1e-9),
                "charts/rollout_s": t1 - t0,
                "charts/update_s": t2 - t1,
                "charts/elapsed_s": elapsed,
            }
        )
        if evals.due(env_steps, last=update_idx == num_updates):
            row.update(evals.run(policy, env_steps))
            go_on = notify(callbacks, {"event": "eval", **row}) and go_on
        history.append(row)
        go_on = notify(callbacks, {"event": "update", **row}) and go_on
        if not go_on:
            break
    evals.finish(policy, history)
    policy.eval()
    return TrainResult(
        policy=policy,
        optimizer_state=optimizer.state_dict(),
        env_steps=env_steps,
        history=history,
        updates=update_idx,
        stopped_by_callback=not go_on,
    )


if __name__ == "__main__":
    print("use `podracer train --algo ppo` (agents.ppo.train is the importable entry point)")
