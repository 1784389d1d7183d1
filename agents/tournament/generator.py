"""The generator: where the next pod comes from.

With probability ``p_fresh`` a fresh pod (random initial weights, hyper-parameters sampled from the
search space); otherwise a parent drawn by rank from the leaderboard (the best most likely), whose
weights and optimizer state the child starts from, with hyper-parameters perturbed PBT-style and
clipped to the search-space bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.tournament.search_space import SearchSpace


@dataclass(frozen=True)
class PodSpec:
    """What the generator decided for one new pod (before it runs)."""

    pod_id: str
    seq: int  # 0-based launch order within the run
    seed: int
    algo: str
    hparams: dict[str, Any] = field(default_factory=dict)
    parent_id: str | None = None  # None: a fresh pod
    generation: int = 0  # 0 for a fresh pod, parent's + 1 for a child
    init_checkpoint: str | None = None  # parent's checkpoint folder (weights + optimizer state)
    parent_env_steps: int = 0  # env-steps the copied weights have already been trained for


def pod_id_for(seq: int) -> str:
    """Pod ids sort in launch order: ``p0000``, ``p0001``, ..."""
    return f"p{seq:04d}"


def pod_rng(seed: int, seq: int) -> np.random.Generator:
    """One generator per (run seed, pod seq): a resumed run draws exactly what it would have drawn."""
    return np.random.default_rng([seed, seq, 0x50D])


def rank_weights(num: int) -> np.ndarray:
    """Linear rank selection over a board sorted best first: the best weighs ``num``, the worst 1."""
    weights = np.arange(num, 0, -1, dtype=np.float64)
    return weights / weights.sum()


def best_first(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Entries sorted by score, highest first (ties keep their given order).

    Sorting here, not trusting the caller's order, is the guard against the bug the anchors'
    code had: selection that copied the worst pod because its list was ascending.
    """
    return sorted(entries, key=lambda e: -float(e["score"]))


def select_parent(entries: Sequence[Mapping[str, Any]], rng: np.random.Generator) -> Mapping[str, Any]:
    """Draw a parent from the board by rank: the best most likely, the worst least."""
    if not entries:
        raise ValueError("select_parent: the leaderboard is empty")
    ranked = best_first(entries)
    return ranked[int(rng.choice(len(ranked), p=rank_weights(len(ranked))))]


def next_pod(
    seq: int,
    *,
    entries: Sequence[Mapping[str, Any]],
    space: SearchSpace,
    p_fresh: float,
    seed: int,
    algo: str,
) -> PodSpec:
    """The spec of pod number ``seq``: fresh with probability ``p_fresh`` (always while the board is
    empty, and among the run's first pods while a kind of the space has no entry), else a mutated
    child of a rank-selected leaderboard entry."""
    rng = pod_rng(seed, seq)
    pod_seed = int(rng.integers(2**31 - 1))
    # A kind with no pod on the board yet gets a fresh one among the run's first pods (an inline
    # backend fills the board after its first pod: without this, every later pod could be its child).
    missing = space.missing_kinds(entries) if seq < 2 * len(space.kinds) else ()
    fresh = not entries or bool(missing) or rng.random() < p_fresh
    if fresh:
        hparams = space.sample(rng, seq, kind=missing[seq % len(missing)] if missing else None)
        return PodSpec(pod_id=pod_id_for(seq), seq=seq, seed=pod_seed, algo=algo, hparams=hparams)
    parent = select_parent(entries, rng)
    return PodSpec(
        pod_id=pod_id_for(seq),
        seq=seq,
        seed=pod_seed,
        algo=str(parent.get("algo", algo)),
        hparams=space.mutate(parent["hparams"], rng),
        parent_id=str(parent["pod_id"]),
        generation=int(parent.get("generation", 0)) + 1,
        init_checkpoint=str(parent["checkpoint"]),
        parent_env_steps=int(parent.get("env_steps", 0)),
    )
