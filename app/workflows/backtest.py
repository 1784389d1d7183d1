"""Backtest workflows: a run's champion + baselines on a held-out window, or baselines alone.

:func:`backtest_run` loads the run's ``config.toml`` and champion policy, rebuilds the market with
the run's data config, backtests champion + baselines on the window (test by default) through the
training env's ``step`` (the linear and boosted baselines fitted on the run's train and validation
windows, ``backtests.linear``, ``backtests.boosted``; every baseline under the run's execution
rules, volume cap included), counts the look in ``<home>/looks.sqlite`` (``backtests.looks``; the test and
the full window, both show held-out sessions; keyed by the champion's weights, :func:`policy_digest`;
the run remembers the count in ``<run>/looks.json``, so a deleted ledger or another home never reads
fewer looks than it was judged under: ``backtests.looks_memory``) and writes the run's ``backtest/`` (see ``backtests.report``): the champion's out-of-sample test
first judged after the looks before it at an overlapping window of the same market
(:func:`market_identity`) and stated with the looks counted now, and the
selection diagnostics from every scored pod's daily validation returns
(``<run>/pods/<pod>/valid_returns.parquet``, :func:`selection_inputs`) with buy-and-hold's on the same
validation dates. The bootstraps are seeded with the run's ``[tournament] seed`` and the test's level
is the run config's ``[backtest] significance_level``.

:func:`backtest_baselines` backtests baselines (buy-and-hold, cash, index, linear, boosted) on the stored bars
(``<home>/data/bars``, data config with ``source = "stored"``), writing a report under ``out`` when
given. Both return the metrics document; nothing here prints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from agents.ensemble import load_policy
from app.config import load_config, load_run_config, to_env_params
from app.evaluation import (
    check_policy_fits,
    count_look,
    look_arguments,
    market_identity,
    policy_digest,
    selection_inputs,
)
from app.runs import RunDir, runs_root
from backtests import baselines as bl
from backtests import capacity, engine, report
from backtests.boosted import fit_boosted
from backtests.linear import fit_linear
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


def _champion_for(run_dir: RunDir, window: str) -> Path:
    """The policy a look at ``window`` backtests: the run's champion, or for the validation window the
    one the tournament chose when a refit on that window replaced it (``agents.tournament.refit``)."""
    chosen = run_dir.champion_chosen
    return chosen if window == "valid" and chosen.is_dir() else run_dir.champion


def _check_window_unseen(run: str, window: str, market: Any, recorded: dict[str, tuple[str, str]]) -> None:
    """The backtest window rebuilt from today's data must still lie after what the run learned from.

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


def _run_and_config(home: Path, run: str) -> tuple[RunDir, Any]:
    """The run's folder and its config (one-line errors for a missing run or config)."""
    run_dir = RunDir(home, run)
    if not run_dir.exists():
        raise PodracerError(f"no run {run!r} under {runs_root(home)}")
    if not run_dir.config.is_file():
        raise ConfigError(f"run {run!r} has no config.toml")
    return run_dir, load_run_config(run_dir.config)


def backtest_run(
    run: str,
    *,
    home: Path,
    window: str = "test",
    device: str | None = None,
    tearsheet: bool = True,
    splits: Any | None = None,
) -> dict[str, Any]:
    """Backtest a run's champion + baselines on ``window`` and write ``<run>/backtest/``.

    ``splits``: the ``MarketSplits`` the run was built from, when the caller still holds them (the
    demo), instead of rebuilding the market from the run's data config (a minute or more for a large
    synthetic market on a busy machine)."""
    run_dir, config = _run_and_config(home, run)
    device = check_device(device or config.agent.device)
    policy = _load_policy(_champion_for(run_dir, window), device)
    run_info = run_dir.info()
    num_trials, _ = run_info.trials()
    annualization = run_info.annualization or config.backtest.annualization
    params = to_env_params(config.env)
    if splits is None:
        splits = load_market(config.data, home=home, device=device)
    market = _window(splits, window).to(device)
    _check_window_unseen(run, window, market, run_info.windows)
    check_policy_fits(policy, market, params)
    # The ranker baselines: fitted on the run's train window, the ridge's penalty chosen and the trees
    # early-stopped on the validation window, then refitted on both (not for a look at the validation
    # window itself, where the champion is the chosen one: neither has then been fitted on it).
    train, valid = splits.train.to(device), splits.valid.to(device)
    refit = window != "valid"
    linear = fit_linear(train, valid, params.decision_interval, refit=refit)
    boosted = fit_boosted(train, valid, params.decision_interval, refit=refit)
    result = engine.run_backtest(
        market,
        params,
        {"champion": policy},
        device=device,
        num_threads=1,
        compile=config.backtest.compile,
        linear=linear,
        boosted=boosted,
    )
    # The capacity curve: the champion and the baselines at several account sizes, one pass.
    sizes = capacity.run_capacity(
        market, params, {"champion": policy}, device=device, linear=linear, boosted=boosted
    )
    identity = market_identity(config.data)
    counted = count_look(
        home,
        run,
        result,
        window=window,
        market=identity,
        policy=policy_digest(run_dir.champion),
        run_dir=run_dir,
    )
    champion = run_info.champion.pod_id if run_info.champion is not None else None
    return report.write_report(
        run_dir.path,
        result,
        window=window,
        annualization=annualization,
        num_trials=num_trials,
        trial_returns=selection_inputs(run_dir, splits.valid.to(device), params, champion, device=device),
        cost_rate=params.cost_rate,
        slippage_bps=params.slippage_bps,
        execution=report.execution_settings(
            params, data_feed=splits.feed, volume_scale=config.data.volume_scale
        ),
        significance_level=config.backtest.significance_level,
        seed=config.tournament.seed,
        market=identity,
        tearsheet=tearsheet,
        capacity=sizes,
        max_participation=params.max_participation,
        **look_arguments(counted),
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
    unknown = [b for b, n in zip(baselines, names, strict=True) if n not in bl.BASELINES]
    if unknown:
        raise ConfigError(
            f"--baseline {unknown[0]!r}: choose buy-and-hold, equal-weight, cash, index, linear or boosted"
        )
    config = load_config(config_path)
    data = (
        config.data.model_copy(update={"source": "stored"}) if config.data.source != "stored" else config.data
    )
    splits = load_market(data, home=home, device=device)
    market = _window(splits, window)
    if "index" in names and not any(t in market.tickers for t in bl.INDEX_TICKERS):
        raise DataError(f"--baseline index: none of {', '.join(bl.INDEX_TICKERS)} is in the stored data")
    params = to_env_params(config.env)
    interval = params.decision_interval
    refit = window != "valid"  # (a look at the validation window: fitted on the train window alone)
    linear = fit_linear(splits.train, splits.valid, interval, refit=refit) if "linear" in names else None
    boosted = fit_boosted(splits.train, splits.valid, interval, refit=refit) if "boosted" in names else None
    result = engine.run_backtest(
        market, params, baselines=names, device=device, num_threads=1, linear=linear, boosted=boosted
    )
    benchmark = names[0] if names[0] != "index" else result.names[0]
    costs = {
        "cost_rate": params.cost_rate,
        "slippage_bps": params.slippage_bps,
        "execution": report.execution_settings(
            params, data_feed=splits.feed, volume_scale=config.data.volume_scale
        ),
    }
    if out is not None:
        return report.write_report(
            out,
            result,
            window=window,
            annualization=config.backtest.annualization,
            benchmark=benchmark,
            tearsheet=tearsheet,
            **costs,
        )
    return report.metrics_document(
        result, window=window, annualization=config.backtest.annualization, benchmark=benchmark, **costs
    )
