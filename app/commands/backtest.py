"""`podracer backtest RUN [--window test|valid] [--json]` and `podracer backtest --baseline NAME`.

With a run: loads ``<home>/runs/<RUN>/config.toml`` and the champion policy (``champion/``), rebuilds
the market with the run's data config, backtests champion + baselines on the window (test by default)
through the training env's ``step``, writes ``<run>/backtest/`` (see ``backtests.report``) and prints
a table (or, with ``--json``, the metrics.json document). The deflated Sharpe ratio uses the pods tried
and their validation Sharpe ratios from ``<run>/run.json`` (``pods_tried``, ``trial_sharpes``).

Without a run, ``--baseline buy-and-hold`` (repeatable: ``cash``, ``index``) backtests baselines on the
stored bars (``<home>/data/bars``, data config from ``--config`` with ``source = "stored"``); ``--out
DIR`` also writes the report there.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import typer

from app import context
from data.errors import CheckpointError, ConfigError, DataError, PodracerError

log = logging.getLogger(__name__)

WINDOWS = ("test", "valid", "full")
_PERCENT = {
    "cum_returns_final",
    "annual_return",
    "annual_volatility",
    "max_drawdown",
    "turnover",
    "costs_paid",
    "exposure",
    "hit_rate",
}
_ROWS = (
    ("cum_returns_final", "Cumulative return"),
    ("annual_return", "Annual return"),
    ("annual_volatility", "Annual volatility"),
    ("sharpe_ratio", "Sharpe"),
    ("sortino_ratio", "Sortino"),
    ("max_drawdown", "Max drawdown"),
    ("calmar_ratio", "Calmar"),
    ("turnover", "Turnover / day"),
    ("costs_paid", "Costs paid"),
    ("exposure", "Exposure"),
    ("hit_rate", "Hit rate (days)"),
    ("probabilistic_sharpe_ratio", "PSR"),
    ("deflated_sharpe_ratio", "DSR"),
)


def _read_run_json(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PodracerError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise PodracerError(f"{path}: expected a JSON object")
    return data


def _trials(run_info: dict[str, Any], run_dir: Path) -> tuple[int, list[float]]:
    try:
        num_trials = int(run_info.get("pods_tried") or 1)
        sharpes = [float(s) for s in run_info.get("trial_sharpes") or [] if s is not None]
    except (TypeError, ValueError):
        raise PodracerError(f"{run_dir / 'run.json'}: pods_tried / trial_sharpes are not numbers") from None
    return max(1, num_trials), [s for s in sharpes if math.isfinite(s)]


def _window(splits: Any, window: str) -> Any:
    if window not in WINDOWS:
        raise ConfigError(f"--window {window!r}: choose {', '.join(WINDOWS)}")
    return getattr(splits, window)


def _check_device(device: str) -> str:
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"device {device!r}: not a torch device (cpu, cuda, cuda:0, mps)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r}: CUDA is not available here (use --device cpu)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {device!r}: MPS is not available here (use --device cpu)")
    return device


def _load_policy(champion_dir: Path, device: str) -> Any:
    try:
        from agents.policy import Policy
    except ImportError as err:
        raise PodracerError(f"cannot load policies: agents.policy is not available ({err})") from None
    if not champion_dir.is_dir():
        raise CheckpointError(f"no champion policy at {champion_dir} (train or run a tournament first)")
    return Policy.load(champion_dir, device=device)


def check_policy_fits(policy: Any, market: Any, params: Any) -> None:
    tickers = tuple(getattr(policy.meta, "tickers", ()) or ())
    if tickers and tickers != tuple(market.tickers):
        raise CheckpointError(
            f"champion was trained on {len(tickers)} tickers that differ from the market's "
            f"{len(market.tickers)} ({', '.join(market.tickers[:5])}...)"
        )
    if policy.config.num_features != market.num_features or policy.num_assets != market.num_assets:
        raise CheckpointError(
            f"champion expects {policy.num_assets} assets x {policy.config.num_features} features, the market "
            f"has {market.num_assets} x {market.num_features}"
        )
    if policy.meta.action_mode != params.action_mode:
        raise CheckpointError(
            f"champion acts in {policy.meta.action_mode!r} mode but the run's env uses {params.action_mode!r}"
        )


def _check_window_unseen(run: str, window: str, market: Any, recorded: Any) -> None:
    """The evaluation window rebuilt from today's data must still lie after what the run learned from.

    A run records the dates of its windows; the market is rebuilt from its data config, and with
    ``source = "stored"`` the bars may have changed since (older history imported shifts the
    whole-session split later): the "test" window could then cover the run's validation or training
    sessions and score the champion on data it was selected or trained on.
    """
    if window == "full" or not isinstance(recorded, dict):
        return
    seen = ("train", "valid") if window == "test" else ("train",)
    start, end = market.date_range()
    for name in seen:
        dates = recorded.get(name)
        if not isinstance(dates, list | tuple) or len(dates) != 2:
            continue
        if str(dates[1]) >= start:
            raise DataError(
                f"run {run!r} was {'trained' if name == 'train' else 'selected'} on data up to {dates[1]}, "
                f"but the {window} window rebuilt from the current data starts {start}: the bars changed "
                f"since the run (try --window full for an in-sample look)"
            )
    before = recorded.get(window)
    if isinstance(before, list | tuple) and [str(d) for d in before] != [start, end]:
        log.warning(
            "the %s window is now %s..%s (the run recorded %s..%s): the bars changed since the run",
            window,
            start,
            end,
            *before,
        )


def backtest_run(
    run: str,
    *,
    home: Path,
    window: str = "test",
    device: str | None = None,
    tearsheet: bool = True,
) -> dict[str, Any]:
    """Backtest a run's champion + baselines on ``window`` and write ``<run>/backtest/``."""
    from app.commands.train import env_params_from_config
    from app.config import load_config
    from backtests import engine, report
    from data.loader import load_market

    run_dir = home / "runs" / run
    if not run_dir.is_dir():
        raise PodracerError(f"no run {run!r} under {home / 'runs'}")
    config_path = run_dir / "config.toml"
    if not config_path.is_file():
        raise ConfigError(f"run {run!r} has no config.toml")
    config = load_config(config_path)
    device = _check_device(device or config.agent.device)
    policy = _load_policy(run_dir / "champion", device)
    run_info = _read_run_json(run_dir)
    num_trials, trial_sharpes = _trials(run_info, run_dir)
    params = env_params_from_config(config.env)
    market = _window(load_market(config.data, home=home, device=device), window)
    _check_window_unseen(run, window, market, run_info.get("windows"))
    check_policy_fits(policy, market, params)
    result = engine.run_backtest(
        market, params, {"champion": policy}, device=device, num_threads=1, compile=config.backtest.compile
    )
    return report.write_report(
        run_dir,
        result,
        window=window,
        annualization=config.backtest.annualization,
        num_trials=num_trials,
        trial_sharpes=trial_sharpes,
        tearsheet=tearsheet,
    )


