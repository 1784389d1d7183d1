"""The demo pipeline, offline: data -> tournament -> backtest -> summary.

1. data: a synthetic NASDAQ-100-like universe (planted signal on by default) written to the store,
   or the shipped real minute sample (``data_source="real-sample"``);
2. tournament: pods trained on the train window and scored on the validation window, sized to the
   machine (CPU cores; a GPU if present), within a wall-time budget;
3. backtest: the champion vs buy-and-hold (and cash) on the held-out test window, which the
   tournament never saw; report files, tear sheet, the out-of-sample verdict after the looks counted.

Stage messages go to the ``say`` callback and long steps run inside ``status`` (the CLI shows them
on stderr); the summary table is the caller's (``app.render``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from agents.tournament.backend_choice import resolve_backend
from app.config import Config, load_config
from app.runs import RunDir
from app.workflows.backtest import backtest_run
from app.workflows.training import TournamentProgress, train_tournament
from backtests.metrics_model import StrategyMetrics
from data.errors import ConfigError
from data.loader import load_market

# Presets: "default" is what `make demo` runs; "test" is the shortened demo CI runs end to end.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        # 243 sessions split 72 / 45 / 126: a test window of half a year. The verdict's out-of-sample
        # test needs it: over a quarter (63 sessions) a PSR of 0.95 needs an annualized Sharpe of about
        # 3.3, more than a champion of a 6-minute budget on a slow 2-core machine reaches; over 126
        # sessions about 2.3 (docs/benchmarks.md, Demo results). A 45-session validation window;
        # 9.5M minute bars in all, inside the 10-minute budget.
        # Planted minute momentum at a daily rank IC of 0.05, a good real factor's (0.02-0.05; the
        # generator's signal 0.42 is 0.18: docs/data.md Planted shapes), on the
        # library's 26 features. Seeds 0 and 1 read "significant" (champion test Sharpe 1.6 / 1.8,
        # the ridge traded its own way -0.3 / -0.1, buy-and-hold 0.2 / 0.9), and the control,
        # --signal 0, does not (docs/benchmarks.md, The demo at a real factor's strength). The power
        # table finds this cell on about two thirds of markets, so another seed may read "not
        # significant". --signal 0.42 plants the stronger level, --signal 0 nothing.
        "data": {
            "num_tickers": 100,
            "num_sessions": 243,
            "train_frac": 72 / 243,
            "valid_frac": 45 / 243,
            "shape": "minute_momentum",
            "target_ic": 0.05,
            "features": "library",
        },
        "env": {"num_envs": 256},
        # Direct pods (agents.direct): started from the ridge of the train window and fine-tuned by
        # the gradient of the net excess Sharpe, they find what the linear baseline finds at the
        # broker profile's costs (docs/agents.md, docs/benchmarks.md Power table); on the local backend.
        "agent": {"algo": "direct"},
        "tournament": {"pods": 4, "leaderboard_size": 8, "round_steps": 250_000},
        "minutes": 6.0,
    },
    "test": {
        # 20 sessions split 5 / 10 / 5: the validation window needs 10 sessions
        # (training.MIN_VALID_SESSIONS); fewer train sessions keep the data step as small as before.
        "data": {"num_tickers": 8, "num_sessions": 20, "train_frac": 0.25, "valid_frac": 0.5},
        "env": {"num_envs": 32, "episode_len": 64},
        "agent": {"algo": "direct", "batch_paths": 16, "horizon": 8},  # the default preset's learner
        "tournament": {"pods": 2, "leaderboard_size": 4, "round_steps": 4_096, "budget_steps": 12_288},
        "minutes": None,
    },
}


def machine() -> dict[str, Any]:
    """CPU cores available to this process, and the GPU if there is one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    gpu = torch.cuda.is_available()
    return {
        "cores": cores,
        "device": "cuda" if gpu else "cpu",
        "gpu": torch.cuda.get_device_name(0) if gpu else None,
    }


