"""What every learner's ``train`` shares (``agents.ppo``, ``agents.sac``).

- the starting policy: fresh under a seeded, forked RNG, or warm-started from a policy or a
  checkpoint (:func:`policy_for_env`);
- the optimizer (:func:`make_optimizer`), restored from a checkpoint's state when there is one;
- callbacks (:class:`Callback`, :func:`notify`), with the Stable-Baselines3 convention: a callback
  returns ``True`` to continue and ``False`` to stop;
- the evaluation hook (:data:`EvalFn`, :class:`EvalHook`): ``eval_fn(policy)`` every ``eval_every``
  env-steps and on the last row, logged as ``eval/<name>``;
- what a run hands back (:class:`TrainResult`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from agents.checkpoint import Checkpoint
from agents.networks import NetworkConfig
from agents.policy import Policy, PolicyMeta
from data.atomic import atomic_path
from data.errors import ConfigError

Event = dict[str, Any]


class Callback(Protocol):
    """Called with every training event; returns ``True`` to continue training, ``False`` to stop.

    The convention of Stable-Baselines3 (``BaseCallback._on_step``). An event is
    ``{"event": "update" | "eval", "env_steps": ..., "update": ..., metrics...}``: ``"update"``
    after every logged update, and ``"eval"`` just before it when the row carries ``eval/...``
    metrics. Every callback sees every event (one asking to stop does not silence the others);
    training stops after the current update when any returns ``False``. A callback must return a
    ``bool``: anything else, ``None`` from a forgotten ``return`` included, raises ``TypeError``
    rather than being read as either answer.
    """

    def __call__(self, event: Event) -> bool: ...


def notify(callbacks: Iterable[Callback], event: Event) -> bool:
    """Hand ``event`` to every callback; whether all of them let training continue."""
    go_on = True
    for callback in callbacks:
        answer = callback(event)
        if not isinstance(answer, bool):
            name = getattr(callback, "__qualname__", type(callback).__qualname__)
            got = "None" if answer is None else f"a {type(answer).__name__}"
            raise TypeError(
                f"training callback {name} returned {got}, not a bool (True: continue, False: stop)"
            )
        go_on = answer and go_on
    return go_on


# --- evaluation hook -------------------------------------------------------------------------------

#: ``eval_fn(policy) -> {name: value}``: scores the policy (in eval mode) while it trains.
EvalFn = Callable[[Policy], Mapping[str, float]]


def run_eval(policy: Policy, eval_fn: EvalFn) -> dict[str, float]:
    """``eval_fn(policy)`` in eval mode (the training mode is restored), keys prefixed ``eval/``."""
    was_training = policy.training
    policy.eval()
    try:
        metrics = eval_fn(policy)
    finally:
        policy.train(was_training)
    return {k if k.startswith("eval/") else f"eval/{k}": float(v) for k, v in metrics.items()}


class EvalHook:
    """When a learner calls ``eval_fn``: every ``every`` env-steps, on the last row, and once more at
    the end when a callback stopped the run on a row without ``eval/`` metrics (so the caller always
    gets a final score). With no ``eval_fn`` it never evaluates."""

    def __init__(self, eval_fn: EvalFn | None, every: int) -> None:
        self.eval_fn, self.every, self.next_at = eval_fn, every, every

    def due(self, env_steps: int, last: bool = False) -> bool:
        return self.eval_fn is not None and (env_steps >= self.next_at or last)

    def run(self, policy: Policy, env_steps: int) -> dict[str, float]:
        """The ``eval/`` metrics now; the next evaluation is ``every`` env-steps later."""
        assert self.eval_fn is not None, "EvalHook.run without an eval_fn (check due() first)"
        self.next_at = env_steps + self.every
        return run_eval(policy, self.eval_fn)

    def finish(self, policy: Policy, history: list[dict[str, float]]) -> None:
        """Evaluate onto the last row of ``history`` if it has no ``eval/`` metrics."""
        if self.eval_fn is not None and history and not any(k.startswith("eval/") for k in history[-1]):
            history[-1].update(run_eval(policy, self.eval_fn))


# --- starting policy and optimizer -----------------------------------------------------------------


def make_policy(env: Any, config: NetworkConfig, meta: PolicyMeta, seed: int) -> Policy:
    """A fresh policy for ``env`` whose init depends only on ``seed`` (global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = Policy(config, meta, device="cpu")
    return policy.to(env.device)


def policy_for_env(
    init: Policy | Checkpoint | None, env: Any, args: Any, algo: str
) -> tuple[Policy, dict | None]:
    """The starting policy (fresh or a copy of ``init``) and the optimizer state to restore.

    ``args`` is the learner's arguments (``seed`` and the network sizes of a fresh policy).
    """
    market = env.market
    tickers = tuple(getattr(market, "tickers", ()) or ())
    feature_names = tuple(getattr(market, "feature_names", ()) or ())
    action_mode = getattr(env.params, "action_mode", "weights")
    meta = PolicyMeta(algo=algo, action_mode=action_mode, tickers=tickers, feature_names=feature_names)
    if init is None:
        config = NetworkConfig(
            num_assets=env.num_assets,
            num_features=env.num_features,
            embed=args.embed,
            hidden=args.hidden,
            asset_layers=args.asset_layers,
            init_log_std=args.init_log_std,
            rebalance_rate=args.rebalance_rate,
            linear_skip=bool(getattr(args, "linear_start", False)),
            trade_window=float(getattr(args, "trade_window", 1.0)),
            demean_features=bool(getattr(args, "demean_features", False)),
        )
        return make_policy(env, config, meta, args.seed), None
    source, opt_state = (init.policy, init.optimizer_state) if isinstance(init, Checkpoint) else (init, None)
    if source.config.num_features != env.num_features:
        raise ConfigError(
            f"cannot warm-start: the policy has {source.config.num_features} features per asset, "
            f"the env {env.num_features}"
        )
    if source.meta.action_mode != action_mode:
        raise ConfigError(f"cannot warm-start a {source.meta.action_mode!r} policy on a {action_mode!r} env")
    # The network's weights do not depend on the number of assets, so a policy carries over to a
    # different universe: rebuild for this env's size and copy every tensor.
    config = dataclasses.replace(source.config, num_assets=env.num_assets)
    policy = Policy(config, meta, device=env.device, init=False)
    policy.net.load_state_dict(source.net.state_dict())
    policy.obs_norm.copy_from(source.obs_norm)
    return policy, opt_state


#: Adam's epsilon in every learner (and in the population's batched Adam, agents.population).
ADAM_EPS = 1e-5


def make_optimizer(policy: Policy, learning_rate: float, state: dict | None) -> torch.optim.Adam:
    """Adam over the policy's network (``eps=ADAM_EPS``), restored from ``state`` when given.

    Fused (one kernel over all parameters) where torch has it, CPU and CUDA (docs/benchmarks.md).
    A restored state keeps its moments but takes this run's learning rate (a mutated child's own).
    """
    fused = policy.device.type in ("cpu", "cuda")
    optimizer = torch.optim.Adam(policy.net.parameters(), lr=learning_rate, eps=ADAM_EPS, fused=fused or None)
    if state is not None:
        try:
            optimizer.load_state_dict(state)
        except (ValueError, KeyError, RuntimeError) as err:
            raise ConfigError(f"cannot restore the optimizer state: {err}") from None
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
            group["fused"] = fused or None  # (a restored state carries the saver's setting)
            group["foreach"] = None
    return optimizer


# --- result ----------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What a training run hands back (the tournament saves it as a pod checkpoint)."""

    policy: Policy
    optimizer_state: dict[str, Any]
    env_steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    """one metric row per logged update: ``charts/…``, ``losses/…``, ``eval/…``, ``env_steps``,
    ``update``"""
    updates: int = 0
    stopped_by_callback: bool = False
    """a callback returned ``False`` before the step budget was spent"""

    def curve(self):  # -> pandas.DataFrame (imported lazily: pandas is slow to import)
        """The metric history as a DataFrame, one row per logged update."""
        import pandas as pd

        return pd.DataFrame(self.history)

    def save_curve(self, path: str | Path) -> Path:
        """Write the history as parquet, atomically."""
        with atomic_path(path, suffix=".parquet") as tmp:
            self.curve().to_parquet(tmp, index=False)
        return Path(path)

    def checkpoint(self) -> Checkpoint:
        """Policy and optimizer state: what a warm start or a tournament child resumes from."""
        return Checkpoint(self.policy, self.optimizer_state)
