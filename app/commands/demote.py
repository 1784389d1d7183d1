"""`podracer demote --reason TEXT`: remove the champion in charge by hand, on the record
(app/nightly/manual.py).

Exit status: 0 when no champion is in charge any more, 2 when there was none (or no reason), 75 when
a retrain or a prune holds ``<home>/retrain.lock``.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from app import context


def demote(
    reason: str = typer.Option(
        ..., "--reason", help="Why the champion goes: stored with the decision, shown by status."
    ),
) -> None:
    """Remove the champion by hand: the registry records the manual demotion and its reason, and
    paper --champion hands the account back to \\[gate] before_champion (the benchmark, or cash)."""
    # Imported here, not at module top: it loads torch, which `podracer --help` must not (app.commands).
    from app.nightly.manual import demote_by_hand

    done = demote_by_hand(context.home(), reason)
    context.console.print(
        f"[bold yellow]demoted by hand[/]: {done.run_id}, decision {done.decision_id}\n"
        f"  reason: {escape(done.reason)}\n"
        "  paper --champion hands the account to \\[gate] before_champion from the next session's first "
        "cycle, until a champion is promoted",
        highlight=False,
    )
