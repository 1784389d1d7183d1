"""`podracer demo`: the main job end to end, offline: data -> tournament -> backtest -> report
(see ``app.workflows.demo``), then a summary table and the `podracer dashboard` command (or the
dashboard itself with ``--serve``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from app import context
from data.errors import ConfigError


def demo(
    minutes: float = typer.Option(
        None, "--minutes", min=0.05, help="Tournament wall-time budget in minutes \\[default preset: 6]."
    ),
    data: str = typer.Option(
        "synthetic", "--data", help="synthetic or real-sample (shipped real minute bars)."
    ),
    signal: float = typer.Option(
        None,
        "--signal",
        min=0.0,
        help="Planted signal strength (0 = pure noise, the control; replaces the default preset's "
        "daily rank IC of 0.05; test preset 1.0).",
    ),
    target_ic: float = typer.Option(
        None,
        "--target-ic",
        min=0.0,
        max=0.15,
        help="The planted level as the planted predictor's daily rank IC (replaces --signal; "
        "good real factors: 0.02-0.05).",
    ),
    seed: int = typer.Option(None, "--seed", help="Seed of data, pods and tournament \\[default: 0]."),
    preset: str = typer.Option(
        "default", "--preset", help="default, or test (a tiny end-to-end run for CI)."
    ),
    config: Path = typer.Option(None, "--config", help="TOML config to use instead of the preset."),
    workers: int = typer.Option(None, "--workers", min=0, help="Worker processes \\[default: CPU cores]."),
    run: str = typer.Option(None, "--run", help="Run name \\[default: demo-<UTC time>]."),
    serve: bool = typer.Option(False, "--serve", help="Start the dashboard on the run when done."),
    port: int = typer.Option(8501, "--port", help="With --serve: dashboard port."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (no live view)."),
) -> None:
    """Run the main job offline: data -> tournament -> backtest of the champion vs buy-and-hold."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app import render
    from app.dashboard.launch import serve_dashboard
    from app.workflows.demo import run_demo
    from backtests.report import json_safe

    if data not in ("synthetic", "real-sample"):
        raise ConfigError(f"--data {data!r}: choose synthetic or real-sample")
    home = context.home()
    result = run_demo(
        home=home,
        preset=preset,
        config_path=config,
        data_source=data,
        signal=signal,
        target_ic=target_ic,
        seed=seed,
        minutes=minutes,
        workers=workers,
        run=run,
        progress=render.TournamentLive.factory(enabled=not json_out),
        say=render.say,
        status=context.err_console.status,
    )
    if json_out:
        result.pop("document")
        typer.echo(json.dumps(json_safe(result), sort_keys=True))
    else:
        context.console.print(render.demo_table(result["document"]))
        context.console.print(render.demo_footer(result), highlight=False)
        cmd = f"podracer --home {home} dashboard --run {result['run_id']}"
        context.console.print(f"\nOpen the dashboard:  [bold]{cmd}[/]", highlight=False)
    if serve:
        serve_dashboard(home, port=port, run=result["run_id"], host="127.0.0.1")
