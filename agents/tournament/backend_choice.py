"""Which backend a tournament runs on: ``[tournament] backend`` (``auto``, ``local``, ``ray`` or
``population``) and the device, turned into a :class:`~agents.tournament.backends.Backend`.

``auto`` (the default) is ``population`` for the learners it trains (``settings.POPULATION_ALGOS``:
PPO and direct) on a CUDA device (one program over P pods fills a GPU that one small pod leaves
idle) and local worker processes otherwise: on the 2-core development CPU the population tried
fewer pods per budget than two worker processes (docs/benchmarks.md, "Population backend"), and SAC
pods have no population learner, so ``auto`` never trains another learner than ``[agent] algo``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from agents.tournament.backends import Backend, InlineBackend, ProcessBackend, RayBackend
from agents.tournament.population import check_algo
from agents.tournament.population_backend import PopulationBackend
from agents.tournament.settings import BACKENDS, POPULATION_ALGOS, TournamentArgs
from data.errors import ConfigError

log = logging.getLogger(__name__)


def resolve_backend(name: str, device: str | torch.device, algo: str = "ppo") -> str:
    """The backend ``name`` stands for on ``device``: ``auto`` becomes ``population`` (a learner it
    trains, on CUDA) or ``local``; the others stay (``population`` with another learner is a
    ``ConfigError``)."""
    if name not in BACKENDS:
        raise ConfigError(f"tournament.backend: unknown backend {name!r} (expected {', '.join(BACKENDS)})")
    if name == "auto":
        cuda = torch.device(device).type == "cuda"
        return "population" if cuda and algo in POPULATION_ALGOS else "local"
    if name == "population":
        check_algo(algo)
    return name


def population_pods(pods: int | None, population_size: int) -> int:
    """Pods per population on the population backend: ``population_size``, or ``pods`` (the same
    setting under the name every backend reads); 0 when neither is set (the backend chooses). Both
    set and different is a one-line ``ConfigError``."""
    if pods is not None and population_size > 0 and pods != population_size:
        raise ConfigError(
            f"tournament.pods = {pods} and tournament.population_size = {population_size}: on the "
            "population backend both are the population size; give one of them"
        )
    return population_size if population_size > 0 else int(pods or 0)


def check_settings(
    chosen: str,
    *,
    population_size: int = 0,
    envs_per_pod: int = 0,
    address: str | None = None,
    overlap_rounds: bool | None = None,
) -> None:
    """Refuse, in one line, a setting the ``chosen`` backend would not use (none is silently ignored)."""
    if overlap_rounds and chosen != "population":
        raise ConfigError(
            f"tournament.overlap_rounds applies to the population backend only (this run's backend is {chosen})"
        )
    for name, value in (("population_size", population_size), ("envs_per_pod", envs_per_pod)):
        if value > 0 and chosen != "population":
            raise ConfigError(
                f"tournament.{name} = {value} applies to the population backend only "
                f'(this run\'s backend is {chosen}); drop it or set backend = "population"'
            )
    if address is not None and chosen == "local":
        raise ConfigError(
            f"tournament.address = {address!r} applies to the ray and population backends only "
            '(this run\'s backend is local); drop it or set backend = "ray"'
        )


def check_backend_args(args: TournamentArgs, device: str | torch.device) -> str:
    """The backend ``args`` choose on ``device``, once the settings it would not use are refused
    (what :func:`make_backend` checks; for callers that must refuse before they write anything)."""
    chosen = resolve_backend(args.backend, device, args.algo)
    check_settings(
        chosen,
        population_size=args.population_size,
        envs_per_pod=args.envs_per_pod,
        address=args.address,
        overlap_rounds=args.overlap_rounds,
    )
    if chosen == "population":
        population_pods(args.pods, args.population_size)
    return chosen


def make_backend(
    name: str,
    *,
    workers: int = 0,
    address: str | None = None,
    pods: int | None = None,
    population_size: int = 0,
    envs_per_pod: int = 0,
    round_steps: int | None = None,
    overlap_rounds: bool | None = None,
    device: str | torch.device = "cpu",
    algo: str = "ppo",
    **kwargs: Any,
) -> Backend:
    """The backend for ``name`` (resolved by :func:`resolve_backend`): ``local`` (``workers=0``:
    inline), ``ray``, or ``population`` (inline with ``workers=0``; on Ray with an ``address``; its
    population size from :func:`population_pods`). A setting the backend would not use is refused
    (:func:`check_settings`)."""
    chosen = resolve_backend(name, device, algo)
    if chosen != name:
        log.info(
            "tournament backend: %s -> %s (device %s, %s pods)", name, chosen, torch.device(device).type, algo
        )
    name = chosen
    check_settings(
        name,
        population_size=population_size,
        envs_per_pod=envs_per_pod,
        address=address,
        overlap_rounds=overlap_rounds,
    )
    if name == "local":
        return InlineBackend() if workers == 0 else ProcessBackend(workers)
    if name == "ray":
        return RayBackend(address, **kwargs)
    return PopulationBackend(
        population_pods(pods, population_size),
        envs_per_pod=envs_per_pod,
        round_steps=round_steps,
        overlap=overlap_rounds,
        workers=workers,
        ray=address is not None,
        address=address,
        algo=algo,
        **kwargs,
    )
