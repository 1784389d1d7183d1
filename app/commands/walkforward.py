"""`podracer walkforward [--config FILE] [--run NAME | --resume RUN] [--json]`: nightly retraining replayed
over history as one out-of-sample account (see ``app.walkforward.run``, docs/walkforward.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from app import context
from app.settings_docs import cli_help
from data.errors import ConfigError


def _overrides(**given: Any) -> dict[str, Any]:
    """``[walkforward]`` fields set on the command line; one budget given alone replaces both."""
    out = {k: v for k, v in given.items() if v is not None}
    if given.get("budget_steps") is not None and given.get("budget_minutes") is None:
        out["budget_minutes"] = None
    if given.get("budget_minutes") is not None and given.get("budget_steps") is None:
        out["budget_steps"] = None
    return out


def walkforward(
    config: Path = typer.Option(None, "--config", help="TOML config file \\[default: built-in defaults]."),
    run: str = typer.Option(None, "--run", help="Run name \\[default: <UTC time>-walkforward]."),
    resume: str = typer.Option(None, "--resume", help="Continue the walk-forward RUN after a stop or kill."),
    window: str = typer.Option(None, "--window", help=cli_help("walkforward.window")),
    step_sessions: int = typer.Option(
        None, "--step-sessions", min=1, help=cli_help("walkforward.step_sessions")
    ),
    folds: int = typer.Option(None, "--folds", min=1, help=cli_help("walkforward.num_folds")),
    budget_steps: int = typer.Option(
        None, "--budget-steps", min=1, help=cli_help("walkforward.budget_steps")
    ),
    budget_minutes: float = typer.Option(
        None, "--budget-minutes", min=0.0, help=cli_help("walkforward.budget_minutes")
    ),
    gate: str = typer.Option(None, "--gate", help=cli_help("gate.rule")),
    before_champion: str = typer.Option(None, "--before-champion", help=cli_help("gate.before_champion")),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (no progress display)."),
) -> None:
    """Replay nightly retraining fold by fold; the policies in charge trade one out-of-sample account."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app.config import load_config, load_run_config
    from app.runs import RunDir, new_id
    from app.walkforward import display
    from app.walkforward.run import run_walkforward

    home = context.home()
    if resume is not None:
        if config is not None:
            raise ConfigError("--resume uses the run's own config.toml: drop --config")
        stored = RunDir(home, new_id(resume, "walkforward")).config
        if not stored.is_file():
            raise ConfigError(f"--resume {resume!r}: no walk-forward config at {stored}")
        config = stored
    # A run's own config.toml: a key it predates reads at the value it ran with (app.config.ADDED_KEYS).
    cfg = load_run_config(config) if resume is not None else load_config(config)
    overrides = _overrides(
        window=window,
        step_sessions=step_sessions,
        num_folds=folds,
        budget_steps=budget_steps,
        budget_minutes=budget_minutes,
    )
    # --gate nightly, the fixed-window gate's earlier name, reads as "window" (app.config.MOVED_TO_GATE).
    rule = {"nightly": "window"}.get(gate, gate) if gate is not None else None
    gate_overrides = {
        k: v for k, v in {"rule": rule, "before_champion": before_champion}.items() if v is not None
    }
    if overrides or gate_overrides:
        if resume is not None:
            raise ConfigError("--resume goes on with the run's own settings: drop the walk-forward options")
        cfg = cfg.with_updates(walkforward=overrides, gate=gate_overrides)
    with display.WalkForwardProgress(enabled=not json_out) as on_event:
        result = run_walkforward(cfg, home, run=run, resume=resume, on_event=on_event)
    if json_out:
        typer.echo(json.dumps(display.walkforward_json(result), sort_keys=True, default=str))
        return
    display.walkforward_summary(result)
