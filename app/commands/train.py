"""`podracer train --algo ppo|sac --config FILE [--run NAME] [--steps N] [--json]`: one agent.

The single-agent path lives in :func:`train_single` so the tournament branch of this command can call
around it. A run trains on the TRAIN window, evaluates the deterministic policy on the VALID window
every ``agent.eval_every`` env-steps (validation Sharpe, total log return vs buy-and-hold), and never
touches the test window. It writes, under ``<home>/runs/<run>/``:

- ``config.toml`` (the resolved config, seeds included) and ``run.json``;
- ``pods/single/`` (``policy.safetensors``, ``spec.json``, ``optimizer.safetensors``,
  ``optimizer.json``, ``curve.parquet``) and ``champion/`` (the same policy).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import typer

from app import context
from data.errors import ConfigError

SINGLE_POD = "single"
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def env_params_from_config(env_config: Any) -> Any:
    """``envs.trading.EnvParams`` from the config's ``[env]`` section (``num_envs`` is not a param)."""
    from envs.trading import EnvParams

    names = {f.name for f in dataclasses.fields(EnvParams)}
    return EnvParams(**{k: v for k, v in env_config.model_dump().items() if k in names})


def learner_args(config: Any) -> Any:
    """``PPOArgs`` or ``SACArgs`` from the ``[agent]`` section (fields matched by name)."""
    agent = config.agent
    if agent.algo == "ppo":
        from agents.ppo import PPOArgs as Args
    else:
        from agents.sac import SACArgs as Args
    names = {f.name for f in dataclasses.fields(Args)}
    return Args(**{k: v for k, v in agent.model_dump().items() if k in names})


def _run_id(run: str | None, algo: str) -> str:
    if run is None:
        return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{algo}"
    if not _RUN_NAME.match(run):
        raise ConfigError(f"--run {run!r}: use letters, digits, '.', '_' or '-' (at most 128)")
    return run


def _run_status(run_dir: Path) -> str | None:
    """The ``status`` in a run's run.json (None when unreadable): a failed run may be redone."""
    try:
        return json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def train_single(
    config: Any,
    home: str | Path,
    *,
    run: str | None = None,
    progress: bool = True,
    callbacks: Iterable[Callable[[dict[str, Any]], bool]] = (),
    splits: Any = None,
) -> dict[str, Any]:
    """Train one agent as configured and save the run; returns the run summary (also in run.json).

    ``splits`` (a ``data.loader.MarketSplits``) skips loading the market (tests, the tournament).
    """
    import torch

    from agents.evaluate import validation_eval_fn
    from agents.policy import Checkpoint
    from app.config import write_config
    from data.atomic import atomic_write_json
    from envs.vec_env import TradingVecEnv

    agent = config.agent
    run_id = _run_id(run, agent.algo)
    run_dir = Path(home) / "runs" / run_id
    if (run_dir / "run.json").exists() and _run_status(run_dir) != "failed":
        raise ConfigError(f"run {run_id!r} already exists at {run_dir} (choose another --run)")
    device = torch.device(agent.device)
    if splits is None:
        from data.loader import load_market

        splits = load_market(config.data, home=home, device=device)
    else:
        splits = splits.to(device)
    params = env_params_from_config(config.env)
    args = learner_args(config)
    env = TradingVecEnv(
        splits.train,
        params,
        num_envs=config.env.num_envs,
        device=device,
        seed=agent.seed,
        compile=config.env.compile,
    )
    eval_fn = validation_eval_fn(splits.valid, params, annualization=config.backtest.annualization)

    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(config, run_dir / "config.toml")
    windows = {name: list(dates) for name, dates in splits.windows().items()}
    info: dict[str, Any] = {
        "run_id": run_id,
        "kind": "single",
        "algo": agent.algo,
        "status": "running",
        "seed": agent.seed,
        "seeds": {"agent": agent.seed, "data": config.data.seed},
        "windows": windows,
        "tickers": list(splits.train.tickers),
        "feature_spec": splits.full.feature_spec,
        "started": time.time(),
    }
    atomic_write_json(run_dir / "run.json", info)

    if agent.algo == "ppo":
        from agents.ppo import train as learn
    else:
        from agents.sac import train as learn
    try:
        with _ProgressBar(args.total_steps, enabled=progress) as on_event:
            result = learn(args, env, callbacks=(on_event, *callbacks), eval_fn=eval_fn)
    except BaseException as err:  # record the failure (Ctrl-C included), then let it propagate
        info.update({"status": "failed", "error": f"{type(err).__name__}: {err}", "finished": time.time()})
        atomic_write_json(run_dir / "run.json", info)
        raise

    pod_dir = run_dir / "pods" / SINGLE_POD
    Checkpoint(result.policy, result.optimizer_state).save(pod_dir)
    result.save_curve(pod_dir / "curve.parquet")
    result.policy.save(run_dir / "champion")
    final_eval = {k.removeprefix("eval/"): v for k, v in result.history[-1].items() if k.startswith("eval/")}
    info.update(
        {
            "status": "done",
            "env_steps": result.env_steps,
            "updates": result.updates,
            "stopped_by_callback": result.stopped_by_callback,
            "pods_tried": 1,
            "trial_sharpes": [final_eval.get("sharpe", 0.0)],
            "champion": {"pod_id": SINGLE_POD, "score": final_eval.get("score"), "metrics": final_eval},
            "valid": final_eval,
            "finished": time.time(),
            "run_dir": str(run_dir),
        }
    )
    atomic_write_json(run_dir / "run.json", info)
    return info


