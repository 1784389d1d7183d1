"""The champions' out-of-sample record: what each one earned in paper trading while in charge.

The nightly gate decides on the test window, so the promoted run's figures there are *selection*
figures (the registry row, the run record and its ``metrics.json`` say ``"role": "selection"``): a
challenger that cleared the gate was chosen partly for its luck on those days. The first figures no
decision looked at are the paper trader's. :func:`champion_timeline` lines the registry's promotions
up with the paper journal's per-champion records (``app.paper.attribution``: whole sessions, from a
champion's first decision to its successor's, fills and marks from the journal), for the Nightly
page: one entry per champion, oldest first, each with its record (None before it has traded).

Records are matched to promotions by the run the journal names for a session (``paper --champion``)
or else by ``bundle_id``; a bundle traded with ``paper --bundle`` that no promotion names gets an
entry of its own.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.nightly.registry import current_champion, read_decisions
from app.paper.attribution import ChampionRecord, attribute
from app.paper.journal import read_journal

SELECTION = "selection"
OUT_OF_SAMPLE = "out_of_sample"


@dataclass(frozen=True)
class TimelineEntry:
    """One champion: its promotion and its paper record while it was in charge."""

    run_id: str | None  # None: a bundle traded with paper --bundle, not a registry champion
    bundle_id: str | None
    bundle: str | None  # the export folder the registry names
    promoted_at: str | None
    decision_id: int | None
    current: bool  # the registry's champion now
    record: ChampionRecord | None  # None: not paper-traded (yet)
    role: str = OUT_OF_SAMPLE


@dataclass(frozen=True)
class ChampionTimeline:
    """Every champion, oldest first, and the check of their records against the account."""

    entries: list[TimelineEntry] = field(default_factory=list)
    records_pnl: float = 0.0  # the sum of the records' P&L
    account_pnl: float | None = None  # the broker's equity over the same sessions
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        entries = [
            {**{k: getattr(e, k) for k in e.__dataclass_fields__ if k != "record"},
             "record": e.record.to_dict() if e.record else None}
            for e in self.entries
        ]  # fmt: skip
        return {
            "entries": entries,
            "records_pnl": self.records_pnl,
            "account_pnl": self.account_pnl,
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


def champion_timeline(home: str | os.PathLike[str]) -> ChampionTimeline:
    """The registry's champions with their paper records (see the module docstring)."""
    current = current_champion(home)
    promotions = [d for d in read_decisions(home) if d["verdict"] == "promoted"]
    attribution = attribute(read_journal(home))
    records = list(attribution.records)
    entries = []
    for promotion in promotions:
        run_id, bundle = promotion.get("challenger_run_id"), promotion.get("bundle")
        bundle_id = _bundle_id(bundle)
        record = next((r for r in records if r.run_id and r.run_id == run_id), None) or next(
            (r for r in records if bundle_id and r.bundle_id == bundle_id), None
        )
        if record is not None:
            records.remove(record)
        entries.append(
            TimelineEntry(
                run_id=run_id,
                bundle_id=bundle_id or (record.bundle_id if record else None),
                bundle=bundle,
                promoted_at=promotion.get("decided_at"),
                decision_id=promotion.get("id"),
                current=bool(current and current.decision_id == promotion.get("id")),
                record=record,
            )
        )
    for record in records:  # traded, but no promotion names it (paper --bundle)
        entries.append(TimelineEntry(record.run_id, record.bundle_id, None, None, None, False, record))
    entries.sort(key=lambda e: e.promoted_at or (e.record.first_decision if e.record else ""))
    note = attribution.note
    if not promotions:
        note = note or "no champion promoted yet"
    return ChampionTimeline(entries, attribution.records_pnl, attribution.account_pnl, note)