def backtest_baselines(
    baselines: list[str],
    *,
    home: Path,
    window: str = "test",
    config_path: Path | None = None,
    out: Path | None = None,
    device: str = "cpu",
    tearsheet: bool = True,
) -> dict[str, Any]:
    """Backtest baselines on the stored bars (no run); write a report under ``out`` when given."""
    from app.commands.train import env_params_from_config
    from app.config import load_config
    from backtests import engine, report
    from data.loader import load_market

    names = [b.replace("-", "_") for b in baselines]
    unknown = [b for b, n in zip(baselines, names, strict=True) if n not in engine.BASELINES]
    if unknown:
        raise ConfigError(f"--baseline {unknown[0]!r}: choose buy-and-hold, cash or index")
    config = load_config(config_path)
    data = (
        config.data.model_copy(update={"source": "stored"}) if config.data.source != "stored" else config.data
    )
    market = _window(load_market(data, home=home, device=device), window)
    if "index" in names and not any(t in market.tickers for t in engine.INDEX_TICKERS):
        raise DataError(f"--baseline index: none of {', '.join(engine.INDEX_TICKERS)} is in the stored data")
    result = engine.run_backtest(
        market, env_params_from_config(config.env), baselines=names, device=device, num_threads=1
    )
    benchmark = names[0] if names[0] != "index" else result.names[0]
    if out is not None:
        return report.write_report(
            out,
            result,
            window=window,
            annualization=config.backtest.annualization,
            benchmark=benchmark,
            tearsheet=tearsheet,
        )
    return report.metrics_document(
        result, window=window, annualization=config.backtest.annualization, benchmark=benchmark
    )


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "—"
    if key in _PERCENT:
        return (
            f"{100 * value:+.2f}%" if key in ("cum_returns_final", "annual_return") else f"{100 * value:.2f}%"
        )
    return (
        f"{value:.3f}" if key in ("probabilistic_sharpe_ratio", "deflated_sharpe_ratio") else f"{value:.2f}"
    )


def print_table(doc: dict[str, Any], title: str) -> None:
    """The metrics document as a rich table: one column per strategy, benchmark marked."""
    from rich.table import Table

    strategies = doc["strategies"]
    table = Table(title=title, caption=_caption(doc), title_justify="left", caption_justify="left")
    table.add_column("metric")
    for name in strategies:
        label = f"{name} (benchmark)" if name == doc.get("benchmark") else name
        table.add_column(label, justify="right")
    for key, label in _ROWS:
        table.add_row(label, *(_fmt(key, row.get(key)) for row in strategies.values()))
    context.console.print(table)


def _caption(doc: dict[str, Any]) -> str:
    return (
        f"{doc['window']} window {doc['start']} .. {doc['end']} ({doc['num_days']} sessions, "
        f"{doc['num_decisions']} decisions every {doc['decision_interval']} x {doc['interval']} bars); "
        f"daily returns annualized with {doc['annualization']}/yr; costs on; "
        f"DSR over {doc['num_trials']} trial(s)"
    )


def backtest(
    run: str = typer.Argument(None, help="Run id under <home>/runs (omit with --baseline)."),
    window: str = typer.Option("test", "--window", help="test, valid or full."),
    json_out: bool = typer.Option(False, "--json", help="Print the metrics document as JSON."),
    baseline: list[str] = typer.Option(
        None, "--baseline", help="Without RUN: baseline(s) on the stored data (buy-and-hold, cash, index)."
    ),
    config: Path = typer.Option(None, "--config", help="With --baseline: TOML config (data, env costs)."),
    out: Path = typer.Option(
        None, "--out", help="With --baseline: also write the report under OUT/backtest/."
    ),
    device: str = typer.Option(
        None, "--device", help="torch device [default: the run's agent.device, else cpu]."
    ),
    no_tearsheet: bool = typer.Option(False, "--no-tearsheet", help="Skip the pyfolio tear sheet."),
) -> None:
    """Backtest a run's champion (and baselines) on the held-out window, or baselines on stored data."""
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
        from backtests.report import json_safe

        typer.echo(json.dumps(json_safe(doc)))
        return
    print_table(doc, title)
    if run is not None:
        context.console.print(f"wrote {home / 'runs' / run / 'backtest'}", highlight=False)
