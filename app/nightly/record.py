"""The champion's out-of-sample record: paper-trading results since its promotion.

The nightly gate decides on the test window, so the promoted run's figures there are *selection*
figures (the registry row, the run record and its ``metrics.json`` say ``"role": "selection"``): a
challenger that cleared the gate was chosen partly for its luck on those days. The first figures no
decision looked at are the paper trader's, from the first decision the champion's bundle took after
its promotion on: :func:`out_of_sample_record` reads them from the paper journal
(``app.paper.journal.read_journal``) for the Nightly page.

Only rows attributable to the champion count: paper decisions taken with the champion's bundle
(``bundle_id`` from its manifest) and recorded after ``promoted_at``, and the account's P&L rows from
the first such decision on (the account is shared, so rows before it belong to the previous
champion).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from app.nightly.registry import current_champion
from app.paper.journal import read_journal

SELECTION = "selection"
OUT_OF_SAMPLE = "out_of_sample"


@dataclass(frozen=True)
class OutOfSampleRecord:
    """Paper-trading results of the current champion since its promotion (empty frames if none)."""

    run_id: str | None
    promoted_at: str | None
    bundle_id: str | None
    decisions: int = 0
    start: str | None = None  # first attributable decision (ISO UTC)
    end: str | None = None  # last P&L row (ISO UTC)
    cum_return: float | None = None  # last equity / equity at the first attributable P&L row - 1
    pnl: pd.DataFrame = field(default_factory=pd.DataFrame)  # recorded_at, equity, day_return
    role: str = OUT_OF_SAMPLE
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (without the P&L frame)."""
        return {
            "role": self.role,
            "run_id": self.run_id,
            "promoted_at": self.promoted_at,
            "bundle_id": self.bundle_id,
            "decisions": self.decisions,
            "start": self.start,
            "end": self.end,
            "cum_return": self.cum_return,
            "pnl_rows": int(len(self.pnl)),
            "note": self.note,
        }


def _bundle_id(bundle: str | None) -> str | None:
    if not bundle:
        return None
    try:
        manifest = json.loads((Path(bundle) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = manifest.get("bundle_id") if isinstance(manifest, dict) else None
    return str(value) if value else None


def out_of_sample_record(home: str | os.PathLike[str]) -> OutOfSampleRecord:
    """The current champion's paper-trading record since its promotion (see the module docstring)."""
    champion = current_champion(home)
    if champion is None:
        return OutOfSampleRecord(None, None, None, note="no champion promoted yet")
    promoted = pd.Timestamp(champion["promoted_at"])
    promoted = promoted.tz_localize("UTC") if promoted.tzinfo is None else promoted.tz_convert("UTC")
    bundle_id = _bundle_id(champion.get("bundle"))
    base = {"run_id": champion["run_id"], "promoted_at": champion["promoted_at"], "bundle_id": bundle_id}
    if bundle_id is None:
        return OutOfSampleRecord(**base, note="the champion has no readable export bundle: not paper-traded")
    journal = read_journal(home)
    decisions = journal["decisions"]
    mine = decisions[(decisions["bundle_id"] == bundle_id) & (decisions["recorded_at"] >= promoted)]
    if mine.empty:
        return OutOfSampleRecord(
            **base, note="no paper decision with the champion's bundle since its promotion"
        )
    first = mine["recorded_at"].min()
    pnl = journal["pnl"]
    pnl = pnl[pnl["recorded_at"] >= first][["recorded_at", "equity", "day_return"]].reset_index(drop=True)
    cum = None
    if len(pnl) >= 1 and float(pnl["equity"].iloc[0]) > 0:
        cum = float(pnl["equity"].iloc[-1]) / float(pnl["equity"].iloc[0]) - 1.0
    return OutOfSampleRecord(
        **base,
        decisions=int(len(mine)),
        start=first.isoformat(),
        end=pnl["recorded_at"].iloc[-1].isoformat() if len(pnl) else None,
        cum_return=cum,
        pnl=pnl,
        note="paper trading since promotion: the champion's first figures no decision looked at",
    )
