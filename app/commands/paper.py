"""`podracer paper --bundle DIR | --champion [--once] [--dry-run] [limits...]`: trade on Alpaca paper."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from app import context

if TYPE_CHECKING:  # for the annotation only: app.paper loads torch
    from app.paper.cycle import CycleResult


def paper(
    bundle: Path = typer.Option(None, "--bundle", help="Exported bundle directory (podracer export)."),
    champion: bool = typer.Option(
        False,
        "--champion",
        help="Trade the registry's champion; a promotion takes over at the next session's first cycle.",
    ),
    once: bool = typer.Option(False, "--once", help="Run one decision and exit (cron, tests)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and journal, but submit no orders."),
    max_order_notional: float = typer.Option(10_000.0, "--max-order-notional", help="Cap per order, in $."),
    max_weight: float = typer.Option(
        None,
        "--max-weight",
        help="Cap per ticker target weight (0-1] \\[default: the bundle's env max_weight, else 1].",
    ),
    daily_loss_limit: float = typer.Option(
        0.05,
        "--daily-loss-limit",
        help="Halt new orders once equity is this fraction below last close (0-1).",
    ),
    kill_switch: Path = typer.Option(
        None,
        "--kill-switch",
        help="While this file exists no new orders are sent \\[default: <home>/paper/KILL].",
    ),
    whole_shares: bool = typer.Option(False, "--whole-shares", help="Round orders down to whole shares."),
    fill_timeout: float = typer.Option(
        30.0,
        "--fill-timeout",
        min=0.0,
        help="Seconds to wait for the sells to fill before the buys are sized to the cash there.",
    ),
    config: Path = typer.Option(
        None,
        "--config",
        help="TOML config whose \\[paper] and universe apply with --champion \\[default: the nightly "
        "schedule's config, else built-in defaults].",
    ),
    gone_after: int = typer.Option(
        5,
        "--gone-after",
        min=1,
        help="Sell a held ticker the broker still trades after this many sessions without a real bar.",
    ),
) -> None:
    """Paper-trade an exported policy on Alpaca (keys from APCA_API_KEY_ID / APCA_API_SECRET_KEY)."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app.config import load_config
    from app.nightly.schedule import read_schedule
    from app.paper.heartbeat import FAILED_STATUSES
    from app.paper.options import PaperOptions
    from app.paper.orders import RiskLimits
    from app.workflows.paper import run_paper_loop

    limits = RiskLimits(
        max_order_notional=max_order_notional,
        max_weight=1.0 if max_weight is None else max_weight,
        daily_loss_limit=daily_loss_limit,
    )
    home = context.home()
    options = PaperOptions(
        limits=limits,
        dry_run=dry_run,
        kill_switch=kill_switch or home / "paper" / "KILL",
        fractional=not whole_shares,
        fill_timeout=fill_timeout,
        gone_after=gone_after,
        weight_cap_from_bundle=max_weight is None,  # each bundle's own env max_weight
    )
    if config is None and champion:  # the loop trades what the nightly retrains: read their config
        scheduled = read_schedule(home)
        config = Path(scheduled.config) if scheduled is not None and scheduled.config else None
    cfg = load_config(config) if champion else None
    results = run_paper_loop(home, options, bundle=bundle, champion=champion, once=once, config=cfg)
    for result in results[-1:]:
        _print_cycle(result)
        if result.alert or result.status in (*FAILED_STATUSES, "unreconciled"):
            # --once under cron: a refused champion, a failed cycle or books that do not reconcile
            raise typer.Exit(1)


def _print_cycle(result: CycleResult) -> None:
    """One paper cycle's outcome: its status, the orders it planned and its notes."""
    when = result.decision_ts.isoformat() if result.decision_ts is not None else "-"
    who = f" by bundle {result.bundle_id[:12]}" if result.bundle_id else ""
    context.console.print(
        f"{result.status} at {when}{who}: {len(result.orders)} orders planned, "
        f"{len(result.submitted)} submitted",
        highlight=False,
    )
    for order in result.orders:
        context.console.print(
            f"  {order.side:4s} {order.qty:.6g} {order.ticker} (~${order.notional:,.2f})", highlight=False
        )
    for msg in result.messages:
        context.console.print(f"  note: {msg}", highlight=False)
