"""`podracer backtest RUN [--window test|valid] [--json]` and `podracer backtest --baseline NAME`.

With a run: the champion + baselines on the window (test by default), written to ``<run>/backtest/``
(see ``app.workflows.evaluation.backtest_run``), shown as a table (or, with ``--json``, the
metrics.json document). Without a run, ``--baseline buy-and-hold`` (repeatable: ``equal-weight``, ``cash``, ``index``, ``linear``, ``boosted``)
backtests baselines on the stored bars (data config from ``--config`` with ``source = "stored"``);
``--out DIR`` also writes the report there.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from app import context
from data.errors import ConfigError


def backtest(
    run: str = typer.Argument(None, help="Run id under <home>/runs (omit with --baseline)."),
    window: str = typer.Option("test", "--window", help="test, valid or full."),
    json_out: bool = typer.Option(False, "--json", help="Print the metrics document as JSON."),
    baseline: list[str] = typer.Option(
        None,
        "--baseline",
        help="Without RUN: baseline(s) on the stored data (buy-and-hold, equal-weight, cash, index, linear, boosted).",
    ),
    config: Path = typer.Option(None, "--config", help="With --baseline: TOML config (data, env costs)."),
    out: Path = typer.Option(
        None, "--out", help="With --baseline: also write the report under OUT/backtest/."
    ),
    device: str = typer.Option(
        None, "--device", help="torch device \\[default: the run's agent.device, else cpu]."
    ),
    no_tearsheet: bool = typer.Option(False, "--no-tearsheet", help="Skip the pyfolio tear sheet."),
) -> None:
    """Backtest a run's champion (and baselines) on the held-out window, or baselines on stored data."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app import render
    from app.runs import RunDir
    from app.workflows.backtest import backtest_baselines, backtest_run

    home = context.home()
    if run is None and not baseline:
        raise ConfigError(
            "give a RUN id, or --baseline buy-and-hold to backtest baselines on the stored data"
        )
    if run is not None and baseline:
        raise ConfigError(
            "--baseline is for backtests without a run; a run's backtest includes the baselines"
        )
    if run is not None:
        doc = backtest_run(run, home=home, window=window, device=device, tearsheet=not no_tearsheet)
        title = f"Backtest of run {run}: champion vs baselines"
    else:
        doc = backtest_baselines(
            list(baseline),
            home=home,
            window=window,
            config_path=config,
            out=out,
            device=device or "cpu",
            tearsheet=not no_tearsheet,
        )
        title = "Baselines on the stored data"
    if json_out:
        typer.echo(json.dumps(doc.to_json()))
        return
    context.console.print(render.backtest_table(doc, title))
    if run is not None:
        context.console.print(f"wrote {RunDir(home, run).backtest}", highlight=False)
