"""`podracer status`: the operating loop in one screen. Exit 0 when healthy, 1 when something needs the
operator (one line per problem; the checks: app/alerts.py, CHECKS). ``--notify`` sends each new and
each cleared problem once to the ``[alerts]`` hook; ``--unit-failed`` is a unit's ``OnFailure=``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from app import context
from app.timestamps import local_time


def status(
    json_out: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    cron: str = typer.Option(
        None,
        "--cron",
        help="The retrain schedule's cron expression \\[default: the one `podracer schedule` recorded, else "
        "its default].",
        show_default=False,
    ),
    tz: str = typer.Option(
        None,
        "--tz",
        help="The schedule's IANA time zone \\[default: the recorded one, else the exchange's].",
        show_default=False,
    ),
    config: Path = typer.Option(
        None,
        "--config",
        help="TOML config: its \\[alerts] and \\[nightly] max_minutes \\[default: the recorded schedule's].",
        show_default=False,
    ),
    notify: bool = typer.Option(False, "--notify", help="Send new and cleared problems to \\[alerts]."),
    silent: bool = typer.Option(False, "--silent", help="Print only what --notify did (the watchdog)."),
    unit_failed: str = typer.Option(
        None, "--unit-failed", help="Raise 'systemd unit UNIT failed' first (OnFailure=); implies --notify."
    ),
) -> None:
    """Champion, last and next retrain, the paper loop's heartbeat, kill switch, gone tickers, today's
    P&L, and every problem that needs a person (exit 1)."""
    # Imported here, not at module top: it loads pandas, which `podracer --help` must not (app.commands).
    from app.alerts import raise_problem
    from app.workflows.status import check_and_notify, gather_status

    home = context.home()
    if unit_failed:
        raise_problem(
            home, f"unit_failed:{unit_failed}", f"systemd unit {unit_failed} failed", check="unit_failed"
        )
    if notify or unit_failed:
        state, sent = check_and_notify(home, cron=cron, tz=tz, config=config)
        if sent.raised or sent.cleared or sent.failed:
            context.err_console.print(
                f"alerts: {len(sent.raised)} sent, {len(sent.cleared)} cleared"
                + (f", {len(sent.failed)} not delivered (retried next time)" if sent.failed else ""),
                highlight=False,
            )
    else:
        state = gather_status(home, cron=cron, tz=tz, config=config)
    if json_out and not silent:
        typer.echo(json.dumps(state.to_dict(), sort_keys=True, default=str))
    elif not silent:
        for line in status_lines(state):
            context.console.print(line, highlight=False, soft_wrap=True, markup=False)
    if not state.healthy:
        raise typer.Exit(1)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min ago"
    return f"{minutes / 60:.1f} h ago" if minutes < 48 * 60 else f"{minutes / 1440:.1f} days ago"


def _when(iso: str | None, tz: str = "UTC") -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM <tz>`` (in ``tz``)."""
    return f"{local_time(iso, tz)} {tz}" if iso else "-"


def _money(value: float) -> str:
    return f"{'-' if value < 0 else '+'}${abs(value):,.2f}"


# This screen's lines live here, not in app.render (which loads torch); the dashboard draws cards.
def status_lines(status: Any) -> list[str]:
    """``podracer status`` as lines (``app.workflows.status.Status``)."""
    champ, last, beat = status.champion, status.last_decision, status.heartbeat
    lines = []
    if champ:
        bundle = f"bundle {champ.bundle_id[:12]}" if champ.bundle_id else "no readable bundle"
        lines.append(f"champion      {champ.run_id} ({bundle}) since {_when(champ.promoted_at)}")
        if getattr(champ, "source", "rule") == "manual":
            lines.append(f"              put in charge by hand (podracer promote): {champ.reason}")
    elif gone := getattr(status, "demotion", None):
        on, to, why = _when(gone["demoted_at"]), gone.get("session") or "?", gone["reason"]
        how = "by hand (podracer demote)" if gone.get("source") == "manual" else f"(its record to {to})"
        lines.append(f"champion      none: {gone['run_id']} demoted {on} {how}: {why}")
    else:
        lines.append("champion      none yet (podracer retrain promotes the first)")
    if last:
        lines.append(f"last retrain  {last['verdict']} {_when(last['decided_at'])}: {last['reason']}")
    else:
        lines.append("last retrain  none recorded")
    cron = status.schedule
    lines.append(
        f"next retrain  {_when(status.next_retrain, cron['tz'])} (cron '{cron['cron']}', {cron['described']})"
    )
    if beat is None:
        lines.append("paper loop    not started (podracer paper --champion)")
    else:
        from app.paper.benchmark import in_charge_label, is_benchmark

        who = in_charge_label(beat.get("bundle_id"), beat.get("run_id"))
        lines.append(
            f"paper loop    {status.loop}: {beat['status']} {_ago(status.heartbeat_age_s)} ({who}), "
            f"{beat['orders']} orders planned, {beat['submitted']} sent; next cycle {_when(beat['next_due'])}"
        )
        if status.switch_pending:
            when = "next cycle" if is_benchmark(beat.get("bundle_id")) else "first cycle of the next session"
            lines.append(f"              the new champion trades from the {when}")
    kill = status.kill_switch
    lines.append(f"kill switch   {'ON: no new orders' if kill['on'] else 'off'} ({kill['path']})")
    lines.append(f"gone tickers  {', '.join(status.gone) or 'none'}")
    today = status.today
    if today and today.get("pnl") is not None:
        ret = f" ({today['return']:+.2%})" if today.get("return") is not None else ""
        lines.append(
            f"today's P&L   {_money(today['pnl'])}{ret}, equity ${today['equity']:,.2f} at {_when(today['as_of'])}"
        )
    else:
        lines.append("today's P&L   no paper cycle today")
    for row in status.slippage:
        who = str(row["bundle_id"])[:12] + (f" ({row['run_id']})" if row.get("run_id") else "")
        lines.append(
            f"slippage      champion {who}: realized {row['realized_bps']:.1f} bp vs model "
            f"{row['model_bps']:.1f} bp over {row['fills']} fills"
        )
    lines += [f"warning       {w}" for w in status.warnings]
    lines += [f"problem       {p}" for p in status.problems] or ["healthy"]
    return lines