class _ProgressBar:
    """A rich progress bar fed by the learner's callback events (env-steps/s, latest eval score)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.progress: Any = None

    def __enter__(self) -> Callable[[dict[str, Any]], bool]:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("env-steps · {task.fields[rate]} steps/s · valid {task.fields[score]}"),
                TimeElapsedColumn(),
                console=context.err_console,
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task("train", total=self.total, rate="-", score="-")
        return self.on_event

    def on_event(self, event: dict[str, Any]) -> bool:
        if self.progress is None or event.get("event") != "update":
            return False
        fields: dict[str, Any] = {"rate": f"{event.get('charts/steps_per_s', 0.0):,.0f}"}
        if "eval/score" in event:
            fields["score"] = (
                f"sharpe {event['eval/score']:.2f}, log-ret {event.get('eval/log_return', float('nan')):+.4f} "
                f"(b&h {event.get('eval/buy_and_hold_log_return', float('nan')):+.4f})"
            )
        self.progress.update(self.task, completed=min(self.total, int(event["env_steps"])), **fields)
        return False

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


# --- `podracer train --tournament` (issue 5) ------------------------------------------------------
def tournament_args_from_config(config: Any) -> Any:
    """``TournamentArgs`` from the ``[tournament]`` section (the learner from ``agent.algo``)."""
    from agents.tournament.orchestrator import TournamentArgs

    return TournamentArgs.from_mapping({**config.tournament.model_dump(), "algo": config.agent.algo})


def train_tournament(
    config: Any,
    home: str | Path,
    *,
    run: str | None = None,
    resume: str | None = None,
    progress: bool = True,
    splits: Any = None,
    backend: Any = None,
) -> dict[str, Any]:
    """Run (or ``resume``) a podracer tournament as configured; returns the run summary.

    The tournament gets the train and valid windows only; the test window's dates are recorded in
    run.json (for the backtest), its bars are never passed on. ``splits`` skips loading the market.
    """
    import torch

    from agents.tournament.orchestrator import run_tournament
    from app.config import config_to_toml
    from data.atomic import atomic_write_json

    if resume is not None:
        run_id = _run_id(resume, "tournament")
        run_dir = Path(home) / "runs" / run_id
        if not (run_dir / "leaderboard.sqlite").is_file():
            raise ConfigError(f"--resume {resume!r}: no tournament at {run_dir}")
    else:
        run_id = _run_id(run, "tournament")
        run_dir = Path(home) / "runs" / run_id
        if run_dir.exists():
            raise ConfigError(f"run {run_id!r} already exists at {run_dir} (choose another --run)")
    device = torch.device(config.agent.device)
    if splits is None:
        from data.loader import load_market

        splits = load_market(config.data, home=home, device=device)
    else:
        splits = splits.to(device)
    if resume is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            run_dir / "run.json",
            {
                "run_id": run_id,
                "kind": "tournament",
                "algo": config.agent.algo,
                "status": "running",
                "seeds": {"tournament": config.tournament.seed, "data": config.data.seed},
                "windows": {name: list(dates) for name, dates in splits.windows().items()},
                "feature_spec": splits.full.feature_spec,
                "started": time.time(),
            },
        )
    args = tournament_args_from_config(config)
    with _tournament_live(enabled=progress) as on_progress:
        result = run_tournament(
            run_dir,
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
        )
    return {
        "run_id": result.run_id,
        "run_dir": str(result.run_dir),
        "champion": result.champion,
        "pods_tried": result.pods_tried,
        "pods_failed": result.pods_failed,
        "env_steps": result.env_steps,
    }


class _tournament_live:
    """A rich live view of the pool and the leaderboard, fed by the orchestrator's snapshots."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.live: Any = None

    def __enter__(self) -> Callable[[dict[str, Any]], None] | None:
        if not self.enabled:
            return None
        from rich.live import Live

        self.live = Live(console=context.err_console, refresh_per_second=2, transient=False)
        self.live.start()
        return self.update

    def update(self, snap: dict[str, Any]) -> None:
        self.live.update(render_tournament(snap))

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()


