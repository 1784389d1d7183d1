"""`podracer demo`: the main job end to end, offline — data -> tournament -> backtest -> report.

1. data: a synthetic NASDAQ-100-like universe (planted signal on by default) written to the store,
   or the shipped real minute sample (``--data real-sample``);
2. tournament: pods trained on the train window and scored on the validation window, sized to the
   machine (CPU cores; a GPU if present), within a wall-time budget;
3. backtest: the champion vs buy-and-hold (and cash) on the held-out test window, which the
   tournament never saw; report files, tear sheet, deflated Sharpe over the pods tried;
4. a summary table, and the `podracer dashboard` command (or the dashboard itself with ``--serve``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import typer

from app import context
from data.errors import ConfigError

# Presets: "default" is what `make demo` runs; "test" is the shortened demo CI runs end to end.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "data": {"num_tickers": 100, "num_sessions": 60},
        "env": {"num_envs": 256},
        "tournament": {"pods": 4, "leaderboard_size": 8, "round_steps": 250_000},
        "minutes": 6.0,
    },
    "test": {
        "data": {"num_tickers": 8, "num_sessions": 12},
        "env": {"num_envs": 32, "episode_len": 64},
        "agent": {"num_steps": 16},
        "tournament": {"pods": 2, "leaderboard_size": 4, "round_steps": 4_096, "budget_steps": 12_288},
        "minutes": None,
    },
}

_SUMMARY_ROWS = (
    ("sharpe_ratio", "Sharpe", "{:.2f}"),
    ("max_drawdown", "Max drawdown", "{:.2%}"),
    ("calmar_ratio", "Calmar", "{:.2f}"),
    ("annual_return", "Annual return", "{:.2%}"),
    ("cum_returns_final", "Cumulative return", "{:.2%}"),
    ("annual_volatility", "Annual volatility", "{:.2%}"),
    ("costs_paid", "Costs paid (of initial value)", "{:.2%}"),
    ("probabilistic_sharpe_ratio", "Probabilistic Sharpe (PSR)", "{:.2f}"),
    ("deflated_sharpe_ratio", "Deflated Sharpe (DSR)", "{:.2f}"),
)


def _machine() -> dict[str, Any]:
    import torch

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
) -> tuple[Any, dict[str, Any]]:
    """The demo's resolved config: preset, then the user's TOML, then the flags."""
    from app.config import Config, load_config

    if preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r}: choose {', '.join(PRESETS)}")
    chosen = PRESETS[preset]
    base = load_config(config_path) if config_path is not None else Config()
    sections: dict[str, dict[str, Any]] = {k: dict(v) for k, v in chosen.items() if isinstance(v, dict)}
    if config_path is not None:
        sections = {}  # the user's file wins over the preset
    data = sections.setdefault("data", {})
    data["source"] = "synthetic" if data_source == "synthetic" else "real-sample"
    if signal is not None:
        data["signal"] = signal
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
    tour["pods"] = max(tour.get("pods", base.tournament.pods), max(1, tour["workers"]))
    sections.setdefault("agent", {})["device"] = machine["device"]
    config = base.with_updates(**sections)
    return config, {"budget_minutes": budget_minutes}


def _summary_table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    strategies = doc["strategies"]
    champ, bench = strategies.get("champion", {}), strategies.get(doc.get("benchmark", "buy_and_hold"), {})
    table = Table(
        title="podracer demo: champion vs buy-and-hold on the held-out test window", title_justify="left"
    )
    table.add_column("metric")
    table.add_column("champion", justify="right")
    table.add_column("buy-and-hold", justify="right")
    for key, label, fmt in _SUMMARY_ROWS:

        def cell(row: dict[str, Any], key: str = key, fmt: str = fmt) -> str:
            value = row.get(key)
            return "n/a" if value is None else fmt.format(value)

        table.add_row(label, cell(champ), cell(bench))
    return table


def run_demo(
    *,
    home: Path,
    preset: str = "default",
    config_path: Path | None = None,
    data_source: str = "synthetic",
    signal: float | None = None,
    seed: int | None = None,
    minutes: float | None = None,
    workers: int | None = None,
    run: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every stage; returns a summary dict (run id, timings, metrics of champion and benchmark)."""
    from app.commands.backtest import backtest_run
    from app.commands.train import train_tournament
    from data.loader import load_market

    machine = _machine()
    config, extra = build_config(
        preset,
        config_path=config_path,
        data_source=data_source,
        signal=signal,
        seed=seed,
        minutes=minutes,
        workers=workers,
        machine=machine,
    )
    run_id = run or time.strftime("demo-%Y%m%d-%H%M%S", time.gmtime())
    timings: dict[str, float] = {}
    say = context.err_console.print
    say(
        f"[bold]podracer demo[/] home={home} run={run_id} preset={preset} data={config.data.source} "
        f"signal={config.data.signal} seed={config.data.seed}; machine: {machine['cores']} cores, "
        f"device {machine['device']}" + (f" ({machine['gpu']})" if machine["gpu"] else ""),
        highlight=False,
    )

    t0 = time.perf_counter()
    with context.err_console.status("[1/3] data: building the market (calendar, features, splits)"):
        splits = load_market(
            config.data, home=home, device="cpu", store_synthetic=config.data.source == "synthetic"
        )
    timings["data_s"] = time.perf_counter() - t0
    windows = splits.windows()
    say(
        f"[1/3] data: {splits.full.num_assets} tickers, {splits.full.num_sessions} sessions of "
        f"{splits.full.interval} bars ({splits.full.num_steps:,} bars); train {windows['train'][0]}..{windows['train'][1]}, "
        f"valid {windows['valid'][0]}..{windows['valid'][1]}, test {windows['test'][0]}..{windows['test'][1]} "
        f"(held out) [{timings['data_s']:.1f} s]",
        highlight=False,
    )

    t0 = time.perf_counter()
    budget = (
        f"{extra['budget_minutes']:.1f} min"
        if extra["budget_minutes"]
        else f"{config.tournament.budget_steps:,} env-steps"
    )
    say(
        f"[2/3] tournament: {config.tournament.pods} pods, {config.tournament.workers} worker(s), budget {budget}",
        highlight=False,
    )
    summary = train_tournament(config, home, run=run_id, progress=progress, splits=splits)
    timings["tournament_s"] = time.perf_counter() - t0
    champion = summary.get("champion") or {}
    if not champion:
        raise ConfigError("the tournament produced no champion (every pod failed; see the run's events)")
    say(
        f"[2/3] tournament: {summary['pods_tried']} pods tried ({summary['pods_failed']} failed), "
        f"{summary['env_steps']:,} env-steps; champion {champion.get('pod_id')} "
        f"(validation {config.tournament.fitness} {champion.get('score', float('nan')):.2f}) "
        f"[{timings['tournament_s']:.0f} s]",
        highlight=False,
    )

    t0 = time.perf_counter()
    with context.err_console.status("[3/3] backtest: champion vs buy-and-hold on the test window"):
        doc = backtest_run(run_id, home=home, window="test")
    timings["backtest_s"] = time.perf_counter() - t0
    say(
        f"[3/3] backtest: wrote {home / 'runs' / run_id / 'backtest'} [{timings['backtest_s']:.1f} s]",
        highlight=False,
    )
    timings["total_s"] = sum(timings.values())
    strategies = doc["strategies"]
    bench = doc.get("benchmark", "buy_and_hold")
    return {
        "run_id": run_id,
        "run_dir": str(home / "runs" / run_id),
        "preset": preset,
        "machine": machine,
        "seed": config.data.seed,
        "signal": config.data.signal,
        "pods_tried": summary["pods_tried"],
        "pods_failed": summary["pods_failed"],
        "env_steps": summary["env_steps"],
        "champion": champion,
        "window": {"start": doc["start"], "end": doc["end"]},
        "annualization": doc["annualization"],
        "metrics": {"champion": strategies.get("champion", {}), "buy_and_hold": strategies.get(bench, {})},
        "timings": timings,
        "document": doc,
    }


