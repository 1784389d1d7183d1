"""`podracer promote RUN --reason TEXT [--exporter NAME]`: put a run in charge by hand, on the record
(app/nightly/manual.py).

Exit status: 0 when the run is the champion, 2 when it cannot be (no such run, no policy, a bundle
that does not load, no reason, already the champion), 75 when a retrain or a prune holds
``<home>/retrain.lock``.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from app import context
from data.errors import ConfigError


def promote(
    run: str = typer.Argument(..., help="Run id under <home>/runs (a podracer train or retrain run)."),
    reason: str = typer.Option(
        ..., "--reason", help="Why the rule is overruled: stored with the decision, shown by status."
    ),
    exporter: str = typer.Option(
        "dynamo",
        "--exporter",
        help="ONNX exporter of the run's bundle: dynamo (torch.export, default) or torchscript (fast).",
    ),
) -> None:
    """Make RUN the champion by hand: its bundle is exported and verified, the registry records the
    manual decision and its reason, and paper --champion trades it from the next session."""
    # Imported here, not at module top: it loads torch, which `podracer --help` must not (app.commands).
    from app.nightly.manual import promote_by_hand

    if exporter not in ("dynamo", "torchscript"):
        raise ConfigError(f"--exporter {exporter!r}: dynamo or torchscript")
    done = promote_by_hand(context.home(), run, reason, exporter=exporter)
    replaced = f"replacing {done.previous}" if done.previous else "no champion before"
    context.console.print(
        f"[bold green]promoted by hand[/]: {done.run_id} ({replaced}), decision {done.decision_id}\n"
        f"  reason: {escape(done.reason)}\n"
        f"  bundle: {done.bundle}\n"
        "  paper --champion trades it from the next session's first cycle (the next cycle while no "
        "champion is in charge)",
        highlight=False,
    )
