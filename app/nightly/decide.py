"""The promotion decision: does tonight's challenger replace the champion, and what is recorded.

- :func:`decide`: promote only if the challenger's fitness beats the champion's by
  ``nightly.margin`` AND its deflated Sharpe ratio reaches ``nightly.dsr_threshold``; with no
  champion yet, ``nightly.first_promotion`` says whether the first challenger is promoted anyway.
- :func:`trials_on_window`: how many trials the DSR must be deflated for (this tournament's pods
  plus every earlier one scored on an evaluation window that overlaps tonight's).
- :func:`decision_record` / :func:`failure_record`: the registry row of a verdict or of a failure
  (``app.nightly.registry.Decision``), built from what the pipeline gathered step by step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.nightly.registry import Decision, read_decisions


@dataclass(frozen=True)
class Verdict:
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
    challenger_dsr: float | None,
    *,
    has_champion: bool,
    margin: float,
    dsr_threshold: float,
    first_promotion: str = "always",
    fitness: str = "sharpe",
) -> Verdict:
    """Promote iff the challenger beats the champion by ``margin`` AND its DSR reaches the threshold.

    Undefined numbers never promote: a challenger whose fitness or DSR is undefined (a flat equity
    curve, too few days) is rejected. A champion whose fitness is undefined counts as beaten. With no
    champion yet, ``first_promotion="always"`` promotes (something must trade), ``"dsr"`` still asks
    for the DSR.
    """
    ch, champ, dsr = finite(challenger_fitness), finite(champion_fitness), finite(challenger_dsr)
    dsr_ok = dsr is not None and dsr >= dsr_threshold
    dsr_text = "undefined" if dsr is None else f"{dsr:.3f}"
    if not has_champion:
        if first_promotion == "always":
            return Verdict(True, f"no champion yet: first challenger promoted (DSR {dsr_text})")
        if ch is None:
            return Verdict(False, f"no champion yet, but the challenger's {fitness} is undefined")
        if not dsr_ok:
            return Verdict(
                False, f"no champion yet, but the challenger's DSR {dsr_text} < {dsr_threshold:.3f}"
            )
        return Verdict(True, f"no champion yet: challenger's DSR {dsr_text} >= {dsr_threshold:.3f}")
    if ch is None:
        return Verdict(False, f"challenger's {fitness} is undefined on the evaluation window")
    if champ is not None and ch < champ + margin:
        return Verdict(
            False,
            f"challenger {fitness} {ch:.4f} does not beat champion {champ:.4f} by the margin {margin:g}",
        )
    if not dsr_ok:
        return Verdict(False, f"challenger's deflated Sharpe {dsr_text} < threshold {dsr_threshold:.3f}")
    against = "an undefined champion score" if champ is None else f"champion {champ:.4f}"
    return Verdict(
        True,
        f"challenger {fitness} {ch:.4f} beats {against} by >= {margin:g} and its DSR {dsr_text} "
        f">= {dsr_threshold:.3f}",
    )


def overlap_note(champion: Mapping[str, Any] | None, eval_start: str) -> str:
    """A note for the reason when the champion was selected on part of the evaluation window.

    Its score there is then optimistic. That only makes promotion harder, so the pipeline decides
    anyway and says so.
    """
    if champion is not None and champion.get("selection_end") and champion["selection_end"] >= eval_start:
        return f" (note: the champion was selected on data up to {champion['selection_end']})"
    return ""


def windows_overlap(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether two inclusive ISO date ranges share at least one day."""
    return a[0] <= b[1] and b[0] <= a[1]


def trials_on_window(home: Path, window: tuple[str, str]) -> int:
    """Trials already spent choosing champions on days of this evaluation window by earlier decisions.

    Every earlier decision whose evaluation window OVERLAPS tonight's counts, not only an identical
    one: growing data shifts the window by a day each night, so yesterday's test window shares all
    but one of its days with tonight's, and the DSR of each new challenger must be deflated for every
    tournament ever scored against those days, not only its own.
    """
    total = 0
    for row in read_decisions(home):
        if not row.get("eval_start") or not row.get("eval_end"):
            continue  # failed before the windows were known: it looked at nothing
        if not windows_overlap((row["eval_start"], row["eval_end"]), (window[0], window[1])):
            continue
        # A run that failed after its evaluation (export, record) still looked at the window.
        if row["verdict"] == "failed" and row["step"] not in ("decide", "export", "record"):
            continue
        total += int((row.get("inputs") or {}).get("run_trials") or 0)
    return total


def decision_record(
    *,
    started_at: str,
    decided_at: str,
    verdict: Verdict,
    reason: str,
    info: Mapping[str, Any],
    bundle: str | None,
    inputs: dict[str, Any],
    scores: dict[str, Any],
) -> Decision:
    """The registry row of a verdict. ``info`` holds what the pipeline's steps established: the
    rule's settings (fitness, margin, dsr_threshold), the run ids, the windows and the scores."""
    return Decision(
        started_at=started_at,
        decided_at=decided_at,
        verdict="promoted" if verdict.promote else "rejected",
        reason=reason,
        step="decide",
        challenger_run_id=info["challenger_run_id"],
        champion_run_id=info["champion_run_id"],
        fitness=info["fitness"],
        challenger_fitness=info["challenger_fitness"],
        champion_fitness=info["champion_fitness"],
        margin=info["margin"],
        challenger_dsr=info["challenger_dsr"],
        dsr_threshold=info["dsr_threshold"],
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
) -> Decision:
    """The ``failed`` row of a retrain that stopped at ``step``: whatever ``info`` already holds."""
    columns = {f.name for f in dataclasses.fields(Decision)}
    known = {k: v for k, v in info.items() if k in columns and k != "champion_run_id"}
    return Decision(
        started_at=started_at,
        decided_at=decided_at,
        verdict="failed",
        reason=reason,
        step=step,
        champion_run_id=info.get("champion_run_id"),
        inputs=inputs,
        **known,
    )
