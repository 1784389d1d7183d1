"""One retrain decision as the registry stores it: :class:`DecisionRecord` (a row of ``decisions``),
built from the gate's answer (:meth:`DecisionRecord.decided`) or from a retrain that stopped at a
step (:meth:`DecisionRecord.failed`), with the run ids (:class:`DecisionRuns`) and data windows
(:class:`DecisionWindows`) it was taken on; or a champion change an operator made by hand
(:meth:`DecisionRecord.by_hand`, ``source = "manual"``). ``app.nightly.registry`` writes and reads the
rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from app.gate import GateResult, GateRule

DecisionOutcome = Literal["promoted", "rejected", "failed"]
#: Who took a decision: the promotion rule (a retrain) or an operator by hand (``app.nightly.manual``).
DecisionSource = Literal["rule", "manual"]
MANUAL: DecisionSource = "manual"


@dataclass(frozen=True)
class DecisionRuns:
    """The run ids of a decision: tonight's challenger (None before the tournament made it) and the
    champion in charge when it was taken."""

    challenger: str | None = None
    champion: str | None = None

    def columns(self) -> dict[str, str | None]:
        """As ``decisions`` columns."""
        return {"challenger_run_id": self.challenger, "champion_run_id": self.champion}


@dataclass(frozen=True)
class DecisionWindows:
    """The windows of a retrain (first and last session, ISO): the data loaded, the selection (the
    tournament's validation window) and the gate's evaluation window."""

    data: tuple[str, str]
    selection: tuple[str, str]
    evaluation: tuple[str, str]

    @classmethod
    def of(cls, windows: Mapping[str, tuple[str, str]]) -> DecisionWindows:
        """From a data snapshot's ``train``/``valid``/``test`` (+ ``full``) windows."""
        full = windows.get("full")
        first, last = (full or windows["train"])[0], (full or windows["test"])[1]
        (valid_first, valid_last), (test_first, test_last) = windows["valid"], windows["test"]
        return cls(
            data=(first, last), selection=(valid_first, valid_last), evaluation=(test_first, test_last)
        )

    def columns(self) -> dict[str, str]:
        """As ``decisions`` columns."""
        return {
            "data_start": self.data[0],
            "data_end": self.data[1],
            "selection_start": self.selection[0],
            "selection_end": self.selection[1],
            "eval_start": self.evaluation[0],
            "eval_end": self.evaluation[1],
        }


def _gate_columns(gate: GateResult) -> dict[str, Any]:
    """The ``decisions`` columns the gate's answer fills."""
    return {
        "fitness": gate.fitness,
        "challenger_fitness": gate.challenger_fitness,
        "champion_fitness": gate.incumbent_fitness,
        "margin": gate.margin,
        "challenger_dsr": gate.psr_after_looks,
        "significance_level": gate.significance_level,
        "num_trials": gate.num_trials,
    }


@dataclass(frozen=True)
class DecisionRecord:
    """One retrain decision, as stored in ``decisions`` (JSON-able ``inputs``/``scores``)."""

    started_at: str  # ISO-8601 UTC
    decided_at: str  # ISO-8601 UTC
    verdict: DecisionOutcome
    reason: str
    step: str  # the last step reached ("decide" for a normal verdict, else the step that failed)
    challenger_run_id: str | None = None
    champion_run_id: str | None = None  # the champion in place when the decision was taken
    fitness: str | None = None
    challenger_fitness: float | None = None
    champion_fitness: float | None = None
    margin: float | None = None
    challenger_dsr: float | None = None
    significance_level: float | None = None  # the gate's level
    num_trials: int | None = None
    data_start: str | None = None
    data_end: str | None = None
    selection_start: str | None = None
    selection_end: str | None = None
    eval_start: str | None = None
    eval_end: str | None = None
    bundle: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    gate: GateResult | None = None  # the gate's answer: stored as ``scores`` (with its ``role``)
    source: DecisionSource = "rule"  # "manual": podracer promote / demote, ``reason`` the operator's

    @classmethod
    def decided(
        cls,
        gate: GateResult,
        *,
        started_at: str,
        decided_at: str,
        runs: DecisionRuns,
        windows: DecisionWindows,
        bundle: str | None,
        inputs: dict[str, Any],
        role: str,
    ) -> DecisionRecord:
        """The row of the gate's answer ``gate`` (``role``: what its figures were to the gate)."""
        return cls(
            started_at=started_at,
            decided_at=decided_at,
            verdict="promoted" if gate.promote else "rejected",
            reason=gate.reason or "",
            step="decide",
            **runs.columns(),
            **_gate_columns(gate),
            **windows.columns(),
            bundle=bundle,
            inputs=inputs,
            scores={"role": role},
            gate=gate,
        )

    @classmethod
    def failed(
        cls,
        *,
        started_at: str,
        decided_at: str,
        step: str,
        reason: str,
        rule: GateRule,
        runs: DecisionRuns,
        windows: DecisionWindows | None,
        gate: GateResult | None,
        inputs: dict[str, Any],
    ) -> DecisionRecord:
        """The ``failed`` row of a retrain that stopped at ``step``: what it had established by then."""
        return cls(
            started_at=started_at,
            decided_at=decided_at,
            verdict="failed",
            reason=reason,
            step=step,
            inputs=inputs,
            **runs.columns(),
            **{"fitness": rule.fitness, "margin": rule.margin, "significance_level": rule.significance_level}
            | (_gate_columns(gate) if gate is not None else {})
            | (windows.columns() if windows is not None else {}),
        )

    @classmethod
    def by_hand(
        cls,
        action: Literal["promote", "demote"],
        *,
        reason: str,
        decided_at: str,
        run_id: str,
        previous: str | None = None,
        bundle: str | None = None,
        inputs: dict[str, Any] | None = None,
    ) -> DecisionRecord:
        """The row of an operator's champion change: ``promote`` puts ``run_id`` in charge (verdict
        ``promoted``, the run as the challenger, ``previous`` the champion it replaces); ``demote``
        removes the champion ``run_id`` (verdict ``rejected``: the champion in charge rejected, as in
        the rule's demotions; the registry's ``demotions`` row says so). ``step`` names the command,
        ``reason`` is the operator's, and no gate figure is filled."""
        promote = action == "promote"
        return cls(
            started_at=decided_at,
            decided_at=decided_at,
            verdict="promoted" if promote else "rejected",
            reason=reason,
            step=action,
            challenger_run_id=run_id if promote else None,
            champion_run_id=previous if promote else run_id,
            bundle=bundle,
            inputs=dict(inputs or {}),
            source=MANUAL,
        )

    def row(self) -> dict[str, Any]:
        """The ``decisions`` columns of this record; the gate's answer is its ``scores``."""
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "gate"}
        if self.gate is not None:
            row["scores"] = {**row["scores"], **self.gate.model_dump(mode="json", exclude_unset=True)}
        return row
