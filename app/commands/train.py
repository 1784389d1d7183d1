"""`podracer train --algo ppo|sac|direct --config FILE [--run NAME] [--steps N] [--json]`: one agent, or with
``--tournament`` a pool of pods (see ``app.workflows.training``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from app import context
from app.settings_docs import cli_help
from data.errors import ConfigError

#: The scope of the flags only a tournament reads (a single run refuses them).
TOURNAMENT = "Tournament: "


def _tournament_overrides(given: dict[str, Any]) -> dict[str, Any]:
    """The ``[tournament]`` fields set on the command line (``given``: field -> value, None = not
    given), as the section's own field names. One budget given alone replaces both."""
    overrides = {name: value for name, value in given.items() if value is not None}
    for one, other in (("budget_steps", "budget_minutes"), ("budget_minutes", "budget_steps")):
        if one in overrides and other not in overrides:
            overrides[other] = None
    return overrides


def _as_flags(fields: dict[str, Any]) -> dict[str, Any]:
    """``{field: value}`` named as the command line spells them (``envs_per_pod`` -> ``--envs-per-pod``),
    for the one-line refusal of a flag the run would not read."""
    return {"--" + name.replace("_", "-"): value for name, value in fields.items()}


def _tournament_command(
    config: Path | None,
    run: str | None,
    resume: str | None,
    overrides: dict[str, Any],
    agent: dict[str, Any],
    json_out: bool,
) -> None:
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app import render
    from app.config import load_config, load_run_config
    from app.workflows.training import check_backend_flags, stored_config_path, train_tournament

    if resume is not None and config is not None:
        raise ConfigError("--resume uses the run's own config.toml: drop --config")
    cfg = (
        load_run_config(stored_config_path(context.home(), resume))
        if resume is not None
        else load_config(config)
    )
    if overrides:
        cfg = cfg.with_updates(tournament=overrides)
    if agent:
        cfg = cfg.with_updates(agent=agent)
    check_backend_flags(cfg, overrides)
    progress = render.TournamentLive.factory(enabled=not json_out)
    result = train_tournament(cfg, context.home(), run=run, resume=resume, progress=progress)
    if json_out:
        champion = result.champion or {}
        out = {
            "run_id": result.run_id,
            "run_dir": str(result.run_dir),
            "champion": {"pod_id": champion.get("pod_id"), "score": champion.get("score")},
            "pods_tried": result.pods_tried,
            "pods_failed": result.pods_failed,
            "env_steps": result.env_steps,
        }
        typer.echo(json.dumps(out, sort_keys=True))
        return
    context.console.print(render.tournament_line(result), highlight=False)


def train(
    algo: str = typer.Option(None, "--algo", help="ppo, sac or direct \\[default: the config's agent.algo]."),
    config: Path = typer.Option(None, "--config", help="TOML config file \\[default: built-in defaults]."),
    run: str = typer.Option(None, "--run", help="Run name \\[default: <UTC time>-<algo>]."),
    steps: int = typer.Option(None, "--steps", min=1, help=cli_help("agent.total_steps")),
    json_out: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
    threads: int = typer.Option(
        None, "--threads", min=1, help="torch intra-op threads \\[default: torch's]; 1 is best on a busy CPU."
    ),
    tournament: bool = typer.Option(False, "--tournament", help="Run a podracer tournament of many pods."),
    pods: int = typer.Option(None, "--pods", min=1, help=cli_help("tournament.pods", TOURNAMENT)),
    budget_steps: int = typer.Option(
        None, "--budget-steps", min=1, help=cli_help("tournament.budget_steps", TOURNAMENT)
    ),
    budget_minutes: float = typer.Option(
        None, "--budget-minutes", min=0.0, help=cli_help("tournament.budget_minutes", TOURNAMENT)
    ),
    backend: str = typer.Option(None, "--backend", help=cli_help("tournament.backend", TOURNAMENT)),
    workers: int = typer.Option(None, "--workers", min=0, help=cli_help("tournament.workers", TOURNAMENT)),
    address: str = typer.Option(None, "--address", help=cli_help("tournament.address", TOURNAMENT)),
    envs_per_pod: int = typer.Option(
        None, "--envs-per-pod", min=1, help=cli_help("tournament.envs_per_pod", TOURNAMENT)
    ),
    resume: str = typer.Option(None, "--resume", help="Tournament: continue the run RUN after a stop."),
) -> None:
    """Train one agent, or with --tournament a pool of pods; scored on the validation window."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    import torch

    from app import render
    from app.config import load_config
    from app.workflows.training import refuse_unused, train_single

    # Each option is the [tournament] field of its name: Config.tournament -> TournamentArgs
    # (app.config.to_tournament_args) -> run_tournament.
    given = {
        "pods": pods,
        "budget_steps": budget_steps,
        "budget_minutes": budget_minutes,
        "backend": backend,
        "workers": workers,
        "address": address,
        "envs_per_pod": envs_per_pod,
    }
    if tournament or resume is not None:
        refuse_unused({"--threads": threads, "--steps": steps}, "a single run (drop --tournament)")
        overrides = _tournament_overrides(given)
        agent = {"algo": algo} if algo is not None else {}
        _tournament_command(config, run, resume, overrides, agent, json_out)
        return
    refuse_unused(_as_flags(given), "a tournament (add --tournament)")
    if threads is not None:
        # Small per-op tensors: on a loaded machine extra intra-op threads mostly wait on each other.
        torch.set_num_threads(threads)
    cfg = load_config(config)
    updates: dict[str, Any] = {}
    if algo is not None:
        if algo not in ("ppo", "sac", "direct"):
            raise ConfigError(f"--algo {algo!r}: choose ppo, sac or direct")
        updates["algo"] = algo
    if steps is not None:
        updates["total_steps"] = steps
    if updates:
        cfg = cfg.with_updates(agent=updates)
    summary = train_single(cfg, context.home(), run=run, progress=render.TrainProgress.factory(not json_out))
    if json_out:
        typer.echo(json.dumps(summary, default=str, sort_keys=True))
        return
    context.console.print(render.single_run_line(summary), highlight=False)
