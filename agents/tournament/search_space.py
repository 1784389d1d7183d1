"""The hyper-parameter search space of the tournament: bounds, sampling and PBT-style mutation.

Only hyper-parameters that can change between rounds of one lineage live here (learning rate,
entropy bonus, discounting, clipping, epochs). Architecture sizes do not: a child copies its parent's
weights, so its network must keep the parent's shape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from data.errors import ConfigError


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: a closed range ``[low, high]``, sampled uniformly or log-uniformly."""

    name: str
    low: float
    high: float
    log: bool = False
    kind: Literal["float", "int"] = "float"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise ConfigError(f"search space: {self.name}: bad bounds [{self.low}, {self.high}]")
        if self.log and self.low <= 0:
            raise ConfigError(f"search space: {self.name}: a log-scale range needs low > 0")

    def clip(self, value: float) -> float | int:
        """``value`` clipped into the bounds (and rounded for integer parameters)."""
        value = min(max(float(value), self.low), self.high)
        if self.kind == "int":
            # Rounding can step outside a bound only when the bound is fractional: clip again.
            return int(min(max(round(value), math.ceil(self.low)), math.floor(self.high)))
        return value

    def sample(self, rng: np.random.Generator) -> float | int:
        """A fresh draw from the whole range."""
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return self.clip(value)

    def contains(self, value: Any) -> bool:
        """True when ``value`` is a finite number inside the bounds (and integral for ints)."""
        if not isinstance(value, int | float) or not math.isfinite(float(value)):
            return False
        if self.kind == "int" and float(value) != int(value):
            return False
        return self.low <= float(value) <= self.high


@dataclass(frozen=True)
class SearchSpace:
    """A set of ``Param`` with PBT's explore step: perturb ×0.8/×1.2 or resample."""

    params: tuple[Param, ...]
    perturb_factors: tuple[float, ...] = (0.8, 1.2)
    resample_prob: float = 0.25
    fixed: Mapping[str, Any] = field(default_factory=dict)
    #: Pod kinds ``(name, settings)``: a fresh pod is of the kind the generator asks for (one not on
    #: the board yet) or of kind ``seq % len(kinds)``, its hyper-parameters ``{"kind": name,
    #: **settings}`` beside the sampled ones; a child keeps its parent's (settings that fix the
    #: network's shape or how it trades: a lineage's kind never changes).
    kinds: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ConfigError(f"search space: duplicate parameter names in {names}")
        if not 0.0 <= self.resample_prob <= 1.0:
            raise ConfigError(f"search space: resample_prob {self.resample_prob} outside [0, 1]")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def sample(self, rng: np.random.Generator, seq: int = 0, kind: str | None = None) -> dict[str, Any]:
        """Hyper-parameters for a fresh pod (the run's ``seq``-th): every parameter drawn from its
        range, and the settings of its kind (``kind``, else the ``seq``-th in turn)."""
        drawn = {**self.fixed, **{p.name: p.sample(rng) for p in self.params}}
        if not self.kinds:
            return drawn
        kinds = dict(self.kinds)
        name = kind if kind in kinds else self.kinds[seq % len(self.kinds)][0]
        return {**drawn, "kind": name, **kinds[name]}

    def missing_kinds(self, entries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
        """The kinds (in order) no entry of a leaderboard is of."""
        present = {str((e.get("hparams") or {}).get("kind")) for e in entries}
        return tuple(name for name, _ in self.kinds if name not in present)

    def mutate(self, parent: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """A child's hyper-parameters: each one resampled or scaled by a perturb factor, then clipped."""
        child = dict(parent)
        for p in self.params:
            if p.name not in parent or rng.random() < self.resample_prob:
                child[p.name] = p.sample(rng)
                continue
            factor = self.perturb_factors[int(rng.integers(len(self.perturb_factors)))]
            value = float(parent[p.name]) * factor
            if p.kind == "int" and round(value) == parent[p.name]:
                # ×1.2 of a small integer rounds back to itself: step by one so the search still moves.
                value = parent[p.name] + (1 if factor > 1 else -1)
            child[p.name] = p.clip(value)
        return child

    def contains(self, hparams: Mapping[str, Any]) -> bool:
        """True when every parameter of the space is present and within its bounds."""
        return all(p.name in hparams and p.contains(hparams[p.name]) for p in self.params)


#: The direct learner's pod kinds: ``intraday`` (the run's ``[agent]`` settings: by default the ridge
#: start, trading at every decision, 20% of the way) and ``open`` (trading at each session's first
#: decision only, the whole way, from the nonlinear start: ``agents.nonlinear_start``; its
#: ``trade_window`` is resolved from the market's sessions and the decision interval,
#: ``agents.tournament.pod.pod_args``). Why both: an edge read at the open and paid over the session
#: is traded away by a policy that trades every decision, and the features show some of it at the
#: open only (docs/benchmarks.md); the validation window picks between kinds as between learning rates.
OPEN_WINDOW = "open"
DIRECT_KINDS: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("intraday", {}),
    (
        "open",
        {
            "trade_window": OPEN_WINDOW,
            "rebalance_rate": 1.0,
            "asset_layers": 1,
            "embed": 48,  # (three member networks of 16 units: agents.nonlinear_start)
            "demean_features": True,  # (a name's features against the others': cross-sectional)
            "nonlinear_start": True,
        },
    ),
)


def default_search_space(algo: str = "ppo") -> SearchSpace:
    """The default space for ``algo``; ranges chosen around the usual PPO/SAC defaults (and the direct
    learner's, ``agents.direct``)."""
    if algo == "ppo":
        return SearchSpace(
            params=(
                # Centred on what learns the planted signal within a CPU-minutes budget (measured:
                # learning rates under ~1e-3 barely move the small-init actor read-out in one round).
                Param("learning_rate", 1e-3, 1e-2, log=True),
                Param("ent_coef", 0.0, 0.01),
                Param("gamma", 0.8, 0.97),
                Param("gae_lambda", 0.8, 0.97),
                Param("clip_coef", 0.1, 0.3),
                Param("update_epochs", 2, 8, kind="int"),
            )
        )
    if algo == "sac":
        return SearchSpace(
            params=(
                Param("learning_rate", 1e-5, 3e-3, log=True),
                Param("gamma", 0.9, 0.999),
            )
        )
    if algo == "direct":
        return SearchSpace(
            params=(
                # agents.direct: the gradient of the net return itself, so steps are larger than PPO's.
                Param("learning_rate", 3e-3, 3e-2, log=True),
                Param("weight_decay", 1e-5, 1e-2, log=True),
                Param("horizon", 16, 64, kind="int"),
            ),
            kinds=DIRECT_KINDS,
        )
    raise ConfigError(f"search space: unknown algo {algo!r} (expected ppo, sac or direct)")
