"""`podracer schedule run|print`: nightly retraining in-process (APScheduler) or via crontab/systemd."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from app import context
from data.errors import ConfigError, one_line

app = typer.Typer(
    help="Schedule nightly retraining (in-process APScheduler, or crontab/systemd text).",
    no_args_is_help=True,
)

# The cron default is spelled here (app.nightly.cron.DEFAULT_CRON, pinned equal by
# tests/test_schedule.py) and the time zone's default resolved in the body: app.nightly.cron reads
# the exchange's time zone from data.calendar, which loads pandas, and `--help` must stay light.
_DEFAULT_CRON = "0 2 * * 1-5"
_CRON_HELP = "Crontab expression: minute hour day-of-month month day-of-week."
_TZ_HELP = "IANA time zone of the cron times \\[default: the exchange's, data.calendar.TZ]."


def _record(home: Path, *, cron: str, tz: str, config: Path | None, fmt: str) -> None:
    """Record the schedule in ``<home>/schedule.json`` for `podracer status`; a failed write is a warning."""
    from app.nightly.schedule import record_schedule, schedule_path

    try:
        record_schedule(home, cron=cron, tz=tz, config=config, fmt=fmt)
    except OSError as err:
        context.err_console.print(
            f"warning: the schedule is not recorded in {schedule_path(home)} ({one_line(err)}): "
            "`podracer status` will not know it",
            highlight=False,
        )


def _describe(outcome: Any) -> str:
    verdict = getattr(outcome, "verdict", None)
    return f"{verdict}: {outcome.reason}" if verdict else str(outcome)


@app.command("run")
def run(
    cron: str = typer.Option(_DEFAULT_CRON, "--cron", help=_CRON_HELP),
    tz: str = typer.Option(None, "--tz", help=_TZ_HELP, show_default=False),
    config: Path = typer.Option(None, "--config", help="TOML config file, re-read before every run."),
    home: Path = typer.Option(None, "--home", help="Home directory \\[default: the global --home]."),
    max_runs: int = typer.Option(None, "--max-runs", min=1, help="Stop after N runs \\[default: never]."),
    now: bool = typer.Option(False, "--now", help="Also run once immediately."),
) -> None:
    """Run `podracer retrain` on a cron schedule in this process (Ctrl-C stops).

    Records the schedule in <home>/schedule.json, for `podracer status`.
    """
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app.config import load_config
    from app.nightly import pipeline
    from app.nightly.cron import DEFAULT_TZ
    from app.nightly.schedule import cron_trigger, next_fire_times, run_schedule

    tz = tz or DEFAULT_TZ

    if home is not None:
        context.set_home(home)
    home_dir = context.home()
    trigger = cron_trigger(cron, tz)
    load_config(config)  # a bad config fails now, not at 02:00
    _record(home_dir, cron=cron, tz=tz, config=config, fmt="in-process")

    def job() -> Any:
        return pipeline.run_retrain(load_config(config), home_dir)  # looked up per run: tests patch it

    upcoming = next_fire_times(trigger, datetime.now(UTC), 3)
    context.err_console.print(
        f"retrain scheduled '{cron}' ({tz}); next: " + ", ".join(t.isoformat() for t in upcoming),
        highlight=False,
    )
    report = run_schedule(job, trigger, max_runs=max_runs, run_now=now, describe=_describe)
    context.err_console.print(
        f"schedule stopped after {report.runs} run(s), {report.failures} failed", highlight=False
    )


@app.command("print")
def print_(
    cron: str = typer.Option(_DEFAULT_CRON, "--cron", help=_CRON_HELP),
    fmt: str = typer.Option("crontab", "--format", help="crontab or systemd."),
    tz: str = typer.Option(None, "--tz", help=_TZ_HELP, show_default=False),
    config: Path = typer.Option(None, "--config", help="TOML config file for the scheduled runs."),
    home: Path = typer.Option(None, "--home", help="Home directory \\[default: the global --home]."),
) -> None:
    """Print the crontab lines or the systemd units of `podracer retrain` and the paper loop.

    Records what it prints in <home>/schedule.json, for `podracer status`.
    """
    # Imported here: app.nightly loads pandas through data.calendar (see _TZ_HELP above); the
    # config loads torch.
    from app.config import load_config
    from app.nightly.cron import DEFAULT_TZ
    from app.nightly.os_schedule import (
        crontab_text,
        paper_crontab_text,
        paper_unit,
        systemd_text,
        systemd_units,
        watch_crontab_text,
        watch_units,
    )

    tz = tz or DEFAULT_TZ
    if home is not None:
        context.set_home(home)
    if config is not None and not config.is_file():
        raise ConfigError(f"config file not found: {config}")
    # The whole config, before anything is printed or recorded: a job that would fail every night
    # before writing anything status can read is refused now.
    budget = load_config(config).nightly.max_minutes
    home_dir = context.home()
    if fmt == "crontab":
        text = "\n".join(
            [
                crontab_text(cron, tz=tz, home=home_dir, config=config),
                paper_crontab_text(home_dir),
                watch_crontab_text(home_dir, config),
            ]
        )
    elif fmt == "systemd":
        units = systemd_units(cron, tz=tz, home=home_dir, config=config, max_minutes=budget)
        text = systemd_text(units | paper_unit(home_dir) | watch_units(home_dir, config))
    else:
        raise ConfigError(f"--format {fmt!r}: choose crontab or systemd")
    _record(home_dir, cron=cron, tz=tz, config=config, fmt=fmt)
    typer.echo(text, nl=False)