def render_tournament(snap: dict[str, Any]) -> Any:
    """The live view of one orchestrator snapshot: budget line, pool table, leaderboard table."""
    from rich.console import Group
    from rich.table import Table

    spent, budget = snap["env_steps_spent"], snap.get("budget_steps")
    wall, budget_s = snap["wall_s"], snap.get("budget_s")
    line = f"[bold]tournament {snap['run_id']}[/]  env-steps {spent:,}" + (f" / {budget:,}" if budget else "")
    line += f"  ·  {wall:,.0f} s" + (f" / {budget_s:,.0f} s" if budget_s else "")
    line += f"  ·  pods started {snap['pods_started']}"
    pool = Table(title="pool", title_justify="left", expand=False)
    for col in ("pod", "parent", "gen", "learning rate", "round steps", "running"):
        pool.add_column(col)
    for pod in snap["in_flight"]:
        lr = pod["hparams"].get("learning_rate")
        pool.add_row(
            pod["pod_id"],
            pod["parent_id"] or "fresh",
            str(pod["generation"]),
            f"{lr:.2e}" if lr is not None else "-",
            f"{pod['round_steps']:,}",
            f"{pod['running_s']:.0f} s",
        )
    board = Table(title="leaderboard", title_justify="left", expand=False)
    for col in ("rank", "pod", "parent", "gen", "score", "valid sharpe", "env-steps"):
        board.add_column(col)
    for entry in snap["leaderboard"]:
        sharpe = (entry.get("metrics") or {}).get("sharpe_ratio")
        board.add_row(
            str(entry["rank"]),
            entry["pod_id"],
            entry["parent_id"] or "fresh",
            str(entry["generation"]),
            f"{entry['score']:.3f}",
            "-" if sharpe is None else f"{sharpe:.3f}",
            f"{entry['env_steps']:,}",
        )
    return Group(line, pool, board)


