"""How many pods a population holds: from the device's memory and a short measured probe.

- On a CPU: :data:`CPU_POPULATION` pods, no probe (the batch a few pods make is as large as a CPU's
  cores use well; more pods only make each round longer).
- On a GPU: at most what fits in :data:`MEMORY_FRACTION` of the free memory (:func:`bytes_per_pod`:
  the rollout storage, the minibatch working set and the env's tensors), then a probe times the
  learner side of one training update (:func:`learner_rate`: policy steps and minibatch updates,
  CUDA graphs included; the env step, linear in the envs, is left out) at doubling sizes from
  :data:`PROBE_START` and keeps doubling while the aggregate env-steps/s grows by at least
  :data:`PROBE_GAIN` per doubling: past that point a bigger population only makes each round longer
  (fewer, later leaderboard updates) for little more throughput.

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
MAX_POPULATION = 256
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
    """A population size and why."""

    num_pods: int
    device: str
    num_envs: int
    memory_cap: int | None = None
    probe: dict[int, float] = field(default_factory=dict)  # pods -> measured env-steps/s
    fixed: bool = False  # set by the config, not chosen

    def describe(self) -> str:
        """The log line: what was chosen and why."""
        head = (
            f"population backend: {self.num_pods} pods x {self.num_envs} envs per population on {self.device}"
        )
        if self.fixed:
            return f"{head} (tournament.population_size)"
        if self.memory_cap is None:
            return f"{head} (the CPU default)"
        probe = ", ".join(f"{p} pods {v / 1e6:.2f}M" for p, v in sorted(self.probe.items()))
        return f"{head} (memory fits {self.memory_cap}; probe env-steps/s: {probe})"


def choose_population_size(
    device: torch.device, num_envs: int, per_pod: int, probe: Callable[[int], float]
) -> Sizing:
    """The population size for ``device`` (see the module docstring); ``probe(P)`` measures the
    aggregate training env-steps/s of a population of ``P`` pods."""
    cap = memory_cap(device, per_pod)
    if cap is None:
        return Sizing(CPU_POPULATION, str(device), num_envs)
    limit = min(cap, MAX_POPULATION)
    size = min(PROBE_START, limit)
    sizing = Sizing(size, str(device), num_envs, memory_cap=cap)
    sizing.probe[size] = probe(size)
    while size * 2 <= limit:
        try:
            rate = probe(size * 2)
        except torch.OutOfMemoryError:  # the memory estimate was too kind: keep the size that fit
            torch.cuda.empty_cache()
            break
        sizing.probe[size * 2] = rate
        if rate < PROBE_GAIN * sizing.probe[size]:
            break
        size *= 2
    sizing.num_pods = size
    return sizing
