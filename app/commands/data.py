"""`podracer data synth|import|fetch|info`."""

from __future__ import annotations

import typer

from app.commands._stub import not_implemented

app = typer.Typer(help="Market data: synthesize, import, fetch, inspect.", no_args_is_help=True)


@app.command("info")
def info() -> None:
    """Not implemented yet."""
    not_implemented("data info")
