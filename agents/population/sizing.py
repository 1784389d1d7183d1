"""A population's shape, pods x envs per pod: from the device's memory and a short measured probe.

- On a CPU: :data:`CPU_POPULATION` pods of the run's ``[env] num_envs``, no probe (the batch a few
  pods make is as large as a CPU's cores use well; more pods only make each round longer).
- On a GPU the probe times the learner side of one training update (:func:`learner_rate`: policy
  steps and minibatch updates, CUDA graphs included; the env step, linear in the envs, is left out)
  of candidate shapes, by this rule:

  1. Envs per pod ``N``: the run's ``num_envs``, then doublings up to :data:`MAX_ENVS_PER_POD` and
     to what leaves a pod at least :data:`MIN_UPDATES_PER_ROUND` updates in a round (a pod never gets
     fewer envs than the run asks for, nor a round of one or two updates).
  2. At each ``N``, pods per population ``P``: at most what fits in :data:`MEMORY_FRACTION` of the
     free memory (:func:`bytes_per_pod`: rollout storage, the minibatch working set, the envs), from
     :data:`PROBE_START` doubling while the aggregate env-steps/s grows by at least
     :data:`PROBE_GAIN` per doubling: past that point a bigger population only makes each round
     longer (fewer, later leaderboard updates) for little more throughput.
  3. ``N`` doubles while the best rate found at the doubled ``N`` beats the best at ``N`` by
     :data:`PROBE_GAIN` too (bigger batches per update are a change of the pods' learning, taken
     only for a real gain); the shape kept is the best at the last ``N`` that paid.

  Either dimension can be pinned (``[tournament] population_size`` or ``pods``; ``envs_per_pod``):
  the probe then explores the other alone; both pinned, no probe.
- Direct pods (``agents.population.direct``) have no envs and no probe (:func:`direct_shape`):
  :data:`CPU_POPULATION` pods on a CPU, :data:`DIRECT_GPU_POPULATION` on a GPU (a round number, not
  measured: the pinned settings change it).

The choice and its reasons are one log line (:meth:`Sizing.describe`), written when the backend starts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from agents.networks import NetworkConfig
from envs.observation import NUM_GLOBAL, asset_width

CPU_POPULATION = 4
DIRECT_GPU_POPULATION = 32
MAX_POPULATION = 256
MAX_ENVS_PER_POD = 1024
MIN_UPDATES_PER_ROUND = 4
PROBE_START = 8
PROBE_GAIN = 1.15
MEMORY_FRACTION = 0.6


def bytes_per_pod(config: NetworkConfig, num_envs: int, num_steps: int, num_minibatches: int) -> int:
    """Device bytes one pod of a population needs (float32), roughly: rollout storage (with the
    rollout's action noise), a minibatch's gathered inputs with the forward and backward passes'
    temporaries, and its envs' tensors."""
    a, x = config.num_assets, asset_width(config.num_features)
    obs_dim = config.obs_dim
    if config.asset_layers == 0:
        sample = x * a + 2 * x + 1 + NUM_GLOBAL  # the packed form
    else:
        sample = obs_dim + 2 * a * config.embed * config.asset_layers  # + the per-asset activations
    per_sample = sample + 2 * (a + 1) + 8  # + raw sample, its noise and the per-sample scalars
    batch = num_steps * num_envs
    minibatch = max(1, batch // num_minibatches)
    envs = num_envs * (6 * obs_dim + 8 * a + 16)  # observations (live, final, static), holdings, accounting
    return 4 * (batch * per_sample + 3 * minibatch * per_sample + envs)


def memory_cap(device: torch.device, per_pod: int) -> int | None:
    """Pods that fit in :data:`MEMORY_FRACTION` of the device's free memory (None: not a CUDA device)."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return max(1, int(free * MEMORY_FRACTION) // max(1, per_pod))


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (for timings; a no-op off CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def learner_rate(population: Any, update_epochs: int, repeats: int = 3) -> float:
    """Aggregate env-steps/s of a ``agents.population.learner.Population``'s learner side: its policy
    step, post-step, advantage estimate and minibatch update timed as one update runs them
    (``num_steps`` steps, one estimate, ``update_epochs`` epochs), on its current buffers with every
    pod masked (nothing is learned or kept), after a warm-up (and the CUDA graphs' recording). The
    env step is left out on purpose: its cost is linear in the envs, and timing it would first
    compile it for every size tried."""
    population.training.zero_()
    population.mb_active.zero_()
    size = population.minibatch_size
    steps = [population.act_step, population.post_step, population.advantage_step, population.mb_steps[size]]
    for _ in range(2):
        for step in steps:
            step()
    seconds = []
    for step in steps:
        sync(population.device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            step()
        sync(population.device)
        seconds.append((time.perf_counter() - t0) / repeats)
    minibatches = update_epochs * math.ceil(population.batch_size / size)
    per_update = population.num_steps * (seconds[0] + seconds[1]) + seconds[2] + minibatches * seconds[3]
    return population.num_pods * population.batch_size / per_update


@dataclass
class Sizing:
    """A population's shape (pods x envs per pod) and why."""

    num_pods: int
    device: str
    num_envs: int  # envs per pod
    memory_cap: int | None = None  # pods that fit at the chosen envs per pod
    probe: dict[tuple[int, int], float] = field(default_factory=dict)  # (pods, envs) -> env-steps/s
    fixed: bool = False  # both set by the config, not chosen
    pinned: tuple[str, ...] = ()  # the settings that fixed one of the two
    default: str = "the CPU default"  # what an unprobed, unpinned shape is

    def describe(self) -> str:
        """The log line: what was chosen and why."""
        head = (
            f"population backend: {self.num_pods} pods x {self.num_envs} envs per population on {self.device}"
        )
        if self.fixed:
            return f"{head} (set: {', '.join(self.pinned)})"
        if self.memory_cap is None:
            return f"{head} ({self.default})"
        probe = ", ".join(f"{p}x{n} {v / 1e6:.2f}M" for (p, n), v in sorted(self.probe.items(), key=_by_envs))
        pinned = f"; set: {', '.join(self.pinned)}" if self.pinned else ""
        return f"{head} (memory fits {self.memory_cap}; probe pods x envs env-steps/s: {probe}{pinned})"


def _by_envs(item: tuple[tuple[int, int], float]) -> tuple[int, int]:
    (pods, envs), _ = item
    return envs, pods


def envs_choices(num_envs: int, envs: int = 0, max_envs: int = MAX_ENVS_PER_POD) -> list[int]:
    """Envs per pod the probe tries: ``envs`` when pinned, else ``num_envs`` (the run's ``[env]
    num_envs``) doubling up to ``max_envs`` (never fewer envs than the run asks for)."""
    if envs > 0:
        return [envs]
    choices = [num_envs]
    while choices[-1] * 2 <= max_envs:
        choices.append(choices[-1] * 2)
    return choices


def max_envs_per_pod(num_steps: int, round_steps: int | None) -> int:
    """The largest ``N`` the probe tries: :data:`MAX_ENVS_PER_POD`, and no more than leaves a pod
    :data:`MIN_UPDATES_PER_ROUND` updates of ``num_steps x N`` samples in a round of ``round_steps``."""
    if round_steps is None:
        return MAX_ENVS_PER_POD
    return min(MAX_ENVS_PER_POD, round_steps // max(1, num_steps * MIN_UPDATES_PER_ROUND))


def _probe_pods(
    sizing: Sizing, envs: int, limit: int, probe: Callable[[int, int], float], pods: int
) -> tuple[int, float] | None:
    """The best population size at ``envs`` envs per pod (``pods`` when pinned, else doubling from
    :data:`PROBE_START` while each doubling gains :data:`PROBE_GAIN`) and its rate; None when even the
    first size does not fit."""
    size = pods if pods > 0 else min(PROBE_START, limit)
    try:
        rate = sizing.probe[(size, envs)] = probe(size, envs)
    except torch.OutOfMemoryError:
        free_device_cache()
        return None
    while pods == 0 and size * 2 <= limit:
        try:
            doubled = sizing.probe[(size * 2, envs)] = probe(size * 2, envs)
        except torch.OutOfMemoryError:  # the memory estimate was too kind: keep the size that fit
            free_device_cache()
            break
        if doubled < PROBE_GAIN * rate:
            break
        size, rate = size * 2, doubled
    return size, rate


def free_device_cache() -> None:
    """Hand the CUDA allocator's cached blocks back to the device (a no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def choose_shape(
    device: torch.device,
    num_envs: int,
    per_pod: Callable[[int], int],
    probe: Callable[[int, int], float],
    *,
    pods: int = 0,
    envs: int = 0,
    max_envs: int = MAX_ENVS_PER_POD,
) -> Sizing:
    """The population's shape on ``device`` (see the module docstring): ``per_pod(N)`` is a pod's
    device bytes at ``N`` envs, ``probe(P, N)`` measures the aggregate training env-steps/s of ``P``
    pods of ``N`` envs; ``pods`` / ``envs`` (> 0) pin either (``[tournament] population_size`` or
    ``pods``, ``envs_per_pod``); ``max_envs`` bounds ``N`` (:func:`max_envs_per_pod`)."""
    pinned = tuple(name for name, value in (("pods", pods), ("envs_per_pod", envs)) if value > 0)
    if pods > 0 and envs > 0:
        return Sizing(pods, str(device), envs, fixed=True, pinned=pinned)
    if memory_cap(device, per_pod(envs or num_envs)) is None:
        return Sizing(pods or CPU_POPULATION, str(device), envs or num_envs, pinned=pinned)
    sizing = Sizing(0, str(device), 0, pinned=pinned)
    best: tuple[int, int, float, int] | None = None  # pods, envs, rate, memory cap
    for n in envs_choices(num_envs, envs, max_envs):
        cap = memory_cap(device, per_pod(n)) or 1
        if pods > 0 and pods > cap:
            break  # (the pinned population does not fit this many envs per pod)
        found = _probe_pods(sizing, n, min(cap, MAX_POPULATION), probe, pods)
        if found is None:
            break
        if best is not None and found[1] < PROBE_GAIN * best[2]:
            break  # doubling the envs per pod no longer pays
        best = (found[0], n, found[1], cap)
    if best is None:  # not even the smallest shape was measured: the smallest shape
        n = envs or num_envs
        return Sizing(pods or 1, str(device), n, memory_cap=memory_cap(device, per_pod(n)), pinned=pinned)
    sizing.num_pods, sizing.num_envs, _rate, sizing.memory_cap = best
    return sizing


def direct_shape(device: torch.device, num_envs: int, pods: int = 0) -> Sizing:
    """The shape of a population of direct pods: ``pods`` (pinned) or the device's default; the envs
    per pod are the run's (the direct learner simulates its own paths: ``DirectArgs.batch_paths``)."""
    if pods > 0:
        return Sizing(pods, str(device), num_envs, fixed=True, pinned=("pods",))
    if device.type == "cpu":
        return Sizing(CPU_POPULATION, str(device), num_envs)
    return Sizing(DIRECT_GPU_POPULATION, str(device), num_envs, default="the direct learner's default")
