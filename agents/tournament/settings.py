"""What a tournament is set to do, and the decisions taken once from those settings for all its pods.

- :class:`TournamentArgs`: the ``[tournament]`` section of the config;
- :func:`learner_compile`: PPO's ``compile`` of every pod, decided once per run from its budget;
- :func:`auto_round_timeout`: when a round with no result counts as hung.

The loop that uses them is :mod:`agents.tournament.orchestrator`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.args import COMPILE_MIN_MINIBATCHES, PPOArgs
from data.errors import ConfigError

CHAMPION_KINDS = ("best", "ensemble")
#: ``[tournament] backend`` values (agents.tournament.backend_choice builds them).
BACKENDS = ("auto", "local", "ray", "population")
#: The learners the population backend trains (``agents.population``); others run on local or ray.
POPULATION_ALGOS = ("ppo", "direct")
#: The fitnesses a pod can be ranked by (``backtests.scoring.fitness``'s kinds).
FITNESS = ("sharpe", "return", "calmar")


@dataclass(frozen=True)
class TournamentArgs:
    """Settings of one tournament (``[tournament]`` in the config)."""

    pods: int | None = None
    """pods training at once (None: the backend's own). local: pods in flight, at most ``workers``
    (None: one per worker); ray: pods in flight, at most what the cluster has room for (None: that
    room); population: the population size (the same setting as ``population_size``: give one, or
    both equal)"""
    leaderboard_size: int = 8
    """K: entries kept on the board"""
    p_fresh: float = 0.25
    """probability that a new pod starts from scratch instead of from a leaderboard entry"""
    round_steps: int = 100_000
    """env-steps of one pod round"""
    round_seconds: float | None = None
    """optional wall-time cap of one pod round"""
    budget_steps: int | None = 2_000_000
    """total env-steps of the run (all pods, failed ones included)"""
    budget_minutes: float | None = None
    """total wall time of the run (across resumed sessions)"""
    fitness: str = "sharpe"
    """validation fitness: sharpe, return or calmar"""
    backend: str = "auto"
    """auto, local, ray or population ("auto": population for PPO and direct pods on a CUDA device, else local)"""
    workers: int = 2
    """local backend: worker processes (0 = inline); population backend: 0 = inline, else worker
    processes (one holding a GPU; on a CPU this many, one population each)"""
    population_size: int = 0
    """population backend: pods per population (0: chosen from the device's memory and a short probe;
    a fixed default on a CPU)"""
    envs_per_pod: int = 0
    """population backend: envs per pod (0: the run's ``[env] num_envs``, or more where the sizing
    probe on a GPU finds more faster: agents.population.sizing)"""
    overlap_rounds: bool | None = None
    """population backend: train the next population while the last one is scored and written (its
    pods then come from a board one population behind); None: on for a CUDA device (one worker)"""
    address: str | None = None
    """ray: address of an existing cluster (None: start a local one); population: run each
    population on that Ray cluster, one per GPU (None: on this machine)"""
    seed: int = 0
    """seed of the generator (pod seeds, fresh/child choices, mutations)"""
    algo: str = "ppo"
    """learner of fresh pods"""
    max_consecutive_failures: int = 20
    """stop with an error after this many failed pods in a row (a broken setup, not a bad pod)"""
    round_timeout_s: float | None = None
    """kill a pod round with no result after this many seconds and record it failed (a hung pod: no
    NaN, no crash); None: ``auto_round_timeout`` (4x the median round so far, generous floors)"""
    champion: str = "best"
    """champion of the run: "best" (the top leaderboard pod) or "ensemble" (mean of the top ensemble_size)"""
    ensemble_size: int = 4
    """K: leaderboard pods averaged by the ensemble (scored and counted as one more trial either way)"""
    refit: bool = True
    """refit a direct champion that is its start on the train and validation windows once chosen
    (agents.tournament.refit); the baselines refit alike (backtests.linear, backtests.boosted)"""

    def __post_init__(self) -> None:
        if self.budget_steps is None and self.budget_minutes is None:
            raise ConfigError("tournament: give budget_steps or budget_minutes")
        if (self.pods is not None and self.pods < 1) or self.leaderboard_size < 1 or self.round_steps < 1:
            raise ConfigError("tournament: pods, leaderboard_size and round_steps must be >= 1")
        if not 0.0 <= self.p_fresh <= 1.0:
            raise ConfigError(f"tournament.p_fresh must be in [0, 1], got {self.p_fresh}")
        if self.fitness not in FITNESS:
            raise ConfigError(f"tournament.fitness: {self.fitness!r} is not one of {FITNESS}")
        if self.workers < 0:
            raise ConfigError("tournament.workers must be >= 0")
        if self.population_size < 0 or self.envs_per_pod < 0:
            raise ConfigError("tournament.population_size and envs_per_pod must be >= 0")
        if self.backend not in BACKENDS:
            raise ConfigError(f"tournament.backend: {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.backend == "population" and self.algo not in POPULATION_ALGOS:
            raise ConfigError(
                f'tournament.backend = "population" trains {" and ".join(POPULATION_ALGOS)} pods only '
                f"(the learner is {self.algo}); "
                'use backend = "local" or "ray"'
            )
        if self.champion not in CHAMPION_KINDS:
            raise ConfigError(f"tournament.champion: {self.champion!r} is not one of {CHAMPION_KINDS}")
        if self.ensemble_size < 1:
            raise ConfigError("tournament.ensemble_size must be >= 1")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> TournamentArgs:
        """Build from a config section dict, ignoring keys this class does not have."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in names})


#: ``[agent] compile = "auto"`` with only a wall-time budget: every pod compiles from this many minutes.
#: The key: docs/agents.md ("Settings"), the tournament's rule: docs/tournament.md ("Config").
COMPILE_MIN_MINUTES = 2.0


def learner_compile(args: TournamentArgs, env: Mapping[str, Any], agent: Mapping[str, Any]) -> str:
    """The PPO ``compile`` setting of every pod of this run ("on" or "off").

    ``"auto"`` is decided here, once per run, from the run's budget (the minibatch steps each worker
    will do, or the wall-time budget), never per pod: a pod's numbers must not depend on which worker
    ran it or what that worker ran before (compiled and eager round differently), so a fixed seed and
    budget give the same champion on every backend.
    """
    mode = str(agent.get("compile", PPOArgs.compile))
    if mode != "auto" or args.algo != "ppo":
        return mode if args.algo == "ppo" else "off"
    names = {f.name for f in dataclasses.fields(PPOArgs)}
    base = PPOArgs(**{k: v for k, v in agent.items() if k in names and k != "compile"})
    if args.budget_steps is None:
        return "on" if (args.budget_minutes or 0.0) >= COMPILE_MIN_MINUTES else "off"
    updates = args.budget_steps / base.batch_size(int(env.get("num_envs", 16)))
    per_worker = (
        updates
        * base.update_epochs
        * base.num_minibatches
        / max(1, min(args.workers, args.pods or args.workers))
    )
    return "on" if per_worker >= COMPILE_MIN_MINIBATCHES else "off"


AUTO_TIMEOUT_FIRST_S = 3600.0  # before the median round time is known
AUTO_TIMEOUT_FLOOR_S = 600.0  # never fewer seconds than this when derived from the median
AUTO_TIMEOUT_FACTOR = 4.0


def auto_round_timeout(durations: list[float], round_seconds: float | None = None) -> float:
    """The round timeout when none is set: 4x the median finished round (from 3 rounds on), at least
    ``AUTO_TIMEOUT_FLOOR_S`` and twice the round's own wall-time cap; a fixed hour before that."""
    if len(durations) < 3:
        base = AUTO_TIMEOUT_FIRST_S
    else:
        base = max(AUTO_TIMEOUT_FLOOR_S, AUTO_TIMEOUT_FACTOR * float(statistics.median(durations)))
    return max(base, 2.0 * round_seconds) if round_seconds else base
