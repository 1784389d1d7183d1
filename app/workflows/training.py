"""Training workflows: one agent (:func:`train_single`) or a podracer tournament (:func:`train_tournament`).

A single run trains on the TRAIN window, evaluates the deterministic policy on the VALID window every
``agent.eval_every`` env-steps (validation Sharpe, total log return vs buy-and-hold), and never touches
the test window. It writes, in its :class:`~app.runs.RunDir`: ``config.toml`` (the resolved config,
seeds included), the run record, ``pods/single/`` (``policy.safetensors``, ``spec.json``,
``optimizer.safetensors``, ``optimizer.json``, ``curve.parquet``) and ``champion/`` (the same policy).

A tournament gets the train and valid windows only; the test window's dates are recorded (for the
backtest), its bars are never passed on. After it, ``app.ensemble.ensemble_step`` builds the ensemble of the
leaderboard's top ``tournament.ensemble_size`` pods (``agents.ensemble``), scores it on the validation
window exactly like a pod, counts it as one more trial, saves it to ``<run>/ensemble/`` and, with
``tournament.champion = "ensemble"``, makes it the champion (``<run>/champion/``); then a direct
champion that is its start is refitted on the train and validation windows (``app.refit``).

Nothing here prints: progress displays are passed in (``app.render`` has the CLI's).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from agents import direct, ppo, sac
from agents.checkpoint import Checkpoint
from agents.tournament.backend_choice import check_backend_args, resolve_backend
from agents.tournament.orchestrator import TournamentResult, run_tournament
from agents.training import Event, TrainResult
from agents.validation import validation_score_fn
from app.config import (
    Config,
    config_to_toml,
    to_env_params,
    to_learner_args,
    to_tournament_args,
    write_config,
)
from app.evaluation import MIN_VALID_SESSIONS
from app.refit import after_tournament
from app.runs import RunDir, new_id
from data.errors import ConfigError
from data.loader import MarketSplits, load_market
from envs.vec_env import TradingVecEnv

SINGLE_POD = "single"
# A progress display of a single run: given the env-step total, a context that yields the learner callback
# (an agents.training.Callback: True continues training).
TrainProgressFactory = Callable[[int], AbstractContextManager[Callable[[Event], bool]]]
# A progress display of a tournament: a context that yields the orchestrator's snapshot callback.
TournamentProgress = Callable[[], AbstractContextManager[Callable[[Event], None] | None]]


def _no_progress(total: int) -> AbstractContextManager[Callable[[Event], bool]]:
    return nullcontext(lambda event: True)


def check_valid_sessions(splits: MarketSplits, config: Config) -> None:
    """A one-line ConfigError when the validation window has fewer than :data:`MIN_VALID_SESSIONS`."""
    have = splits.valid.num_sessions
    if have >= MIN_VALID_SESSIONS:
        return
    data = config.data
    total = splits.full.num_sessions
    # Sessions needed in all for the valid window to reach the minimum at the current valid_frac
    # (the split rounds: data.market.MarketData.split_sessions).
    needed_total = next(n for n in range(1, 100_000) if round(n * data.valid_frac) >= MIN_VALID_SESSIONS)
    hint = (
        f"set [data] num_sessions >= {max(needed_total, total + 1)}"
        if data.source == "synthetic"
        else f"load at least {needed_total} sessions of bars"
    )
    raise ConfigError(
        f"the validation window has {have} session(s) ({total} in all x valid_frac {data.valid_frac:.3g}); "
        f"at least {MIN_VALID_SESSIONS} are needed to rank pods by a validation Sharpe: {hint}, "
        f"or raise [data] valid_frac"
    )


def _started_record(run_dir: RunDir, config: Config, splits: MarketSplits) -> dict[str, Any]:
    """The record of a single-agent run as it starts: what it trains on, with which seeds."""
    agent = config.agent
    return {
        "run_id": run_dir.run_id,
        "kind": "single",
        "algo": agent.algo,
        "status": "running",
        "seed": agent.seed,
        "seeds": {"agent": agent.seed, "data": config.data.seed},
        "windows": {name: list(dates) for name, dates in splits.windows().items()},
        "tickers": list(splits.train.tickers),
        "feature_spec": splits.full.feature_spec,
        # The backtest annualizes with what the run was trained and selected with, not today's config.
        "annualization": config.backtest.annualization,
        "started": time.time(),
    }


def _finished_fields(result: TrainResult, run_dir: RunDir) -> dict[str, Any]:
    """What a finished single-agent run adds to its record: its steps and its last validation."""
    final_eval = {k.removeprefix("eval/"): v for k, v in result.history[-1].items() if k.startswith("eval/")}
    sharpe = final_eval.get("sharpe")
    return {
        "status": "done",
        "env_steps": result.env_steps,
        "updates": result.updates,
        "stopped_by_callback": result.stopped_by_callback,
        "pods_tried": 1,
        # None when undefined (all cash): a trial with no Sharpe, never a Sharpe of 0.
        "trial_sharpes": [sharpe],
        "champion": {"pod_id": SINGLE_POD, "score": final_eval.get("score"), "sharpe_ratio": sharpe},
        "valid": final_eval,
        "finished": time.time(),
        "run_dir": str(run_dir.path),
    }


def train_single(
    config: Config,
    home: str | Path,
    *,
    run: str | None = None,
    progress: TrainProgressFactory | None = None,
    callbacks: Iterable[Callable[[Event], bool]] = (),
    splits: MarketSplits | None = None,
) -> dict[str, Any]:
    """Train one agent as configured and save the run; returns the run summary (also its record).

    ``splits`` (a ``data.loader.MarketSplits``) skips loading the market (tests, the tournament).
    """
    agent = config.agent
    run_dir = RunDir(home, new_id(run, agent.algo))
    if run_dir.has_record() and run_dir.status() != "failed":
        raise ConfigError(f"run {run_dir.run_id!r} already exists at {run_dir.path} (choose another --run)")
    device = torch.device(agent.device)
    splits = load_market(config.data, home=home, device=device) if splits is None else splits.to(device)
    check_valid_sessions(splits, config)
    params = to_env_params(config.env)
    args = to_learner_args(config)
    env = TradingVecEnv(
        splits.train,
        params,
        num_envs=config.env.num_envs,
        device=device,
        seed=agent.seed,
        fast_step=config.env.fast_step,
    )
    eval_fn = validation_score_fn(splits.valid, params, annualization=config.backtest.annualization)

    run_dir.path.mkdir(parents=True, exist_ok=True)
    write_config(config, run_dir.config)
    info = _started_record(run_dir, config, splits)
    run_dir.write(info)

    # Looked up now: tests patch the modules.
    learn = {"ppo": ppo.train, "sac": sac.train, "direct": direct.train}[agent.algo]
    try:
        with (progress or _no_progress)(args.total_steps) as on_event:
            result = learn(args, env, callbacks=(on_event, *callbacks), eval_fn=eval_fn)
    except BaseException as err:  # record the failure (Ctrl-C included), then let it propagate
        info.update({"status": "failed", "error": f"{type(err).__name__}: {err}", "finished": time.time()})
        run_dir.write(info)
        raise

    Checkpoint(result.policy, result.optimizer_state).save(run_dir.pod(SINGLE_POD))
    result.save_curve(run_dir.curve(SINGLE_POD))
    result.policy.save(run_dir.champion)
    info.update(_finished_fields(result, run_dir))
    run_dir.write(info)
    return info


def stored_config_path(home: str | Path, resume: str) -> Path:
    """The ``config.toml`` of the tournament ``resume`` (``--resume`` reads the run's own config)."""
    stored = RunDir(home, new_id(resume, "tournament")).config
    if not stored.is_file():
        raise ConfigError(f"--resume {resume!r}: no {stored.name} at {stored.parent}")
    return stored


def refuse_unused(given: dict[str, Any], applies_to: str) -> None:
    """One line for flags the chosen kind of run would not read (none is silently ignored)."""
    unused = [flag for flag, value in given.items() if value is not None]
    if unused:
        raise ConfigError(f"{', '.join(unused)}: only for {applies_to}")


def check_backend_flags(cfg: Any, overrides: dict[str, Any]) -> None:
    """Refuse a tournament flag the run's backend would not read (the config's own settings are
    checked when the backend is built: ``agents.tournament.backend_choice.check_settings``)."""
    chosen = resolve_backend(cfg.tournament.backend, cfg.agent.device, cfg.agent.algo)
    if "workers" in overrides and chosen == "ray":
        raise ConfigError("--workers: the ray backend sizes its pool from the cluster's resources; drop it")


def train_tournament(
    config: Config,
    home: str | Path,
    *,
    run: str | None = None,
    resume: str | None = None,
    progress: TournamentProgress | None = None,
    splits: MarketSplits | None = None,
    backend: Any = None,
) -> TournamentResult:
    """Run (or ``resume``) a podracer tournament as configured; returns the orchestrator's result."""
    if resume is not None:
        run_dir = RunDir(home, new_id(resume, "tournament"))
        if not run_dir.leaderboard.is_file():
            raise ConfigError(f"--resume {resume!r}: no tournament at {run_dir.path}")
    else:
        run_dir = RunDir(home, new_id(run, "tournament"))
        if run_dir.path.exists():
            raise ConfigError(
                f"run {run_dir.run_id!r} already exists at {run_dir.path} (choose another --run)"
            )
    device = torch.device(config.agent.device)
    args = to_tournament_args(config)
    if backend is None:
        check_backend_args(args, device)  # (a setting the backend would not use: before any file)
    splits = load_market(config.data, home=home, device=device) if splits is None else splits.to(device)
    check_valid_sessions(splits, config)
    if resume is not None:  # (an earlier session's start look: counted again only if the refit looks again)
        shutil.rmtree(run_dir.champion_start, ignore_errors=True)
    else:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.write(
            {
                "run_id": run_dir.run_id,
                "kind": "tournament",
                "algo": config.agent.algo,
                "status": "running",
                "seeds": {"tournament": config.tournament.seed, "data": config.data.seed},
                "windows": {name: list(dates) for name, dates in splits.windows().items()},
                "feature_spec": splits.full.feature_spec,
                "annualization": config.backtest.annualization,
                "started": time.time(),
            }
        )
    with (progress or _no_live)() as on_progress:
        result = run_tournament(
            run_dir.path,
            splits.train,
            splits.valid,
            args=args,
            env=config.env.model_dump(),
            agent=config.agent.model_dump(),
            device=str(device),
            annualization=config.backtest.annualization,
            config_toml=config_to_toml(config),
            resume=resume is not None,
            backend=backend,
            on_progress=on_progress,
            on_status=run_dir.on_status,
        )
    return after_tournament(run_dir, result, splits.train, splits.valid, config, device=device)


def _no_live() -> AbstractContextManager[None]:
    return nullcontext(None)
