"""`podracer retrain --config FILE [--home H] [--json]`: one nightly retrain (see app/nightly/pipeline.py).

Exit status: 0 when a decision was taken (promoted or rejected), 1 when a step failed (the previous
champion stays), 2 for a bad config, 75 when another retrain holds ``<home>/retrain.lock``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from app import context


def retrain(
    config: Path = typer.Option(None, "--config", help="TOML config file \\[default: built-in defaults]."),
    home: Path = typer.Option(None, "--home", help="Home directory \\[default: the global --home]."),
    json_out: bool = typer.Option(False, "--json", help="Print the decision as JSON."),
) -> None:
    """Retrain a challenger, compare it with the champion, promote it only if it is really better."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app.config import load_config
    from app.nightly import pipeline

    if home is not None:
        context.set_home(home)
    cfg = load_config(config)
    try:
        outcome = pipeline.run_retrain(cfg, context.home())
    finally:
        if cfg.alerts.command or cfg.alerts.webhook:
            _alert(context.home(), config)
    if json_out:
        typer.echo(json.dumps(outcome.to_dict(), sort_keys=True, default=str))
        return
    style = "bold green" if outcome.verdict == "promoted" else "bold yellow"
    context.console.print(
        f"[{style}]{outcome.verdict}[/]: {outcome.reason}\n"
        f"  challenger {outcome.challenger_run_id}, champion now {outcome.champion or '-'}"
        + (f", bundle {outcome.bundle}" if outcome.bundle else ""),
        highlight=False,
    )


def _alert(home: Path, config: Path | None) -> None:
    """The retrain's outcome to the ``[alerts]`` hook at once (not at the watchdog's next run); best
    effort: the retrain's own result is what this command reports."""
    from app.workflows.status import check_and_notify
    from data.errors import PodracerError, one_line

    try:
        check_and_notify(home, config=config)
    except (PodracerError, OSError) as err:
        context.err_console.print(f"warning: alerts not sent: {one_line(err)}", highlight=False)
