"""`podracer retrain`."""

from __future__ import annotations

import typer

from app.commands._stub import not_implemented


def retrain(ctx: typer.Context) -> None:
    """Not implemented yet."""
    not_implemented("retrain")
