"""The direct learner for a population: P pods of :mod:`agents.direct` stepping together on one device.

Pod ``p`` is the run ``agents.direct.train(args_p, env, init=init_p)`` would make, to float rounding
(tests/test_population_direct.py): the same ridge start, paths, objective, clip, AdamW step and
held-out early stopping. What differs is the shape of the work: every update of the P pods is one
simulation of ``P x batch_paths`` paths through :func:`agents.direct.simulate` itself, whose policy
here is :class:`StackedDirect` (the P networks as stacked parameters, one
``torch.func.functional_call`` under ``torch.func.vmap``, each pod with its own observation
statistics), and one batched backward, clip and AdamW step.

- **Per-pod hyper-parameters**: learning rate, weight decay, grad-norm clip (``(P,)`` tensors),
  ``horizon`` (the tournament mutates it), ``holdout_every``, ``norm_updates``, seed and budget. Paths
  run the population's longest horizon; a pod's steps past its own are masked out of its objective
  (and out of its observation statistics), so its gradient is its own run's. A pod past its budget or
  its wall-time deadline is masked out of the optimizer step (parameters, moments and step count
  unchanged), as the PPO population masks a finished pod.
- **What pods of one population share** (:func:`direct_shape_key`): the network's shape and
  rebalance rate, ``batch_paths``, ``objective`` and ``holdout_frac`` (the held-out tail's length).
- **Randomness**: each pod owns the ``torch.Generator`` its separate run owns, seeded alike, and draws
  its paths' start bars from it in the same order.
- **Selection**: every pod keeps its best held-out weights on the device (a ``torch.where`` per
  tensor, no host synchronisation); a warm start (the ridge, or a parent) is a candidate itself, so
  fine-tuning keeps the start unless a step beats it on the train window's held-out tail by
  ``holdout_margin`` standard errors of the paired per-decision difference (per pod).

Why ``vmap`` here and the written-out batched matmuls of :mod:`agents.population.stacked` for PPO:
this learner calls the network ``horizon`` times per update through a long autograd graph, and the
network (with its linear skip) is then exactly ``PerAssetActorCritic.actor_mean``, not a copy of it.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from agents.args import DirectArgs
from agents.direct import (
    Decisions,
    adamw_for,
    benchmark_of,
    decisions_of,
    objective_series,
    paired_t,
    simulate,
    start_from_linear,
)
from agents.networks import NetworkConfig
from agents.policy import Policy
from agents.population.pods import PodSetup
from agents.population.stacked import StackedAdam, StackedNorm, clip_grad_norms
from agents.training import TrainResult
from data.errors import ConfigError


def direct_shape_key(args: DirectArgs, config: NetworkConfig) -> tuple[Any, ...]:
    """What direct pods of one population share (the rest of their hyper-parameters may differ)."""
    arch = dataclasses.replace(config, init_log_std=0.0)
    return ("direct", arch, args.batch_paths, args.objective, args.holdout_frac)


def start_direct_pod(
    policy: Policy, args: DirectArgs, market: Any, interval: int, fitted: dict[Any, Any] | None = None
) -> None:
    """A fresh pod's ridge start (``agents.linear_start``), as ``agents.direct.train`` makes it;
    ``fitted`` keeps the ridges fitted so far on ``market`` (by ``holdout_frac``, ``top_mass``,
    ``start_horizon``, ``trade_window``, ``start_blend``, ``start_screen_draws`` and
    ``start_single_share``), so a round's
    fresh pods fit each once."""
    if args.linear_start:
        decisions = decisions_of(market, interval)
        fitted = {} if fitted is None else fitted
        key = (
            args.holdout_frac,
            args.top_mass,
            args.start_horizon,
            args.trade_window,
            args.start_blend,
            args.start_screen_draws,
            args.start_single_share,
        )
        fitted[key] = start_from_linear(policy, decisions, _split(decisions, args)[1], args, fitted.get(key))


def _split(decisions: Decisions, args: DirectArgs) -> tuple[int, int]:
    """``(held_out, fit_rows)``: the train window's held-out tail and the decisions before it."""
    held_out = max(1, int(round(decisions.num * args.holdout_frac)))
    return held_out, decisions.num - held_out


