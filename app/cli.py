"""The ``podracer`` command line (typer + rich).

Every command lives in its own module under ``app.commands``, imported here to register it; a
command imports its workflow (and torch with it) only when it runs, so ``--help`` stays fast
(``app/commands/__init__.py``). Errors that are the user's to fix
(``data.errors.PodracerError``) become one line on stderr and a non-zero exit, never a traceback;
``PODRACER_DEBUG=1`` shows the traceback of anything unexpected.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import typer
from rich.logging import RichHandler
from rich.markup import escape

from app import __version__, context
from app.commands import (
    backtest,
    dashboard,
    data,
    demo,
    demote,
    export,
    paper,
    promote,
    prune,
    reconcile,
    retrain,
    schedule,
    status,
    train,
    walkforward,
)
from data.errors import PodracerError, one_line
from data.scrub import ScrubFilter, scrub

cli = typer.Typer(
    name="podracer",
    help="Deep-RL stock trading: vectorized minute-level envs, a podracer tournament trainer, "
    "backtests, a dashboard, nightly retraining and Alpaca paper trading.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"podracer {__version__}")
        raise typer.Exit()


@cli.callback()
def main_callback(
    home: Path = typer.Option(
        None,
        "--home",
        envvar="PODRACER_HOME",
        help="Home directory for data, runs and registries \\[default: ./podracer-home]",
        show_default=False,
    ),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output (-vv for debug)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    context.set_home(home)
    level = logging.WARNING if quiet else (logging.INFO if verbose == 0 else logging.DEBUG)
    logging.basicConfig(
        level=level,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[
            _scrubbed(RichHandler(console=context.err_console, show_path=False, rich_tracebacks=False))
        ],
        force=True,
    )
    for noisy in (
        "urllib3",
        "matplotlib",
        "PIL",
        "yfinance",
        "peewee",
        "filelock",
        "apscheduler",
        "onnxscript",
        "onnx_ir",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _scrubbed(handler: logging.Handler) -> logging.Handler:
    """``handler`` masking secrets in every record (``data.scrub``: logs end up in files)."""
    handler.addFilter(ScrubFilter())
    return handler


cli.command("demo")(demo.demo)
cli.add_typer(data.app, name="data")
cli.command("train")(train.train)
cli.command("backtest")(backtest.backtest)
cli.command("dashboard")(dashboard.dashboard)
cli.command("export")(export.export)
cli.command("paper")(paper.paper)
cli.command("promote")(promote.promote)
cli.command("demote")(demote.demote)
cli.command("prune")(prune.prune)
cli.command("reconcile")(reconcile.reconcile)
cli.command("retrain")(retrain.retrain)
cli.add_typer(schedule.app, name="schedule")
cli.command("status")(status.status)
cli.command("walkforward")(walkforward.walkforward)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the CLI and turn known errors into one line."""
    try:
        rc = cli(args=argv, prog_name="podracer", standalone_mode=False)
    except PodracerError as err:
        # escape: messages like "outside [low, high]" must not be read as rich markup
        context.err_console.print(
            f"[bold red]error:[/] {escape(scrub(str(err)))}", highlight=False, soft_wrap=True
        )
        return err.exit_code
    except typer.Exit as ex:
        return ex.exit_code
    except typer.Abort:
        context.err_console.print("aborted")
        return 130
    except KeyboardInterrupt:
        context.err_console.print("interrupted")
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence against raw tracebacks
        # typer >= 0.20 ships its own click fork: match its exceptions by duck type.
        if hasattr(err, "show") and hasattr(err, "exit_code"):
            err.show()
            return int(err.exit_code)
        if os.environ.get("PODRACER_DEBUG"):
            raise
        context.err_console.print(
            f"[bold red]internal error:[/] {escape(one_line(err))} (PODRACER_DEBUG=1 shows the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        return 1
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
