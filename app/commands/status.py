"""`podracer status [--json] [--cron EXPR --tz TZ]`: the operating loop in one screen.

Exit status: 0 when healthy, 1 when something needs the operator (a stale or failing paper loop, a
refused champion bundle, gone tickers, an unreadable store); see app/workflows/status.py.
"""

from __future__ import annotations

import json

import typer

from app import context


def status(
    json_out: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    cron: str = typer.Option(
        None,
        "--cron",
        help="The retrain schedule's cron expression, as given to `podracer schedule` [default: its default].",
        show_default=False,
    ),
    tz: str = typer.Option(
        None, "--tz", help="The schedule's IANA time zone [default: the exchange's].", show_default=False
    ),
) -> None:
    """Champion, last and next retrain, the paper loop's heartbeat, kill switch, gone tickers, today's P&L."""
    # Imported here, not at module top: they load pandas, which `podracer --help` must not (app.commands).
    from app.nightly.cron import DEFAULT_CRON, DEFAULT_TZ
    from app.render import status_lines
    from app.workflows.status import gather_status

    state = gather_status(context.home(), cron=cron or DEFAULT_CRON, tz=tz or DEFAULT_TZ)
    if json_out:
        typer.echo(json.dumps(state.to_dict(), sort_keys=True, default=str))
    else:
        for line in status_lines(state):
            context.console.print(line, highlight=False, soft_wrap=True)
    if not state.healthy:
        raise typer.Exit(1)
