"""The population backend's worker side: what runs a population round, wherever it runs.

:class:`~agents.tournament.population_backend.PopulationBackend` schedules the rounds (collecting
pods, lanes, futures, hung rounds); this module holds what it hands out: a round set up and run
through a :class:`~agents.tournament.round_pipeline.RoundPipeline` (inline, or in a spawned worker
process whose populations, buffers and CUDA graphs live as long as it does), the population's shape
(:func:`choose_size`), and the same as Ray tasks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agents.population.sizing import Sizing
from agents.tournament.backends import exit_with_parent, run_round_safely
from agents.tournament.pod import PodOutcome, PodTask, RoundContext, RoundError, RoundFn, learner_round
from agents.tournament.population import finish_round, setup_round, size_population, with_envs
from agents.tournament.round_pipeline import Prepared, RoundPipeline, Trained, host_results

Outcome = PodOutcome | RoundError


def prepare_population(
    round_fn: RoundFn, tasks: Sequence[PodTask], ctx: RoundContext, graphs: bool | None = None
) -> Prepared:
    """A population round set up: its training, which hands back its finishing
    (``agents.tournament.round_pipeline``). The real population round for the learner round, else
    ``round_fn`` pod by pod (all of it as the training)."""
    if round_fn is learner_round:
        train = setup_round(tasks, ctx, graphs)

        def learn() -> Trained:
            trained = train()
            return trained.phases, lambda host: finish_round(trained, host)

        return learn

    def run_each() -> Trained:
        outcomes = [run_round_safely(round_fn, task, ctx) for task in tasks]
        return {}, lambda host: outcomes

    return run_each


def run_population(
    pipeline: RoundPipeline,
    round_fn: RoundFn,
    tasks: Sequence[PodTask],
    ctx: RoundContext,
    graphs: bool | None,
) -> list[Outcome] | None:
    """One population round through ``pipeline``: its outcomes, or (overlapping) the previous round's."""
    return pipeline.run(lambda: prepare_population(round_fn, tasks, ctx, graphs), len(tasks))


@dataclass(frozen=True)
class Shape:
    """What the settings pin of a population's shape (0: chosen; ``agents.population.sizing``)."""

    pods: int = 0
    envs: int = 0
    round_steps: int | None = None  # (bounds the envs per pod the probe tries)
    algo: str = "ppo"  # the run's learner (the direct learner's population is not probed)


def choose_size(round_fn: RoundFn, ctx: RoundContext, shape: Shape, graphs: bool | None) -> Sizing:
    """The population's shape: what ``shape`` pins, the rest measured (``agents.population.sizing``)."""
    return size_population(
        ctx, graphs, pods=shape.pods, envs=shape.envs, round_steps=shape.round_steps, algo=shape.algo
    )


# --- in a spawned worker process ------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def init_worker(
    round_fn: RoundFn,
    ctx: RoundContext,
    graphs: bool | None,
    threads: int,
    parent_pid: int,
    started: Any,
    overlap: bool,
) -> None:
    """A spawned worker's initializer: its round function, context, threads and round pipeline."""
    torch.set_num_threads(threads)
    pipeline = RoundPipeline(overlap, ctx.device)
    _WORKER.update(round_fn=round_fn, ctx=ctx, graphs=graphs, started=started, pipeline=pipeline)
    exit_with_parent(parent_pid)


def worker_size(shape: Shape) -> Sizing:
    """Size the population in the worker (on its device); its later rounds use the chosen envs per pod."""
    sizing = choose_size(_WORKER["round_fn"], _WORKER["ctx"], shape, _WORKER["graphs"])
    _WORKER["ctx"] = with_envs(_WORKER["ctx"], sizing.num_envs)  # (the rounds' envs per pod)
    return sizing


def worker_round(batch_id: int, tasks: Sequence[PodTask]) -> list[Outcome] | None:
    """One population round in the worker (:func:`run_population`), its start time reported first."""
    _WORKER["started"].put((batch_id, time.monotonic()))  # the round timeout counts from here
    w = _WORKER
    return run_population(w["pipeline"], w["round_fn"], tasks, w["ctx"], w["graphs"])


def worker_drain() -> list[Outcome] | None:
    """The held round's outcomes (overlapping rounds, once nothing more comes)."""
    return _WORKER["pipeline"].drain()


# --- as a Ray task --------------------------------------------------------------------------------------
def ray_size(round_fn: RoundFn, ctx: RoundContext, shape: Shape, graphs: bool | None) -> Sizing:
    """The population's shape, measured on a Ray worker's device."""
    return choose_size(round_fn, ctx, shape, graphs)


def ray_round(
    round_fn: RoundFn, ctx: RoundContext, tasks: Sequence[PodTask], graphs: bool | None, threads: int
) -> list[Outcome]:
    """One population round as a Ray task: set up, trained and finished in the task."""
    torch.set_num_threads(threads)
    _phases, finish = prepare_population(round_fn, tasks, ctx, graphs)()
    return finish(host_results)
