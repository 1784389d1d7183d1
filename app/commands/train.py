"""`podracer train --algo ppo|sac --config FILE [--run NAME] [--steps N] [--json]`: one agent, or with
``--tournament`` a pool of pods (see ``app.workflows.training``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from app import context
from data.errors import ConfigError


def _tournament_overrides(
    pods: int | None,
    budget_steps: int | None,
    budget_minutes: float | None,
    backend: str | None,
    workers: int | None,
    address: str | None,
    envs_per_pod: int | None = None,
) -> dict[str, Any]:
    """``[tournament]`` fields set on the command line. One budget given alone replaces both."""
    given = {
        "pods": pods,
        "envs_per_pod": envs_per_pod,
        "budget_steps": budget_steps,
        "budget_minutes": budget_minutes,
        "backend": backend,
        "workers": workers,
        "address": address,
    }
    overrides = {k: v for k, v in given.items() if v is not None}
    if budget_steps is not None and budget_minutes is None:
        overrides["budget_minutes"] = None
    if budget_minutes is not None and budget_steps is None:
        overrides["budget_steps"] = None
    return overrides


def _refuse_unused(given: dict[str, Any], applies_to: str) -> None:
    """One line for flags the chosen kind of run would not read (none is silently ignored)."""
    unused = [flag for flag, value in given.items() if value is not None]
    if unused:
        raise ConfigError(f"{', '.join(unused)}: only for {applies_to}")


def _check_backend_flags(cfg: Any, overrides: dict[str, Any]) -> None:
    """Refuse a tournament flag the run's backend would not read (the config's own settings are
    checked when the backend is built: ``agents.tournament.backend_choice.check_settings``)."""
    from agents.tournament.backend_choice import resolve_backend

    chosen = resolve_backend(cfg.tournament.backend, cfg.agent.device, cfg.agent.algo)
    if "workers" in overrides and chosen == "ray":
        raise ConfigError("--workers: the ray backend sizes its pool from the cluster's resources; drop it")


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
    from app.config import load_config
    from app.workflows.training import stored_config_path, train_tournament

    if resume is not None and config is not None:
        raise ConfigError("--resume uses the run's own config.toml: drop --config")
    cfg = load_config(stored_config_path(context.home(), resume) if resume is not None else config)
    if overrides:
        cfg = cfg.with_updates(tournament=overrides)
    if agent:
        cfg = cfg.with_updates(agent=agent)
    _check_backend_flags(cfg, overrides)
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
    algo: str = typer.Option(None, "--algo", help="ppo or sac \\[default: the config's agent.algo]."),
    config: Path = typer.Option(None, "--config", help="TOML config file \\[default: built-in defaults]."),
    run: str = typer.Option(None, "--run", help="Run name \\[default: <UTC time>-<algo>]."),
    steps: int = typer.Option(
        None, "--steps", min=1, help="Env-steps to train \\[default: agent.total_steps]."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
    threads: int = typer.Option(
        None, "--threads", min=1, help="torch intra-op threads \\[default: torch's]; 1 is best on a busy CPU."
    ),
    tournament: bool = typer.Option(False, "--tournament", help="Run a podracer tournament of many pods."),
    pods: int = typer.Option(
        None,
        "--pods",
        min=1,
        help="Tournament: pods training at once; population backend: the population size \\[tournament.pods].",
    ),
    budget_steps: int = typer.Option(None, "--budget-steps", min=1, help="Tournament: total env-steps."),
    budget_minutes: float = typer.Option(None, "--budget-minutes", min=0.0, help="Tournament: wall time."),
    backend: str = typer.Option(
        None, "--backend", help="Tournament: auto, local, ray or population \\[tournament.backend]."
    ),
    workers: int = typer.Option(
        None, "--workers", min=0, help="Tournament, local and population: processes (0 = inline)."
    ),
    address: str = typer.Option(
        None, "--address", help="Tournament, ray and population: address of a Ray cluster."
    ),
    envs_per_pod: int = typer.Option(
        None,
        "--envs-per-pod",
        min=1,
        help="Tournament, population: envs per pod \\[tournament.envs_per_pod; default: chosen].",
    ),
    resume: str = typer.Option(None, "--resume", help="Tournament: continue the run RUN after a stop."),
) -> None:
    """Train one agent, or with --tournament a pool of pods; scored on the validation window."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    import torch

    from app import render
    from app.config import load_config
    from app.workflows.training import train_single

    given = {
        "--pods": pods,
        "--budget-steps": budget_steps,
        "--budget-minutes": budget_minutes,
        "--backend": backend,
        "--workers": workers,
        "--address": address,
        "--envs-per-pod": envs_per_pod,
    }
    if tournament or resume is not None:
        _refuse_unused({"--threads": threads, "--steps": steps}, "a single run (drop --tournament)")
        overrides = _tournament_overrides(
            pods, budget_steps, budget_minutes, backend, workers, address, envs_per_pod
        )
        agent = {"algo": algo} if algo is not None else {}
        _tournament_command(config, run, resume, overrides, agent, json_out)
        return
    _refuse_unused(given, "a tournament (add --tournament)")
    if threads is not None:
        # Small per-op tensors: on a loaded machine extra intra-op threads mostly wait on each other.
        torch.set_num_threads(threads)
    cfg = load_config(config)
    updates: dict[str, Any] = {}
    if algo is not None:
        if algo not in ("ppo", "sac"):
            raise ConfigError(f"--algo {algo!r}: choose ppo or sac")
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
