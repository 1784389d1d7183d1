"""A population round: P pod rounds trained and scored as one batch (the population backend's work).

:func:`population_round` (:func:`setup_round`, its training, then :func:`finish_round`: the parts
the population backend's :class:`~agents.tournament.round_pipeline.RoundPipeline` runs in three
threads, so that the device trains round after round) takes the
:class:`~agents.tournament.pod.PodTask` s of one population and
returns one outcome per task, exactly what :func:`~agents.tournament.pod.learner_round` would have
returned for each (to float rounding; tests/test_population.py): each pod starts from its spec (fresh
weights from its seed, or its parent's checkpoint: weights *and* optimizer state copied into its row
of the population, the exploit step, with its mutated hyper-parameters in its row of the per-pod
tensors, the explore step), trains ``round_steps`` env-steps (or until its wall-time cap), is scored
on the validation window, and gets the same files as ever (checkpoint, curve, validation returns).

- Pods are grouped by :func:`agents.population.learner.shape_key`; each group is one
  :class:`~agents.population.learner.Population` (a tournament's pods share their shapes, so there
  is one group unless the config changed between resumed sessions).
- The validation backtests of a group are one batched pass (``backtests.engine.PolicyBatch``: the
  pods' deterministic policies as one stacked forward over all rows, each pod with its own
  normalization), scored by :func:`~agents.tournament.pod.score_policies`.
- The parents' checkpoints are read, and the pods' files written, by a few threads at once
  (:data:`FILE_THREADS`): each pod's files are written atomically with an fsync, and on one device a
  population's 128 pods would otherwise spend seconds a round waiting on the disk one after another.
  (Fresh pods are built in turn: their init seeds the global RNG under ``fork_rng``.) How long the
  round took to set up, train, validate and write is on every outcome (``PodOutcome.phases``; summed
  over its shape groups); the backend logs it once per population round.
- A failure is per pod where it can be (a checkpoint that does not load, non-finite weights, NaN
  validation returns: that pod fails, the others go on); an error of the batch itself fails every pod
  of the group.
- Populations are kept per process (:data:`_CACHE`), so a worker's buffers and CUDA graphs are
  recorded once and serve every later round of the same size on the same train window.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agents.args import DirectArgs
from agents.checkpoint import Checkpoint
from agents.networks import NetworkConfig
from agents.population.direct import StackedDirect, direct_shape_key, start_direct_pod
from agents.population.direct import train_population as train_direct
from agents.population.learner import PodSetup, Population, shape_key
from agents.population.sizing import (
    Sizing,
    bytes_per_pod,
    choose_shape,
    direct_shape,
    free_device_cache,
    learner_rate,
    max_envs_per_pod,
)
from agents.ppo import PPOArgs
from agents.tournament.pod import (
    PodOutcome,
    PodTask,
    RoundContext,
    RoundError,
    as_round_error,
    checked_outcome,
    env_params,
    make_train_env,
    pod_args,
    pod_num_envs,
    save_round,
    score_policies,
)
from agents.tournament.settings import POPULATION_ALGOS
from agents.training import TrainResult, policy_for_env
from backtests.engine import PolicyBatch
from data.errors import ConfigError

#: Threads reading a population round's parent checkpoints, and writing its pods' files, at once.
FILE_THREADS = 8

#: Populations of this process, by (shape key, pods, env settings, device, train window): reused
#: round after round. A population's envs are built on its train window, so the window is part of the
#: key (:func:`window_key`): a later tournament of the same shapes in the same process (the next
#: market of a benchmark, the next fold of a walk-forward) trains on its own data, never the first's.
#: Only one window's populations are kept: a population on a new window drops the others, whose
#: windows, envs and rollout buffers (about 2 GB at 100 tickers x 72 sessions on the library's
#: features) would otherwise stay resident market after market in a benchmark's process.
_CACHE: dict[tuple[Any, ...], Population] = {}
_CACHE_SIZE = 3


@dataclass(frozen=True)
class _Spec:
    """What ``agents.training.policy_for_env`` reads of an env, without building one."""

    market: Any
    params: Any
    num_assets: int
    num_features: int
    device: Any


def _env_spec(ctx: RoundContext) -> _Spec:
    market = ctx.train.to(ctx.device)
    return _Spec(market, env_params(ctx), market.num_assets, market.num_features, torch.device(ctx.device))


def get_population(
    ctx: RoundContext, args: PPOArgs, config: NetworkConfig, num_pods: int, graphs: bool | None
) -> Population:
    """The cached population for these shapes on this train window (built on first use)."""
    key = (
        shape_key(args, config),
        num_pods,
        tuple(sorted((k, str(v)) for k, v in ctx.env.items())),
        ctx.device,
        window_key(ctx.train),
    )
    population = _CACHE.pop(key, None)
    if population is None:
        drop_other_windows(key[-1])
        population = Population(
            lambda n: make_train_env(ctx, n),
            config=config,
            num_pods=num_pods,
            num_envs=pod_num_envs(ctx),
            num_steps=args.num_steps,
            num_minibatches=args.num_minibatches,
            norm_adv=args.norm_adv,
            clip_vloss=args.clip_vloss,
            norm_obs=args.norm_obs,
            graphs=graphs,
        )
    _CACHE[key] = population  # (most recently used last)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    return population


def drop_other_windows(window: tuple[Any, ...]) -> None:
    """Drop the cached populations of every train window but ``window``, and free their memory now
    (a population's env closures hold reference cycles, which only the cycle collector frees)."""
    stale = [key for key in _CACHE if key[-1] != window]
    for key in stale:
        del _CACHE[key]
    if stale:
        gc.collect()
        free_device_cache()


def window_key(market: Any) -> tuple[Any, ...]:
    """What tells one train window from another in :data:`_CACHE`: its names, shapes, sessions and
    sums of its prices, volumes and a strided sample of its features. By content, not identity: a
    round's window is a fresh object wherever it is moved to a device or unpickled (a worker's, a Ray
    task's), while the same window must find its population round after round. A few milliseconds a
    round on a CPU."""
    features = market.features.reshape(-1)
    sample = features[:: max(1, features.numel() // 65536)]
    sums = torch.stack([market.close.sum(), market.volume.sum(), sample.sum()]).tolist()
    sessions = (int(market.session_id[0]), int(market.session_id[-1])) if market.num_steps else ()
    return (
        tuple(market.tickers),
        tuple(market.feature_names),
        tuple(market.features.shape),
        sessions,
        *sums,
    )


@dataclass
class TrainedGroup:
    """One shape group of a round, trained: what its scoring and files need, none of it shared with
    the population's buffers (the next round may train in them while this one is finished)."""

    members: list[tuple[int, PodSetup]]  # (task index, setup)
    results: list[TrainResult]  # per member: its exported policy and optimizer state (copies)
    finite: list[bool]  # per member: its parameters are finite
    act: Callable[[Any], Any] | None  # the finite members' batched deterministic policy (copied weights)


@dataclass
class TrainedRound:
    """A population round after training, before validation and files (:func:`finish_round`)."""

    tasks: Sequence[PodTask]
    ctx: RoundContext
    spec: _Spec  # the train window on the device, the env settings
    start: float  # time.monotonic() when the round began
    outcomes: list[PodOutcome | RoundError | None]  # the pods that failed before or during training
    groups: list[TrainedGroup]
    phases: dict[str, float]  # seconds so far: setup_s, train_s


def population_round(
    tasks: Sequence[PodTask], ctx: RoundContext, graphs: bool | None = None
) -> list[PodOutcome | RoundError]:
    """One round of every pod in ``tasks``: :func:`train_round` then :func:`finish_round` (see the
    module docstring). Never raises for a pod's failure."""
    return finish_round(train_round(tasks, ctx, graphs))


def train_round(tasks: Sequence[PodTask], ctx: RoundContext, graphs: bool | None = None) -> TrainedRound:
    """Set up and train every pod of ``tasks`` (the first half of :func:`population_round`)."""
    return setup_round(tasks, ctx, graphs)()


def setup_round(
    tasks: Sequence[PodTask], ctx: RoundContext, graphs: bool | None = None
) -> Callable[[], TrainedRound]:
    """Set up every pod of ``tasks`` (the parents' checkpoints read, fresh pods built) and return the
    round's training, to run when the device is free (:func:`train_round` runs both at once). A pod's
    wall-time cap counts from here."""
    start = time.monotonic()
    spec_env = _env_spec(ctx)
    outcomes: list[PodOutcome | RoundError | None] = [None] * len(tasks)
    groups: dict[tuple[Any, ...], list[tuple[int, PodSetup]]] = {}
    with cf.ThreadPoolExecutor(max_workers=FILE_THREADS) as pool:  # the parents' checkpoints, read at once
        loads = {
            i: pool.submit(Checkpoint.load, task.spec.init_checkpoint, device=ctx.device)
            for i, task in enumerate(tasks)
            if task.spec.init_checkpoint
        }
    ridges: dict[Any, Any] = {}  # (the fresh direct pods' ridge start, fitted once a round)
    for i, task in enumerate(tasks):
        try:
            algo = task.spec.algo
            if algo not in POPULATION_ALGOS:
                raise RoundError(
                    f"the population backend trains {' and '.join(POPULATION_ALGOS)} pods, not {algo}"
                )
            args = pod_args(DirectArgs if algo == "direct" else PPOArgs, task, ctx)
            init = loads[i].result() if i in loads else None
            policy, opt_state = policy_for_env(init, spec_env, args, algo)
            if algo == "direct" and init is None:
                start_direct_pod(policy, args, spec_env.market, spec_env.params.decision_interval, ridges)
            deadline = None if task.round_seconds is None else start + task.round_seconds
            setup = PodSetup(policy, opt_state, args, deadline)
            key = (
                direct_shape_key(args, policy.config) if algo == "direct" else shape_key(args, policy.config)
            )
            groups.setdefault(key, []).append((i, setup))
        except Exception as err:  # noqa: BLE001 - a pod that cannot start fails alone
            outcomes[i] = as_round_error(err)
    trained = TrainedRound(tasks, ctx, spec_env, start, outcomes, [], {"setup_s": time.monotonic() - start})
    return lambda: _train_groups(trained, groups, graphs)


def _train_groups(
    trained: TrainedRound, groups: dict[tuple[Any, ...], list[tuple[int, PodSetup]]], graphs: bool | None
) -> TrainedRound:
    """Train each shape group of a set-up round (adds ``train_s`` to its phases)."""
    ctx, outcomes = trained.ctx, trained.outcomes
    t0 = time.monotonic()  # (building a population, on its first round, counts as training)
    for members in groups.values():
        try:
            setups = [setup for _, setup in members]
            population: Population | StackedDirect
            if isinstance(setups[0].args, DirectArgs):
                results, population = train_direct(setups, trained.spec.market, trained.spec.params)
            else:
                population = get_population(ctx, setups[0].args, setups[0].policy.config, len(setups), graphs)
                results = population.train(setups)
            finite = population.finite()
            slots = [s for s in range(len(setups)) if finite[s]]
            act = population.batched_act(slots) if slots else None
            trained.groups.append(TrainedGroup(members, results, finite, act))
        except Exception as err:  # noqa: BLE001 - the batch failed: every pod of it did
            for i, _ in members:
                outcomes[i] = as_round_error(err)
    trained.phases["train_s"] = time.monotonic() - t0
    return trained


def finish_round(
    trained: TrainedRound, host: Callable[[list[TrainResult]], list[TrainResult]] | None = None
) -> list[PodOutcome | RoundError]:
    """Score a trained round on the validation window and write its pods' files (the second half of
    :func:`population_round`); ``host`` copies a group's results to host memory, in this thread,
    before the file threads write them (None: as they are). Never raises: a failure of a group fails
    that group's pods."""
    outcomes = list(trained.outcomes)
    phases = dict(trained.phases)
    for group in trained.groups:
        try:
            done = _finish_group(trained, group, host, phases)
        except Exception as err:  # noqa: BLE001 - the group's scoring failed: every pod of it did
            done = [as_round_error(err)] * len(group.members)
        for (i, _), outcome in zip(group.members, done, strict=True):
            outcomes[i] = outcome
    phases = {k: round(v, 3) for k, v in phases.items()}
    return [
        dataclasses.replace(o, phases=phases)
        if isinstance(o, PodOutcome)
        else (o if o is not None else RoundError("pod was not run"))
        for o in outcomes
    ]


def _finish_group(
    trained: TrainedRound,
    group: TrainedGroup,
    host: Callable[[list[TrainResult]], list[TrainResult]] | None,
    phases: dict[str, float],
) -> list[PodOutcome | RoundError]:
    """Score and save one group; adds its seconds to ``phases`` (validation, files)."""
    tasks, ctx, members, start = trained.tasks, trained.ctx, group.members, trained.start
    t1 = time.monotonic()
    slots = [s for s in range(len(members)) if group.finite[s]]
    names = tuple(tasks[members[s][0]].spec.pod_id for s in slots)
    scored = iter(
        score_policies(
            PolicyBatch(names, group.act),
            ctx.valid,
            env_params(ctx),
            fitness=ctx.fitness,
            annualization=ctx.annualization,
            device=ctx.device,
        )
        if slots and group.act is not None
        else []
    )
    t2 = time.monotonic()
    results = group.results if host is None else host(group.results)  # (files: from host memory)

    def save(slot: int, pod_scored: Any) -> PodOutcome | RoundError:
        try:
            task = tasks[members[slot][0]]
            return checked_outcome(save_round(task, results[slot], pod_scored, start), start)
        except Exception as err:  # noqa: BLE001 - a pod whose files cannot be written fails alone
            return as_round_error(err)

    out: list[PodOutcome | RoundError | cf.Future] = []
    with cf.ThreadPoolExecutor(max_workers=max(1, min(FILE_THREADS, len(members)))) as pool:
        for slot in range(len(members)):
            if not group.finite[slot]:
                out.append(RoundError("parameters are not finite after training"))
                continue
            pod_scored = next(scored)
            out.append(
                pod_scored if isinstance(pod_scored, RoundError) else pool.submit(save, slot, pod_scored)
            )
    done = [o.result() if isinstance(o, cf.Future) else o for o in out]
    t3 = time.monotonic()
    for key, seconds in (("validation_s", t2 - t1), ("files_s", t3 - t2)):
        phases[key] = phases.get(key, 0.0) + seconds
    return done


# --- sizing ------------------------------------------------------------------------------------------
def base_args(ctx: RoundContext) -> PPOArgs:
    """The run's PPO arguments (the shapes every fresh pod has)."""
    names = set(PPOArgs.__dataclass_fields__)
    return PPOArgs(**{k: v for k, v in ctx.agent.items() if k in names})


def with_envs(ctx: RoundContext, num_envs: int) -> RoundContext:
    """``ctx`` with ``num_envs`` envs per pod (a population's chosen shape)."""
    if pod_num_envs(ctx) == num_envs:
        return ctx
    return dataclasses.replace(ctx, env={**ctx.env, "num_envs": int(num_envs)})


def size_population(
    ctx: RoundContext,
    graphs: bool | None = None,
    *,
    pods: int = 0,
    envs: int = 0,
    round_steps: int | None = None,
    algo: str = "ppo",
) -> Sizing:
    """A population's shape on ``ctx.device`` (:mod:`agents.population.sizing`; ``pods`` / ``envs``
    pin either): the probe times the learner side of one update (``sizing.learner_rate``) at each
    shape tried. The rounds then run on ``with_envs(ctx, sizing.num_envs)``. Direct pods are not
    probed (:func:`agents.population.sizing.direct_shape`)."""
    if algo == "direct":
        return direct_shape(torch.device(ctx.device), pod_num_envs(ctx), pods)
    args = base_args(ctx)
    config = policy_for_env(None, _env_spec(ctx), args, "ppo")[0].config

    def probe(num_pods: int, num_envs: int) -> float:
        population = get_population(with_envs(ctx, num_envs), args, config, num_pods, graphs)
        return learner_rate(population, args.update_epochs)

    def per_pod(num_envs: int) -> int:
        return bytes_per_pod(config, num_envs, args.num_steps, args.num_minibatches)

    sizing = choose_shape(
        torch.device(ctx.device),
        pod_num_envs(ctx),
        per_pod,
        probe,
        pods=pods,
        envs=envs,
        max_envs=max_envs_per_pod(args.num_steps, round_steps),
    )
    for key in [
        k
        for k, population in _CACHE.items()
        if (population.num_pods, population.num_envs) != (sizing.num_pods, sizing.num_envs)
    ]:
        del _CACHE[key]  # the probe's other shapes: their device memory goes back to the rounds
    return sizing


def check_algo(algo: str) -> None:
    """The population backend trains PPO and direct pods: anything else is a one-line ``ConfigError``."""
    if algo not in POPULATION_ALGOS:
        raise ConfigError(
            f'tournament.backend = "population" trains {" and ".join(POPULATION_ALGOS)} pods only '
            f'(agent.algo is {algo!r}); use backend = "local" or "ray"'
        )