def build_config(
    preset: str,
    *,
    config_path: Path | None,
    data_source: str,
    signal: float | None,
    seed: int | None,
    minutes: float | None,
    workers: int | None,
    machine: dict[str, Any],
    target_ic: float | None = None,
) -> tuple[Config, dict[str, Any]]:
    """The demo's resolved config: preset, then the user's TOML, then the flags."""
    if preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r}: choose {', '.join(PRESETS)}")
    chosen = PRESETS[preset]
    base = load_config(config_path) if config_path is not None else Config()
    sections: dict[str, dict[str, Any]] = {k: dict(v) for k, v in chosen.items() if isinstance(v, dict)}
    if config_path is not None:
        sections = {}  # the user's file wins over the preset
    data = sections.setdefault("data", {})
    data["source"] = "synthetic" if data_source == "synthetic" else "real-sample"
    if signal is not None and target_ic is not None:
        raise ConfigError(
            "--signal and --target-ic are both set: choose one (a strength, or a daily rank IC)"
        )
    if signal is not None:
        data["signal"] = signal
        data["target_ic"] = None  # (an explicit strength replaces a planted IC of the preset or file)
    if target_ic is not None:
        data["target_ic"] = target_ic
    if seed is not None:
        data["seed"] = seed
        sections.setdefault("agent", {})["seed"] = seed
        sections.setdefault("tournament", {})["seed"] = seed
    tour = sections.setdefault("tournament", {})
    budget_minutes = minutes if minutes is not None else chosen["minutes"]
    if budget_minutes is not None:
        tour["budget_minutes"] = float(budget_minutes)
        tour["budget_steps"] = None
    # Size the pool to the machine: one worker process per core (two at least, so pods overlap).
    tour.setdefault("workers", workers if workers is not None else max(1, min(machine["cores"], 8)))
    if workers is not None:
        tour["workers"] = workers
    agent = sections.setdefault("agent", {})
    agent["device"] = machine["device"]
    backend = resolve_backend(
        tour.get("backend", base.tournament.backend), machine["device"], agent.get("algo", base.agent.algo)
    )
    if backend == "local":
        tour["pods"] = max(tour.get("pods") or base.tournament.pods or 1, max(1, tour["workers"]))
    else:
        tour.pop("pods", None)  # the preset's pool is the local backend's: a population sizes itself
    config = base.with_updates(**sections)
    return config, {"budget_minutes": budget_minutes}


def _planted(config: Config) -> str:
    """The planted level as the log line states it: a daily rank IC where one is set, else a strength."""
    data = config.data
    if data.target_ic is not None:
        return f"shape={data.shape} target_ic={data.target_ic:g}"
    return f"shape={data.shape} signal={data.signal:g}"


def _quiet(message: str) -> None:
    return None


def _no_status(message: str) -> AbstractContextManager[Any]:
    return nullcontext()


def run_demo(
    *,
    home: Path,
    preset: str = "default",
    config_path: Path | None = None,
    data_source: str = "synthetic",
    signal: float | None = None,
    target_ic: float | None = None,
    seed: int | None = None,
    minutes: float | None = None,
    workers: int | None = None,
    run: str | None = None,
    progress: TournamentProgress | None = None,
    say: Callable[[str], None] = _quiet,
    status: Callable[[str], AbstractContextManager[Any]] = _no_status,
) -> dict[str, Any]:
    """Run every stage; returns a summary dict (run id, timings, metrics of champion and benchmark)."""
    host = machine()
    config, extra = build_config(
        preset,
        config_path=config_path,
        data_source=data_source,
        signal=signal,
        seed=seed,
        minutes=minutes,
        workers=workers,
        machine=host,
        target_ic=target_ic,
    )
    run_id = run or time.strftime("demo-%Y%m%d-%H%M%S", time.gmtime())
    run_dir = RunDir(home, run_id)
    timings: dict[str, float] = {}
    say(
        f"[bold]podracer demo[/] home={home} run={run_id} preset={preset} data={config.data.source} "
        f"{_planted(config)} seed={config.data.seed}; machine: {host['cores']} cores, "
        f"device {host['device']}" + (f" ({host['gpu']})" if host["gpu"] else "")
    )

    splits = _data_stage(config, home, timings, say, status)
    summary = _tournament_stage(config, home, run_id, splits, extra, timings, progress, say)
    champion = summary.champion or {}
    t0 = time.perf_counter()
    with status("[3/3] backtest: champion vs buy-and-hold on the test window"):
        doc = backtest_run(run_id, home=home, window="test", splits=splits)
    timings["backtest_s"] = time.perf_counter() - t0
    say(f"[3/3] backtest: wrote {run_dir.backtest} [{timings['backtest_s']:.1f} s]")
    timings["total_s"] = sum(timings.values())
    return {
        "run_id": run_id,
        "run_dir": str(run_dir.path),
        "preset": preset,
        "machine": host,
        "seed": config.data.seed,
        "signal": config.data.signal,
        "target_ic": config.data.target_ic,
        "pods_tried": summary.pods_tried,
        "pods_failed": summary.pods_failed,
        "env_steps": summary.env_steps,
        "champion": champion,
        **_report_figures(doc),
        "timings": timings,
    }


