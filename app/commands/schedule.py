"""`podracer schedule run|print`."""

from __future__ import annotations

import typer

from app.commands._stub import not_implemented

app = typer.Typer(help="Schedule nightly retraining (in-process APScheduler, or crontab/systemd text).",
                  no_args_is_help=True)


@app.command("run")
def run() -> None:
    """Not implemented yet."""
    not_implemented("schedule run")


@app.command("print")
def print_() -> None:
    """Not implemented yet."""
    not_implemented("schedule print")
