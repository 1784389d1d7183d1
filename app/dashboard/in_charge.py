"""What the Nightly page's champion card says: the champion in charge (and, for one an operator put
in charge by hand, that and the reason), or why none is (none promoted yet, or the last one demoted,
by the rule or by hand: its run, the date and the reason).

No Streamlit here, so the strings a user sees are unit-tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChampionCard:
    """The card: its value, the note under it, the "since" card's value and the one-line explanation
    (None: nothing to explain)."""

    value: str
    note: str | None
    since: str
    explanation: str | None


def _stamp(iso: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM`` (in its own offset); ``-`` for none."""
    return str(iso)[:16].replace("T", " ") if iso else "-"


def in_charge(state: Any) -> ChampionCard:
    """The card of ``state`` (``app.workflows.status.Status``)."""
    champ = state.champion
    if champ is not None:
        bundle = f"bundle {champ.bundle_id[:12]}" if champ.bundle_id else None
        if getattr(champ, "source", "rule") != "manual":
            return ChampionCard(champ.run_id, bundle, _stamp(champ.promoted_at), None)
        explanation = (
            f"champion {champ.run_id} was put in charge by hand on {_stamp(champ.promoted_at)} "
            f"(podracer promote), not by the promotion rule: {champ.reason}. The nightly retrains test "
            "their challengers against it from then on."
        )
        note = f"set by hand, {bundle}" if bundle else "set by hand"
        return ChampionCard(champ.run_id, note, _stamp(champ.promoted_at), explanation)
    gone = getattr(state, "demotion", None)
    if gone:
        how = (
            "by hand (podracer demote)"
            if gone.get("source") == "manual"
            else f"(its record to {gone.get('session') or '?'})"
        )
        explanation = (
            f"champion {gone['run_id']} demoted on {_stamp(gone['demoted_at'])} {how}: {gone['reason']}. "
            "The paper account holds [gate] before_champion until a challenger passes the promotion "
            "test (or an operator promotes a run: podracer promote)."
        )
        return ChampionCard(
            "none (demoted)", f"{gone['run_id']} demoted", _stamp(gone["demoted_at"]), explanation
        )
    return ChampionCard("none yet", None, "-", None)