def _report_figures(doc: Any) -> dict[str, Any]:
    """What the demo's summary holds of the test window's report."""
    none = StrategyMetrics()
    return {
        "window": {"start": doc.start, "end": doc.end},
        "annualization": doc.annualization,
        "metrics": {
            "champion": (doc.strategies.get("champion") or none).model_dump(),
            "buy_and_hold": (doc.figures_of(doc.benchmark or "buy_and_hold") or none).model_dump(),
            "equal_weight": (doc.strategies.get("equal_weight") or none).model_dump(),
            "linear": (doc.strategies.get("linear") or none).model_dump(),
            "boosted": (doc.strategies.get("boosted") or none).model_dump(),
        },
        "num_trials": doc.num_trials,
        "pbo": doc.pbo,
        "verdict": doc.verdict,
        "verdict_diagnostics": doc.verdict_diagnostics,
        "document": doc,
    }


def _data_stage(
    config: Config,
    home: Path,
    timings: dict[str, float],
    say: Callable[[str], None],
    status: Callable[[str], AbstractContextManager[Any]],
) -> Any:
    """Stage 1: the market's splits (built and stored, or read back)."""
    t0 = time.perf_counter()
    with status("[1/3] data: building the market (calendar, features, splits)"):
        splits = load_market(
            config.data, home=home, device="cpu", store_synthetic=config.data.source == "synthetic"
        )
    timings["data_s"] = time.perf_counter() - t0
    windows = splits.windows()
    say(
        f"[1/3] data: {splits.full.num_assets} tickers, {splits.full.num_sessions} sessions of "
        f"{splits.full.interval} bars ({splits.full.num_steps:,} bars per ticker); train {windows['train'][0]}..{windows['train'][1]}, "
        f"valid {windows['valid'][0]}..{windows['valid'][1]}, test {windows['test'][0]}..{windows['test'][1]} "
        f"(held out) [{timings['data_s']:.1f} s]"
    )
    return splits


def _tournament_stage(
    config: Config,
    home: Path,
    run_id: str,
    splits: Any,
    extra: dict[str, Any],
    timings: dict[str, float],
    progress: TournamentProgress | None,
    say: Callable[[str], None],
) -> Any:
    """Stage 2: the tournament on the train and validation windows; its summary (a champion or a
    one-line error)."""
    t0 = time.perf_counter()
    budget = (
        f"{extra['budget_minutes']:.1f} min"
        if extra["budget_minutes"]
        else f"{config.tournament.budget_steps:,} env-steps"
    )
    pods = config.tournament.pods
    pool = f"{pods} pods" if pods is not None else "pods per population chosen on the device"
    say(f"[2/3] tournament: {pool}, {config.tournament.workers} worker(s), budget {budget}")
    summary = train_tournament(config, home, run=run_id, progress=progress, splits=splits)
    timings["tournament_s"] = time.perf_counter() - t0
    champion = summary.champion or {}
    if not champion:
        raise ConfigError("the tournament produced no champion (every pod failed; see the run's events)")
    say(
        f"[2/3] tournament: {summary.pods_tried} pods tried ({summary.pods_failed} failed), "
        f"{summary.env_steps:,} env-steps; champion {champion.get('pod_id')} "
        f"(validation {config.tournament.fitness} {champion.get('score', float('nan')):.2f}) "
        f"[{timings['tournament_s']:.0f} s]"
    )
    return summary
