"""The promotion decision: does tonight's challenger replace the champion, and what is recorded.

- :func:`decide`: promote only if the challenger's fitness beats the champion's by
  ``nightly.margin`` AND its out-of-sample test on the gate window says "edge significant out of
  sample" (``backtests.verdict``: the same rule and the same figures as ``podracer backtest``, at the
  gate's level ``nightly.significance_level``, after every earlier look at an overlapping window of the same
  market, counted by the looks ledger ``<home>/looks.sqlite``); with no champion yet,
  ``nightly.first_promotion`` says whether the first challenger is promoted anyway.
- :func:`decision_record` / :func:`failure_record`: the registry row of a verdict or of a failure
  (``app.nightly.registry.DecisionRecord``), built from what the pipeline gathered step by step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.nightly.registry import DecisionRecord
from backtests.verdict import EdgeVerdict


@dataclass(frozen=True)
class PromotionDecision:
    """The decision rule's answer."""

    promote: bool
    reason: str


def finite(value: float | None) -> float | None:
    """``value`` as a float, or None when it is missing, NaN or infinite (an undefined score)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def decide(
    challenger_fitness: float | None,
    champion_fitness: float | None,
    challenger_edge: EdgeVerdict | None,
    *,
    has_champion: bool,
    margin: float,
    first_promotion: str = "significant",
    fitness: str = "sharpe",
) -> PromotionDecision:
    """Promote iff the challenger beats the champion by ``margin`` AND ``challenger_edge``, its
    out-of-sample verdict on the gate window, is "significant".

    Undefined numbers never promote: a challenger whose fitness is undefined (a flat equity curve, too
    few days) or whose edge is not measurable is rejected. A champion whose fitness is undefined
    counts as beaten. With no champion yet, ``first_promotion="significant"`` (the default) still asks
    for a significant edge (until then nothing is in charge: paper trading has no champion to run, a
    walk-forward's account holds cash), ``"always"`` promotes the first challenger whatever its test.
    """
    ch, champ = finite(challenger_fitness), finite(champion_fitness)
    significant = challenger_edge is not None and challenger_edge.outcome == "significant"
    edge = challenger_edge.text if challenger_edge is not None else "no out-of-sample test"
    if not has_champion:
        if first_promotion == "always":
            return PromotionDecision(True, f"no champion yet: first challenger promoted ({edge})")
        if ch is None:
            return PromotionDecision(False, f"no champion yet, but the challenger's {fitness} is undefined")
        if not significant:
            return PromotionDecision(False, f"no champion yet, but the challenger's {edge}")
        return PromotionDecision(True, f"no champion yet: the challenger's {edge}")
    if ch is None:
        return PromotionDecision(False, f"challenger's {fitness} is undefined on the evaluation window")
    if champ is not None and ch < champ + margin:
        return PromotionDecision(
            False,
            f"challenger {fitness} {ch:.4f} does not beat champion {champ:.4f} by the margin {margin:g}",
        )
    if not significant:
        return PromotionDecision(False, f"challenger's {edge}")
    against = "an undefined champion score" if champ is None else f"champion {champ:.4f}"
    return PromotionDecision(
        True, f"challenger {fitness} {ch:.4f} beats {against} by >= {margin:g}; its {edge}"
    )


def overlap_note(champion: Mapping[str, Any] | None, eval_start: str) -> str:
    """A note for the reason when the champion was selected on part of the evaluation window.

    Its score there is then optimistic. That only makes promotion harder, so the pipeline decides
    anyway and says so.
    """
    if champion is not None and champion.get("selection_end") and champion["selection_end"] >= eval_start:
        return f" (note: the champion was selected on data up to {champion['selection_end']})"
    return ""


def decision_record(
    *,
    started_at: str,
    decided_at: str,
    promotion: PromotionDecision,
    reason: str,
    info: Mapping[str, Any],
    bundle: str | None,
    inputs: dict[str, Any],
    scores: dict[str, Any],
) -> DecisionRecord:
    """The registry row of a promotion decision. ``info`` holds what the pipeline's steps established: the
    rule's settings (fitness, margin, the gate's ``significance_level``), the run ids,
    the windows and the scores (``challenger_dsr``: the challenger's PSR after the looks, i.e. the DSR
    over ``num_trials`` = the looks counted)."""
    return DecisionRecord(
        started_at=started_at,
        decided_at=decided_at,
        verdict="promoted" if promotion.promote else "rejected",
        reason=reason,
        step="decide",
        challenger_run_id=info["challenger_run_id"],
        champion_run_id=info["champion_run_id"],
        fitness=info["fitness"],
        challenger_fitness=info["challenger_fitness"],
        champion_fitness=info["champion_fitness"],
        margin=info["margin"],
        challenger_dsr=info["challenger_dsr"],
        significance_level=info["significance_level"],
        num_trials=info["num_trials"],
        data_start=info["data_start"],
        data_end=info["data_end"],
        selection_start=info["selection_start"],
        selection_end=info["selection_end"],
        eval_start=info["eval_start"],
        eval_end=info["eval_end"],
        bundle=bundle,
        inputs=inputs,
        scores=scores,
    )


def failure_record(
    *,
    started_at: str,
    decided_at: str,
    step: str,
    reason: str,
    info: Mapping[str, Any],
    inputs: dict[str, Any],
) -> DecisionRecord:
    """The ``failed`` row of a retrain that stopped at ``step``: whatever ``info`` already holds."""
    columns = {f.name for f in dataclasses.fields(DecisionRecord)}
    known = {k: v for k, v in info.items() if k in columns and k != "champion_run_id"}
    return DecisionRecord(
        started_at=started_at,
        decided_at=decided_at,
        verdict="failed",
        reason=reason,
        step=step,
        champion_run_id=info.get("champion_run_id"),
        inputs=inputs,
        **known,
    )