def _tournament_overrides(
    pods: int | None,
    budget_steps: int | None,
    budget_minutes: float | None,
    backend: str | None,
    workers: int | None,
    address: str | None,
) -> dict[str, Any]:
    """``[tournament]`` fields set on the command line. One budget given alone replaces both."""
    given = {
        "pods": pods,
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


def _tournament_command(
    config: Path | None,
    run: str | None,
    resume: str | None,
    overrides: dict[str, Any],
    agent: dict[str, Any],
    json_out: bool,
) -> None:
    from app.config import load_config

    if resume is not None and config is not None:
        raise ConfigError("--resume uses the run's own config.toml: drop --config")

    if resume is not None:
        stored = Path(context.home()) / "runs" / _run_id(resume, "tournament") / "config.toml"
        if not stored.is_file():
            raise ConfigError(f"--resume {resume!r}: no config.toml at {stored.parent}")
        cfg = load_config(stored)
    else:
        cfg = load_config(config)
    if overrides:
        cfg = cfg.with_updates(tournament=overrides)
    if agent:
        cfg = cfg.with_updates(agent=agent)
    summary = train_tournament(cfg, context.home(), run=run, resume=resume, progress=not json_out)
    if json_out:
        champion = summary["champion"] or {}
        out = {
            "run_id": summary["run_id"],
            "run_dir": summary["run_dir"],
            "champion": {"pod_id": champion.get("pod_id"), "score": champion.get("score")},
            "pods_tried": summary["pods_tried"],
            "pods_failed": summary["pods_failed"],
            "env_steps": summary["env_steps"],
        }
        typer.echo(json.dumps(out, sort_keys=True))
        return
    champion = summary["champion"]
    best = (
        "no pod was scored"
        if champion is None
        else f"champion {champion['pod_id']} score {champion['score']:.3f}"
    )
    context.console.print(
        f"tournament {summary['run_id']}: {summary['pods_tried']} pods scored ({summary['pods_failed']} failed), "
        f"{summary['env_steps']:,} env-steps, {best}\n  saved {summary['run_dir']}",
        highlight=False,
    )


def train(
    algo: str = typer.Option(None, "--algo", help="ppo or sac [default: the config's agent.algo]."),
    config: Path = typer.Option(None, "--config", help="TOML config file [default: built-in defaults]."),
    run: str = typer.Option(None, "--run", help="Run name [default: <UTC time>-<algo>]."),
    steps: int = typer.Option(
        None, "--steps", min=1, help="Env-steps to train [default: agent.total_steps]."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
    threads: int = typer.Option(
        None, "--threads", min=1, help="torch intra-op threads [default: torch's]; 1 is best on a busy CPU."
    ),
    tournament: bool = typer.Option(False, "--tournament", help="Run a podracer tournament of many pods."),
    pods: int = typer.Option(None, "--pods", min=1, help="Tournament: pods in flight [tournament.pods]."),
    budget_steps: int = typer.Option(None, "--budget-steps", min=1, help="Tournament: total env-steps."),
    budget_minutes: float = typer.Option(None, "--budget-minutes", min=0.0, help="Tournament: wall time."),
    backend: str = typer.Option(None, "--backend", help="Tournament: local or ray [tournament.backend]."),
    workers: int = typer.Option(None, "--workers", min=0, help="Tournament, local: processes (0 = inline)."),
    address: str = typer.Option(None, "--address", help="Tournament, ray: address of an existing cluster."),
    resume: str = typer.Option(None, "--resume", help="Tournament: continue the run RUN after a stop."),
) -> None:
    """Train one agent, or with --tournament a pool of pods; scored on the validation window."""
    from app.config import load_config

    if tournament or resume is not None:
        overrides = _tournament_overrides(pods, budget_steps, budget_minutes, backend, workers, address)
        agent = {"algo": algo} if algo is not None else {}
        _tournament_command(config, run, resume, overrides, agent, json_out)
        return
    if threads is not None:
        import torch

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
    summary = train_single(cfg, context.home(), run=run, progress=not json_out)
    if json_out:
        typer.echo(json.dumps(summary, default=str, sort_keys=True))
        return
    valid = summary["valid"]
    context.console.print(
        f"run {summary['run_id']}: {summary['env_steps']:,} env-steps, valid Sharpe {valid.get('sharpe', 0):.2f}, "
        f"log return {valid.get('log_return', 0):+.4f} vs buy-and-hold "
        f"{valid.get('buy_and_hold_log_return', 0):+.4f}\n  saved {summary['run_dir']}",
        highlight=False,
    )
