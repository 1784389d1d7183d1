"""A walk-forward fold's record, ``folds/fold-<k>/fold.json``, as a typed model: :class:`FoldRecord`.

Written once per completed fold by ``app.workflows.walkforward`` (through ``RunDir.write_fold_record``,
atomically: a fold is recorded whole or not at all) and read back validated by the resume, the
stitched account (``app.walkforward.account``), the CLI's folds table and the dashboard's Walk-forward
page. A versioned ``data.artifact.Artifact``: a file from before ``schema_version`` reads as version
1, a newer one or a malformed field is a one-line error naming the file. Its ``gate`` is the gate's
answer as it is (``app.gate.GateResult``; a gate written with a ``figures`` block reads too).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.gate import GateResult
from app.runs import FeatureSpec, RunDir
from data.artifact import Artifact, Figure

#: How the views name what the account held in a fold with no champion in charge
#: (``[gate] before_champion``).
NO_CHAMPION_LABELS: dict[str, str] = {
    "benchmark": "benchmark (no qualified champion)",
    "cash": "cash (no qualified champion)",
}


class FoldSection(BaseModel):
    """A nested block of fold.json: typed keys, unknown keys kept."""

    model_config = ConfigDict(extra="allow", frozen=True, validate_by_name=True, serialize_by_alias=True)


class PolicyLabel(FoldSection):
    """The fold's tournament champion (the challenger at its gate)."""

    run: str | None = Field(None, description="the fold's run folder")
    pod_id: str | None = Field(None, description="its champion pod")
    valid_sharpe: Figure = Field(None, description="its validation Sharpe ratio")


class InCharge(FoldSection):
    """The policy that traded the fold's test window: the champion of fold ``fold``."""

    fold: int = Field(description="the fold whose champion it is")
    run: str = Field(description="that fold's run folder")


class FoldTest(FoldSection):
    """The policy in charge on the fold's test window (``backtests.stitched.segment_figures``)."""

    sessions: int = Field(0, description="test sessions")
    period_return: Figure = Field(None, alias="return", description="the account's return over them")
    sharpe_ratio: Figure = Field(None, description="annualized Sharpe ratio of its daily returns")
    annual_volatility: Figure = Field(None, description="annualized volatility")
    costs_paid: Figure = Field(None, description="costs paid ($)")
    turnover: Figure = Field(None, description="turnover")
    buy_and_hold_return: Figure = Field(None, description="buy-and-hold's return over the same sessions")


class ChallengerEvidence(FoldSection):
    """One challenger's two tests where the fold's decision found them."""

    entry: int = Field(description="1-based entry number (its share of the level)")
    level: float = Field(description="its share of the level")
    sessions: int = Field(description="sessions recorded since its entry")
    e_value_in_charge: float = Field(description="running maximum of its wealth against what was in charge")
    e_value_benchmark: float = Field(description="running maximum of its wealth against buy-and-hold")
    passes: bool = Field(description="both reached 1 / level")


class BookStep(FoldSection):
    """What the book did at a fold (fold.json's ``book``)."""

    entered: str | None = Field(None, description="the fold's challenger as the book names it, if entered")
    retired: list[str] = Field(default_factory=list, description="challengers that left the book")
    recorded_through: str | None = Field(None, description="the last session the book has recorded")
    promoted: str | None = Field(None, description="the challenger promoted (a fold-<k> name)")
    demoted: str | None = Field(None, description="the champion demoted")
    champion: str | None = Field(None, description="the book's champion after the decision")
    reason: str = Field("", description="the decision in one line")
    evidence: dict[str, ChallengerEvidence] = Field(default_factory=dict, description="by challenger")


class FoldRecord(Artifact):
    """``folds/fold-<k>/fold.json``: one completed fold of a walk-forward."""

    FILE = "the fold record"
    SCHEMA_VERSION = 1
    WRITE_SET_ONLY = True  # a record read back and rewritten keeps exactly its keys
    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    index: int = Field(description="the fold's number, from 0")
    sessions: dict[str, int | list[int] | None] = Field(
        default_factory=dict, description="its layout in sessions"
    )
    windows: dict[str, list[str]] = Field(
        description="train, valid, gate, embargo, test: first and last date of each"
    )
    run: str | None = Field(None, description="the fold's run folder (its tournament)")
    pods_tried: int | None = Field(None, description="pods its tournament tried")
    pods_failed: int | None = Field(None, description="pods that failed")
    env_steps: int | None = Field(None, description="env steps of the tournament")
    challenger: PolicyLabel | None = Field(None, description="the tournament's champion")
    warm_started_from: str | None = Field(None, description="the incumbent whose weights seeded it")
    gate: GateResult = Field(default_factory=GateResult, description="the gate's decision (``app.gate``)")
    promoted: bool = Field(False, description="the challenger took over (gate = book: the book promoted one)")
    book: BookStep | None = Field(None, description="the shadow book's step (gate = book)")
    in_charge: InCharge | None = Field(
        None, description="who traded the test window (null: no champion qualified yet: before_champion)"
    )
    before_champion: Literal["benchmark", "cash"] | None = Field(
        None,
        description="what the account held with no champion in charge ([gate] before_champion; "
        "null with no champion: cash, as records before the setting held)",
    )
    feature_spec: FeatureSpec | None = Field(None, description="the challenger's feature statistics")
    test: FoldTest = Field(default_factory=FoldTest, description="the test window's figures")
    seconds: dict[str, Figure] = Field(default_factory=dict, description="seconds by stage, and total")

    def holding(self) -> str:
        """What the account held with no champion in charge (``"benchmark"`` or ``"cash"``)."""
        return self.before_champion or "cash"

    def in_charge_label(self) -> str:
        """Who traded the test window, as the views name it: the champion's fold run, or
        :data:`NO_CHAMPION_LABELS` of what the account held before any champion qualified."""
        return self.in_charge.run if self.in_charge is not None else NO_CHAMPION_LABELS[self.holding()]

    def test_window(self) -> tuple[str, str]:
        """The first and last date of the fold's test window."""
        first, last = self.windows["test"]
        return first, last


def read_fold_records(run: RunDir) -> list[FoldRecord]:
    """The records of ``run``'s completed folds, validated, in fold order (a malformed record or one
    from a newer schema version: a one-line error naming the file)."""
    return sorted((FoldRecord.read(path) for path in run.fold_record_files()), key=lambda r: r.index)
