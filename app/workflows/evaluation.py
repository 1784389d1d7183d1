"""Evaluation workflows: a run's champion + baselines on a held-out window, or baselines alone.

:func:`backtest_run` loads the run's ``config.toml`` and champion policy, rebuilds the market with
the run's data config, backtests champion + baselines on the window (test by default) through the
training env's ``step``, and writes the run's ``backtest/`` (see ``backtests.report``). The deflated
Sharpe ratio uses the pods tried and their validation Sharpe ratios from the run record.

:func:`backtest_baselines` backtests baselines (buy-and-hold, cash, index) on the stored bars
(``<home>/data/bars``, data config with ``source = "stored"``), writing a report under ``out`` when
given. Both return the metrics document; nothing here prints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from agents.ensemble import load_policy
from app.config import load_config, to_env_params
from app.runs import RunDir
from backtests import engine, report
from data.errors import CheckpointError, ConfigError, DataError, PodracerError
from data.loader import load_market

log = logging.getLogger(__name__)

WINDOWS = ("test", "valid", "full")


def _window(splits: Any, window: str) -> Any:
    if window not in WINDOWS:
        raise ConfigError(f"--window {window!r}: choose {', '.join(WINDOWS)}")
    return getattr(splits, window)


def check_device(device: str) -> str:
    """``device`` if torch can use it here, else a one-line ConfigError."""
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
    if not champion_dir.is_dir():
        raise CheckpointError(f"no champion policy at {champion_dir} (train or run a tournament first)")
    return load_policy(champion_dir, device=device)


def check_policy_fits(policy: Any, market: Any, params: Any) -> None:
    """A policy can trade ``market`` under ``params``: same tickers, shapes and action mode."""
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


def _check_window_unseen(run: str, window: str, market: Any, recorded: dict[str, tuple[str, str]]) -> None:
    """The evaluation window rebuilt from today's data must still lie after what the run learned from.

    A run records the dates of its windows; the market is rebuilt from its data config, and with
    ``source = "stored"`` the bars may have changed since (older history imported shifts the
    whole-session split later): the "test" window could then cover the run's validation or training
    sessions and score the champion on data it was selected or trained on.
    """
    if window == "full":
        return
    seen = ("train", "valid") if window == "test" else ("train",)
    start, end = market.date_range()
    for name in seen:
        dates = recorded.get(name)
        if dates is None:
            continue
        if str(dates[1]) >= start:
            raise DataError(
                f"run {run!r} was {'trained' if name == 'train' else 'selected'} on data up to {dates[1]}, "
                f"but the {window} window rebuilt from the current data starts {start}: the bars changed "
                f"since the run (try --window full for an in-sample look)"
            )
    before = recorded.get(window)
    if before is not None and list(before) != [start, end]:
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
    run_dir = RunDir(home, run)
    if not run_dir.exists():
        raise PodracerError(f"no run {run!r} under {home / 'runs'}")
    if not run_dir.config.is_file():
        raise ConfigError(f"run {run!r} has no config.toml")
    config = load_config(run_dir.config)
    device = check_device(device or config.agent.device)
    policy = _load_policy(run_dir.champion, device)
    run_info = run_dir.info()
    num_trials, trial_sharpes = run_info.trials()
    params = to_env_params(config.env)
    market = _window(load_market(config.data, home=home, device=device), window)
    _check_window_unseen(run, window, market, run_info.windows)
    check_policy_fits(policy, market, params)
    result = engine.run_backtest(
        market, params, {"champion": policy}, device=device, num_threads=1, compile=config.backtest.compile
    )
    return report.write_report(
        run_dir.path,
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
        market, to_env_params(config.env), baselines=names, device=device, num_threads=1
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