class _ActorMean(nn.Module):
    """``net.actor_mean`` as a module's forward (what ``functional_call`` runs)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: Tensor) -> Tensor:
        return self.net.actor_mean(obs)


class StackedDirect:
    """P policies of one :func:`direct_shape_key` as the one policy :func:`agents.direct.simulate`
    runs: its rows are ``P`` blocks of paths, pod-major. ``params`` are ``(P, ...)`` leaves in the
    network's ``named_parameters`` order; ``fit`` (P,) marks the pods whose observation statistics
    ``simulate(..., fit_norm=True)`` updates, ``lengths`` (P,) how many of a path's steps are each
    pod's own (the statistics fold those only). ``net`` and ``obs_norm`` are this object itself."""

    def __init__(self, policies: Sequence[Policy]) -> None:
        first = policies[0]
        self.template = first  # (its config and meta: action post-processing, sizes)
        self.num_pods, self.device = len(policies), first.device
        self.num_assets, self.raw_dim = first.num_assets, first.raw_dim
        self.params, _ = torch.func.stack_module_state([p.net for p in policies])  # type: ignore[arg-type]
        self.norm = StackedNorm(self.num_pods, first.config.num_features, self.device)
        for slot, policy in enumerate(policies):
            self.norm.load(slot, policy.obs_norm)
        self._base = _ActorMean(copy.deepcopy(first.net).to("meta"))
        self._actor = torch.func.vmap(self._one_actor)
        self.fit = torch.zeros(self.num_pods, dtype=torch.bool, device=self.device)
        self.lengths: Tensor | None = None
        self._step = 0
        self.net = self.obs_norm = self

    def _one_actor(self, params: dict[str, Tensor], obs: Tensor) -> Tensor:
        named = {f"net.{name}": value for name, value in params.items()}
        return torch.func.functional_call(self._base, named, (obs,))

    def begin(self, lengths: Tensor, fit: Tensor) -> None:
        """Before a simulation: each pod's own path length and which pods fold their observations."""
        self.lengths, self.fit, self._step = lengths, fit, 0

    # --- what agents.direct.simulate calls ------------------------------------------------------------
    def _pods(self, x: Tensor) -> Tensor:
        return x.reshape(self.num_pods, x.shape[0] // self.num_pods, *x.shape[1:])

    def normalize(self, obs: Tensor) -> Tensor:
        return self.norm.normalize(self._pods(obs)).reshape(obs.shape)

    def update(self, obs: Tensor) -> None:
        """Fold step ``j``'s observations into the statistics of the ``fit`` pods whose path has a
        step ``j`` (``ObsNormalizer.update`` per pod)."""
        own = self.fit if self.lengths is None else self.fit & (self._step < self.lengths)
        self.norm.update(self._pods(obs), own)
        self._step += 1

    def actor_mean(self, obs: Tensor) -> Tensor:
        out = self._actor(self.params, self._pods(obs))
        return out.reshape(obs.shape[0], out.shape[-1])

    def to_action(self, raw: Tensor, obs: Tensor | None = None) -> Tensor:
        return self.template.to_action(raw, obs)

    # --- per pod --------------------------------------------------------------------------------------
    def tensors(self) -> list[Tensor]:
        """The parameters in the optimizer's order (:class:`StackedAdam` reads them)."""
        return list(self.params.values())

    def finite(self) -> list[bool]:
        ok = torch.ones(self.num_pods, dtype=torch.bool, device=self.device)
        for t in self.params.values():
            ok &= torch.isfinite(t.detach().reshape(self.num_pods, -1)).all(dim=1)
        return ok.tolist()

    def batched_act(self, slots: Sequence[int]) -> Callable[[Tensor], Tensor]:
        """``act(obs (S, obs_dim)) -> (S, A)``: pod ``slots[i]``'s deterministic action on row ``i``
        (a detached copy of the weights: ``Policy.act`` pod by pod, to float rounding)."""
        index = torch.as_tensor(list(slots), dtype=torch.long, device=self.device)
        view = copy.copy(self)
        view.num_pods = len(slots)
        view.params = {k: v.detach().index_select(0, index) for k, v in self.params.items()}
        view.norm = self.norm.select(index)
        view.net = view.obs_norm = view

        @torch.no_grad()
        def act(obs: Tensor) -> Tensor:
            obs = obs.to(self.device, torch.float32)
            return view.to_action(view.actor_mean(view.normalize(obs))[:, : view.raw_dim], obs)

        return act


def pod_objectives(net: Tensor, equal: Tensor, kind: str, lengths: Tensor) -> Tensor:
    """``agents.direct.objective_of`` of each pod: ``net``, ``equal`` ``(P, B, L)``, pod ``p``'s
    decisions the first ``lengths[p]`` of each path; ``(P,)`` (unbiased std, as ``Tensor.std``)."""
    x = objective_series(net, equal, kind)
    own = (torch.arange(x.shape[2], device=x.device) < lengths.unsqueeze(1)).unsqueeze(1)  # (P, 1, L)
    n = (lengths * x.shape[1]).to(x.dtype)
    mean = torch.where(own, x, 0.0).sum(dim=(1, 2)) / n
    var = torch.where(own, (x - mean.view(-1, 1, 1)).square(), 0.0).sum(dim=(1, 2)) / (n - 1.0)
    return mean / (var.sqrt() + 1e-8)


def _padded(d: Decisions, rows: int) -> Decisions:
    """``d`` with ``rows`` more decisions of nothing tradable (the masked steps of short-horizon pods
    may run past the window's end)."""

    def pad(t: Tensor) -> Tensor:
        return torch.cat([t, torch.zeros(rows, *t.shape[1:], dtype=t.dtype, device=t.device)])

    return Decisions(**{f.name: pad(getattr(d, f.name)) for f in dataclasses.fields(Decisions)})


class _Round:
    """One round of a direct population: the pods' state between updates (module docstring)."""

    def __init__(self, setups: Sequence[PodSetup], market: Any, params: Any) -> None:
        self.setups, self.env_params = setups, params
        self.args: list[DirectArgs] = [s.args for s in setups]  # type: ignore[misc]
        first = self.args[0]
        if any(a.average_weights or a.finetune != "all" for a in self.args):
            raise ConfigError(
                'average_weights and finetune other than "all" (study settings of agents.direct) are not '
                "on the population backend; train those pods on the local or ray backend"
            )
        decisions = decisions_of(market, int(params.decision_interval))
        self.held_out, self.fit_rows = _split(decisions, first)
        self.horizons = [min(a.horizon, self.fit_rows) for a in self.args]
        if self.fit_rows < 2 or min(self.horizons) < 1:
            raise ConfigError(
                f"the train window's {decisions.num} decisions are too few for the direct learner"
            )
        self.hold_len = decisions.num - self.fit_rows
        self.decisions = _padded(decisions, max(self.horizons))
        self.stack = StackedDirect([s.policy for s in setups])
        self.num_pods, device = self.stack.num_pods, self.stack.device
        self.adam = StackedAdam(self.stack, decoupled=True)  # type: ignore[arg-type]
        for slot, setup in enumerate(setups):
            self.adam.load(slot, setup.optimizer_state)

        def per_pod(name: str) -> Tensor:
            return torch.tensor([float(getattr(a, name)) for a in self.args], device=device)

        self.lr, self.wd, self.max_norm = (
            per_pod("learning_rate"),
            per_pod("weight_decay"),
            per_pod("max_grad_norm"),
        )
        self.lengths = torch.tensor(self.horizons, device=device)
        self.gens = [torch.Generator(device="cpu").manual_seed(int(a.seed)) for a in self.args]
        self.fit_left = [
            a.norm_updates if s.policy.obs_norm.count == 0 else 0
            for a, s in zip(self.args, setups, strict=True)
        ]
        self.best = torch.full((self.num_pods,), -torch.inf, device=device)
        self.best_params = {k: v.detach().clone() for k, v in self.stack.params.items()}
        self.has_best = torch.zeros(self.num_pods, dtype=torch.bool, device=device)
        self.start_series = torch.zeros(self.num_pods, self.hold_len, device=device)
        self.has_start = torch.zeros(self.num_pods, dtype=torch.bool, device=device)
        self.margin = torch.tensor([float(a.holdout_margin) for a in self.args], device=device)
        # The tensors the objective's gradient reaches (AdamW steps those; before a step: the ones a
        # parent's optimizer state holds, so a pod that takes no step hands that state back).
        held = next(
            (s.optimizer_state["state"] for s in setups if (s.optimizer_state or {}).get("state")), {}
        )
        self.used: list[bool] = [i in held for i in range(len(self.stack.tensors()))] if held else []

    def holdout(self) -> tuple[Tensor, Tensor]:
        """Every pod's objective run from cash over the held-out tail (no gradient), ``(P,)``, and the
        per-decision series it is the Sharpe ratio of, ``(P, L)``."""
        p, length = self.num_pods, self.hold_len
        starts = torch.full((p,), self.fit_rows, device=self.stack.device)
        self.stack.begin(torch.full((p,), length, device=self.stack.device), torch.zeros_like(self.stack.fit))
        kind = self.args[0].objective
        with torch.no_grad():
            net, equal = simulate(
                self.stack, self.decisions, starts, length, self.env_params, benchmark=benchmark_of(kind)
            )  # type: ignore[arg-type]
        scores = pod_objectives(
            net.view(p, 1, length), equal.view(p, 1, length), kind, self.lengths.new_full((p,), length)
        )
        return scores, objective_series(net, equal, kind).view(p, length)

    def keep_start(self, scores: Tensor, series: Tensor, warm: list[bool]) -> None:
        """The ``warm`` pods' starts are candidates, and their held-out ``series`` the bar that
        fine-tuning must clear by ``holdout_margin`` (``agents.direct.clears_start``)."""
        on = torch.tensor(warm, device=self.stack.device) & torch.isfinite(scores)
        self.start_series = torch.where(on.unsqueeze(1), series, self.start_series)
        self.has_start |= on
        self.keep_best(scores, warm)

    def keep_best(self, scores: Tensor, due: list[bool], series: Tensor | None = None) -> None:
        """The ``due`` pods whose held-out ``scores`` beat their best (and whose ``series`` clears
        their start's bar, when given) keep these weights."""
        on = torch.tensor(due, device=self.stack.device)
        better = on & torch.isfinite(scores) & (scores > self.best)
        if series is not None:
            waived = ~self.has_start | (self.margin <= 0)
            better &= waived | (paired_t(series, self.start_series) > self.margin)
        self.best = torch.where(better, scores, self.best)
        self.has_best |= better
        for name, value in self.stack.params.items():
            row = better.view(-1, *([1] * (value.dim() - 1)))
            self.best_params[name] = torch.where(row, value.detach(), self.best_params[name])

    def step(self, active: list[bool]) -> Tensor:
        """One update of the ``active`` pods (``agents.direct``'s gradient step, per pod); ``(P,)``:
        each pod's objective before the step."""
        p, batch, horizon = self.num_pods, self.args[0].batch_paths, max(self.horizons)
        starts = torch.cat(
            [
                torch.randint(0, self.fit_rows - h + 1, (batch,), generator=g)
                if on
                else torch.zeros(batch, dtype=torch.long)
                for h, g, on in zip(self.horizons, self.gens, active, strict=True)
            ]
        ).to(self.stack.device)
        fit = [on and left > 0 for on, left in zip(active, self.fit_left, strict=True)]
        self.stack.begin(self.lengths, torch.tensor(fit, device=self.stack.device))
        kind = self.args[0].objective
        net, equal = simulate(
            self.stack,
            self.decisions,
            starts,
            horizon,
            self.env_params,
            fit_norm=any(fit),
            benchmark=benchmark_of(kind),
        )  # type: ignore[arg-type]
        shape = (p, batch, horizon)
        objective = pod_objectives(net.view(shape), equal.view(shape), kind, self.lengths)
        on = torch.tensor(active, device=self.stack.device)
        grads = torch.autograd.grad(
            -torch.where(on, objective, 0.0).sum(), self.stack.tensors(), allow_unused=True
        )
        self.used = [g is not None for g in grads]
        used = [g for g in grads if g is not None]
        clipped = iter(clip_grad_norms(used, self.max_norm))
        self.adam.update(
            [None if g is None else next(clipped) for g in grads], self.lr, on, weight_decay=self.wd
        )
        return objective.detach()

    def restore_best(self) -> None:
        with torch.no_grad():
            for name, value in self.stack.params.items():
                row = self.has_best.view(-1, *([1] * (value.dim() - 1)))
                value.copy_(torch.where(row, self.best_params[name], value))

    def export(self, slot: int) -> tuple[Policy, dict]:
        """Pod ``slot``'s policy (its setup's, weights and statistics written back) and its AdamW
        ``state_dict`` (as ``agents.direct.train`` returns it: state for the tensors it stepped)."""
        policy = self.setups[slot].policy
        policy.net.load_state_dict({k: v[slot].detach().clone() for k, v in self.stack.params.items()})
        self.stack.norm.export(slot, policy.obs_norm)
        opt = adamw_for(policy, self.args[slot], None)
        step = float(self.adam.step[slot])
        if step > 0:
            for param, m, v, on in zip(
                policy.net.parameters(), self.adam.exp_avg, self.adam.exp_avg_sq, self.used, strict=True
            ):
                if on:
                    opt.state[param] = {
                        "step": torch.tensor(step),
                        "exp_avg": m[slot].clone(),
                        "exp_avg_sq": v[slot].clone(),
                    }
        policy.eval()
        return policy, opt.state_dict()


def train_population(
    setups: Sequence[PodSetup], market: Any, params: Any
) -> tuple[list[TrainResult], StackedDirect]:
    """Train every pod of ``setups`` (one :func:`direct_shape_key`) on ``market``'s train window for
    its ``args.total_steps`` env-steps (or until its deadline): each pod's result as
    ``agents.direct.train`` returns it, and the trained stack (its ``finite`` and ``batched_act``)."""
    run = _Round(setups, market, params)
    p = run.num_pods
    total = [a.total_steps for a in run.args]
    env_steps, updates, running, stopped = [0] * p, [0] * p, [True] * p, [False] * p
    history: list[list[dict[str, Any]]] = [[] for _ in range(p)]
    logs: list[Tensor] = []  # objectives and held-out scores, on the device until the round ends
    warm = [left == 0 for left in run.fit_left]  # a warm start (the ridge or a parent) is a candidate
    if any(warm):
        run.keep_start(*run.holdout(), warm)
        env_steps = [n + run.held_out * w for n, w in zip(env_steps, warm, strict=True)]
    start = time.monotonic()
    while True:
        active = [on and n < t for on, n, t in zip(running, env_steps, total, strict=True)]
        if not any(active):
            break
        logs.append(run.step(active))
        due, last = [False] * p, [False] * p
        for i in (i for i in range(p) if active[i]):
            run.fit_left[i] = max(0, run.fit_left[i] - 1)
            updates[i] += 1
            env_steps[i] += run.args[i].batch_paths * run.horizons[i]
            history[i].append(
                {
                    "env_steps": float(env_steps[i]),
                    "update": float(updates[i]),
                    "losses/objective": (len(logs) - 1, i),
                    "charts/sps": env_steps[i] / max(time.monotonic() - start, 1e-9),
                }
            )
            last[i] = env_steps[i] >= total[i]
            due[i] = run.fit_left[i] == 0 and (updates[i] % run.args[i].holdout_every == 0 or last[i])
        if any(due):
            scores, series = run.holdout()
            logs.append(scores)
            run.keep_best(scores, due, series)
            for i in (i for i in range(p) if due[i]):
                env_steps[i] += run.held_out
                history[i][-1]["charts/holdout_objective"] = (len(logs) - 1, i)
        now = time.monotonic()
        for i in (i for i in range(p) if active[i]):
            deadline = run.setups[i].deadline
            if deadline is not None and now >= deadline:
                running[i], stopped[i] = False, not last[i]
    run.restore_best()
    _read_logs(history, logs, run)
    results = []
    for i in range(p):
        policy, opt_state = run.export(i)
        results.append(
            TrainResult(
                policy=policy,
                optimizer_state=opt_state,
                env_steps=env_steps[i],
                history=history[i],
                updates=updates[i],
                stopped_by_callback=stopped[i],
            )
        )
    return results, run.stack


def _read_logs(history: list[list[dict[str, Any]]], logs: list[Tensor], run: _Round) -> None:
    """The rows' ``(log, pod)`` references replaced by their values (one device read for the round),
    and each pod's best held-out objective on its last row."""
    table = torch.stack(logs).cpu().tolist() if logs else []
    best, has_best = run.best.cpu().tolist(), run.has_best.cpu().tolist()
    for pod, rows in enumerate(history):
        for row in rows:
            for key, value in row.items():
                if isinstance(value, tuple):
                    row[key] = float(table[value[0]][value[1]])
        if rows and has_best[pod]:
            rows[-1]["charts/holdout_best"] = float(best[pod])