def demo(
    minutes: float = typer.Option(
        None, "--minutes", min=0.05, help="Tournament wall-time budget in minutes [default preset: 6]."
    ),
    data: str = typer.Option(
        "synthetic", "--data", help="synthetic or real-sample (shipped real minute bars)."
    ),
    signal: float = typer.Option(None, "--signal", min=0.0, help="Planted signal strength (0 = pure noise)."),
    seed: int = typer.Option(None, "--seed", help="Seed of data, pods and tournament [default: 0]."),
    preset: str = typer.Option(
        "default", "--preset", help="default, or test (a tiny end-to-end run for CI)."
    ),
    config: Path = typer.Option(None, "--config", help="TOML config to use instead of the preset."),
    workers: int = typer.Option(None, "--workers", min=0, help="Worker processes [default: CPU cores]."),
    run: str = typer.Option(None, "--run", help="Run name [default: demo-<UTC time>]."),
    serve: bool = typer.Option(False, "--serve", help="Start the dashboard on the run when done."),
    port: int = typer.Option(8501, "--port", help="With --serve: dashboard port."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (no live view)."),
) -> None:
    """Run the main job offline: data -> tournament -> backtest of the champion vs buy-and-hold."""
    if data not in ("synthetic", "real-sample"):
        raise ConfigError(f"--data {data!r}: choose synthetic or real-sample")
    home = context.home()
    result = run_demo(
        home=home,
        preset=preset,
        config_path=config,
        data_source=data,
        signal=signal,
        seed=seed,
        minutes=minutes,
        workers=workers,
        run=run,
        progress=not json_out,
    )
    if json_out:
        from backtests.report import json_safe

        result.pop("document")
        typer.echo(json.dumps(json_safe(result), sort_keys=True))
    else:
        context.console.print(_summary_table(result["document"]))
        doc = result["document"]
        context.console.print(
            f"test window {doc['start']} .. {doc['end']}, daily returns annualized with "
            f"{doc['annualization']}/yr, costs on; DSR over {doc['num_trials']} pods tried. "
            f"Total {result['timings']['total_s']:.0f} s.",
            highlight=False,
        )
        cmd = f"podracer --home {home} dashboard --run {result['run_id']}"
        context.console.print(f"\nOpen the dashboard:  [bold]{cmd}[/]", highlight=False)
    if serve:
        from app.commands.dashboard import dashboard as start_dashboard

        start_dashboard(home=home, port=port, run=result["run_id"], host="127.0.0.1")
