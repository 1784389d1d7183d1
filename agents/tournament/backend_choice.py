"""Which backend a tournament runs on: ``[tournament] backend`` (``auto``, ``local``, ``ray`` or
``population``) and the device, turned into a :class:`~agents.tournament.backends.Backend`.

``auto`` (the default) is ``population`` for PPO pods on a CUDA device (one program over P pods
fills a GPU that one small pod leaves idle) and local worker processes otherwise: on the 2-core
development CPU the population tried fewer pods per budget than two worker processes
(docs/benchmarks.md, "Population backend"), and SAC pods have no population learner.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from agents.tournament.backends import Backend, InlineBackend, ProcessBackend, RayBackend
from agents.tournament.population import check_algo
from agents.tournament.population_backend import PopulationBackend
from agents.tournament.settings import BACKENDS
from data.errors import ConfigError

log = logging.getLogger(__name__)


def resolve_backend(name: str, device: str | torch.device, algo: str = "ppo") -> str:
    """The backend ``name`` stands for on ``device``: ``auto`` becomes ``population`` (PPO on CUDA) or
    ``local``; the others stay (``population`` with another learner is a ``ConfigError``)."""
    if name not in BACKENDS:
        raise ConfigError(f"tournament.backend: unknown backend {name!r} (expected {', '.join(BACKENDS)})")
    if name == "auto":
        return "population" if torch.device(device).type == "cuda" and algo == "ppo" else "local"
    if name == "population":
        check_algo(algo)
    return name


def make_backend(
    name: str,
    *,
    workers: int = 0,
    address: str | None = None,
    population_size: int = 0,
    device: str | torch.device = "cpu",
    algo: str = "ppo",
    **kwargs: Any,
) -> Backend:
    """The backend for ``name`` (resolved by :func:`resolve_backend`): ``local`` (``workers=0``:
    inline), ``ray``, or ``population`` (inline with ``workers=0``; on Ray with an ``address``)."""
    chosen = resolve_backend(name, device, algo)
    if chosen != name:
        log.info(
            "tournament backend: %s -> %s (device %s, %s pods)", name, chosen, torch.device(device).type, algo
        )
    name = chosen
    if name == "local":
        return InlineBackend() if workers == 0 else ProcessBackend(workers)
    if name == "ray":
        return RayBackend(address, **kwargs)
    return PopulationBackend(
        population_size, workers=workers, ray=address is not None, address=address, **kwargs
    )
