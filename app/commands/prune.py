"""`podracer prune [--dry-run] [--config FILE]`: keep the home within ``[retention]`` (app/nightly/retention.py).

Exit status: 0 (also when nothing is due), 2 for a bad config, 75 when a retrain holds the lock.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from app import context


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def prune(
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would go; remove nothing."),
    config: Path = typer.Option(
        None, "--config", help="TOML config whose \\[retention] applies \\[default: built-in defaults]."
    ),
) -> None:
    """Remove old nightly runs, old champions' exports and copies, rotate logs, compact the journal."""
    # Imported here, not at module top: they load pandas and the registry, which `--help` must not.
    from app.config import load_config
    from app.nightly.retention import home_bytes, plan_prune
    from app.nightly.retention import prune as run_prune

    retention = load_config(config).retention
    home = context.home()
    items = plan_prune(home, retention) if dry_run else run_prune(home, retention)
    title = "would go" if dry_run else "pruned"
    table = Table(title=f"{home}: {title}")
    for col in ("kind", "path", "size", "why"):
        table.add_column(col, justify="right" if col == "size" else "left")
    for item in items:
        table.add_row(item.kind, item.path, _mb(item.bytes) if item.bytes else "-", item.why)
    context.console.print(table)
    freed = sum(d.bytes for d in items if d.kind != "log")
    context.console.print(
        f"{len(items)} item(s) {title}; {'would free' if dry_run else 'freed'} {_mb(freed)}; "
        f"home now {_mb(home_bytes(home)['total'])}",
        highlight=False,
    )
