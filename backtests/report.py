"""Backtest artifacts: ``<run>/backtest/`` with metrics.json, parquet tables and a tear sheet.

The files and their schemas are a contract with the dashboard (see ARCHITECTURE.md):

- ``metrics.json``: ``window, start, end, annualization, period, benchmark, num_trials`` and
  ``strategies: {name: {<every metric of backtests.metrics.SUMMARY_METRICS>,
  probabilistic_sharpe_ratio, deflated_sharpe_ratio}}`` (floats, or null where undefined), plus
  descriptive extras (``decision_interval``, ``num_decisions``, ``num_days``, ``interval``,
  ``trial_sharpe_variance``, ``deflated``, ``positions_frequency``, ``trades_frequency``,
  ``tearsheet``);
- ``equity.parquet``: ``timestamp`` (UTC) + one float64 column per strategy (equity in $); the first
  row is the initial cash at the window's first bar;
- ``positions.parquet``: long ``timestamp, strategy, ticker, weight`` (zero weights left out);
- ``trades.parquet``: ``timestamp, strategy, ticker, notional, cost`` (``timestamp`` = the fill bar;
  ``notional`` signed, + = buy, at the fill price; ``cost`` = commission + slippage in $);
- ``daily_returns.parquet``: ``date`` + one float64 column per strategy;
- ``tearsheet.png``: pyfolio-reloaded returns tear sheet of the first strategy's daily returns against
  the benchmark (a plain matplotlib equity/drawdown figure when pyfolio cannot draw the series).

Positions and trades are written per decision while that stays under ``max_rows`` rows; beyond that
(a year of minute decisions x 100 assets is ~10M rows per strategy) they are summarized per session:
positions at each session's last mark, trades summed per session and ticker, stamped with the
session's last fill. ``metrics.json`` says which (``"decision"`` or ``"session"``).

Every file is written atomically (``data.atomic``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from backtests import metrics as m
from backtests import selection
from backtests.engine import BASELINES, BacktestResult
from data.atomic import atomic_path, atomic_write_json

log = logging.getLogger(__name__)

PERIOD = "daily"
DEFAULT_MAX_ROWS = 2_000_000
EXTRA_METRICS: tuple[str, ...] = ("probabilistic_sharpe_ratio", "deflated_sharpe_ratio")
#: Every per-strategy key of metrics.json, in display order.
METRIC_KEYS: tuple[str, ...] = m.SUMMARY_METRICS + EXTRA_METRICS


def _is_baseline(name: str) -> bool:
    return name in BASELINES or name.startswith("index_")


def compute_metrics(
    result: BacktestResult,
    *,
    annualization: float = 252.0,
    num_trials: int = 1,
    trial_sharpes: Sequence[float] | None = None,
    deflated: Sequence[str] | None = None,
) -> dict[str, dict[str, float | None]]:
    """Every metric of every strategy, on daily returns, as JSON-able floats (None = undefined).

    The deflated Sharpe ratio accounts for ``num_trials`` for the strategies in ``deflated`` (default:
    every non-baseline strategy, i.e. what a tournament selected); baselines were not selected, so
    their DSR equals their PSR. ``trial_sharpes`` are the trials' annualized Sharpe ratios (their
    variance sets the hurdle); without two of them the null variance ``1/(T-1)`` is used.
    """
    _, daily = result.daily_returns()
    summary = result.summary(annualization)
    psr = selection.probabilistic_sharpe_ratio(daily)
    variance = selection.trial_sharpe_variance(trial_sharpes or (), annualization)
    dsr_all = selection.deflated_sharpe_ratio(daily, max(1, int(num_trials)), variance)
    deflated = set(deflated if deflated is not None else [n for n in result.names if not _is_baseline(n)])
    out: dict[str, dict[str, float | None]] = {}
    for i, name in enumerate(result.names):
        row = {key: m.to_floats(summary[key][i : i + 1])[0] for key in m.SUMMARY_METRICS}
        row["probabilistic_sharpe_ratio"] = m.to_floats(psr[i : i + 1])[0]
        row["deflated_sharpe_ratio"] = m.to_floats((dsr_all if name in deflated else psr)[i : i + 1])[0]
        out[name] = row
    return out


def metrics_document(
    result: BacktestResult,
    *,
    window: str,
    annualization: float = 252.0,
    num_trials: int = 1,
    trial_sharpes: Sequence[float] | None = None,
    benchmark: str = "buy_and_hold",
) -> dict[str, Any]:
    """The metrics.json document (also what ``podracer backtest --json`` prints)."""
    start, end = result.date_range()
    dates, _ = result.daily_returns()
    variance = selection.trial_sharpe_variance(trial_sharpes or (), annualization)
    selected = [n for n in result.names if not _is_baseline(n)]
    return {
        "window": window,
        "start": start,
        "end": end,
        "annualization": int(annualization) if float(annualization).is_integer() else annualization,
        "period": PERIOD,
        "benchmark": benchmark if benchmark in result.names else None,
        "num_trials": int(num_trials),
        "trial_sharpe_variance": variance,
        "deflated": selected,
        "decision_interval": result.decision_interval,
        "interval": result.interval,
        "num_decisions": result.num_steps,
        "num_days": len(dates),
        "initial_value": result.initial_value,
        "strategies": compute_metrics(
            result, annualization=annualization, num_trials=num_trials, trial_sharpes=trial_sharpes
        ),
    }


# --- tables ----------------------------------------------------------------------------------------
def _utc(ts: np.ndarray) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(np.asarray(ts, dtype="datetime64[ns]")).tz_localize("UTC")


def equity_frame(result: BacktestResult) -> pd.DataFrame:
    """``timestamp`` + one column per strategy, starting with the initial cash at the first bar."""
    stamps = np.concatenate([[np.datetime64(result.start_timestamp, "ns")], result.timestamps])
    first = np.full((1, len(result.names)), result.initial_value)
    values = np.concatenate([first, result.equity.numpy()], axis=0)
    frame = pd.DataFrame(values, columns=list(result.names))
    frame.insert(0, "timestamp", _utc(stamps))
    return frame


def daily_returns_frame(result: BacktestResult) -> pd.DataFrame:
    """``date`` + one column of daily returns per strategy."""
    dates, daily = result.daily_returns()
    frame = pd.DataFrame(daily.numpy(), columns=list(result.names))
    frame.insert(0, "date", pd.to_datetime(dates).date)
    return frame


def _session_last_rows(result: BacktestResult) -> np.ndarray:
    codes = result.session_dates.astype("datetime64[D]").astype(np.int64)
    return np.flatnonzero(np.r_[codes[1:] != codes[:-1], True])


def positions_frame(result: BacktestResult, max_rows: int = DEFAULT_MAX_ROWS) -> tuple[pd.DataFrame, str]:
    """Long positions table and its frequency (``"decision"`` or ``"session"``)."""
    weights = result.weights.numpy()  # (K, S, A)
    stamps = result.timestamps
    frequency = "decision"
    if np.count_nonzero(weights) > max_rows:
        rows = _session_last_rows(result)
        weights, stamps, frequency = weights[rows], stamps[rows], "session"
    k, s, a = np.nonzero(weights)
    frame = pd.DataFrame(
        {
            "timestamp": _utc(stamps[k]),
            "strategy": pd.Categorical.from_codes(s, categories=list(result.names)),
            "ticker": pd.Categorical.from_codes(a, categories=list(result.tickers)),
            "weight": weights[k, s, a].astype(np.float64),
        }
    )
    return frame, frequency


def trades_frame(result: BacktestResult, max_rows: int = DEFAULT_MAX_ROWS) -> tuple[pd.DataFrame, str]:
    """Long trades table (non-zero trades only) and its frequency (``"decision"`` or ``"session"``)."""
    notional = result.trades.numpy().astype(np.float64)  # (K, S, A)
    cost = result.trade_costs.numpy().astype(np.float64)
    stamps = result.fill_timestamps
    frequency = "decision"
    if np.count_nonzero(notional) > max_rows:
        # Rows are in time order, so each session is a contiguous block: sum the blocks.
        last = _session_last_rows(result)
        starts = np.r_[0, last[:-1] + 1]
        notional = np.add.reduceat(notional, starts, axis=0)
        cost = np.add.reduceat(cost, starts, axis=0)
        stamps = stamps[last]
        frequency = "session"
    k, s, a = np.nonzero(notional)
    frame = pd.DataFrame(
        {
            "timestamp": _utc(stamps[k]),
            "strategy": pd.Categorical.from_codes(s, categories=list(result.names)),
            "ticker": pd.Categorical.from_codes(a, categories=list(result.tickers)),
            "notional": notional[k, s, a],
            "cost": cost[k, s, a],
        }
    )
    return frame, frequency


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path, suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)


# --- tear sheet ------------------------------------------------------------------------------------
def write_tearsheet(path: Path, daily: pd.DataFrame, strategy: str, benchmark: str | None) -> str:
    """Draw the tear sheet PNG; returns ``"pyfolio"`` or ``"fallback"`` (what was drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    index = pd.DatetimeIndex(pd.to_datetime(daily["date"])).tz_localize("UTC")
    returns = pd.Series(daily[strategy].to_numpy(), index=index, name=strategy)
    bench = (
        pd.Series(daily[benchmark].to_numpy(), index=index, name=benchmark)
        if benchmark and benchmark in daily and benchmark != strategy
        else None
    )
    kind = "pyfolio"
    fig = None
    try:
        fig = _pyfolio_figure(returns, bench)
    except Exception as err:  # noqa: BLE001 - pyfolio fails in many ways on short or flat series
        log.info(
            "pyfolio could not draw the tear sheet (%s: %s); drawing a simple equity/drawdown figure",
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
        )
        kind = "fallback"
        fig = _fallback_figure(returns, bench)
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=72)
    finally:
        plt.close(fig)
    return kind


def _pyfolio_figure(returns: pd.Series, bench: pd.Series | None):
    if len(returns) < 2:
        raise ValueError("fewer than 2 daily returns")
    # pyfolio prints IPython HTML objects to stdout; `--json` output must stay clean.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        import pyfolio

        return pyfolio.create_returns_tear_sheet(returns, benchmark_rets=bench, return_fig=True)


def _fallback_figure(returns: pd.Series, bench: pd.Series | None):
    import matplotlib.pyplot as plt

    fig, (ax_eq, ax_dd) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for series in (returns, bench):
        if series is None:
            continue
        growth = (1.0 + series.fillna(0.0)).cumprod()
        ax_eq.plot(series.index, growth.to_numpy(), label=str(series.name), marker="o")
        peak = np.maximum.accumulate(np.r_[1.0, growth.to_numpy()])[1:]
        ax_dd.plot(series.index, growth.to_numpy() / peak - 1.0, label=str(series.name), marker="o")
    ax_eq.set_ylabel("growth of $1")
    ax_eq.legend()
    ax_dd.set_ylabel("drawdown")
    ax_eq.set_title("Equity and drawdown (daily; too few days for a pyfolio tear sheet)")
    fig.tight_layout()
    return fig


# --- everything ------------------------------------------------------------------------------------
def write_report(
    run_dir: str | Path,
    result: BacktestResult,
    *,
    window: str = "test",
    annualization: float = 252.0,
    num_trials: int = 1,
    trial_sharpes: Sequence[float] | None = None,
    benchmark: str = "buy_and_hold",
    tearsheet: bool = True,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> dict[str, Any]:
    """Write ``<run_dir>/backtest/`` and return the metrics.json document."""
    out_dir = Path(run_dir) / "backtest"
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = metrics_document(
        result,
        window=window,
        annualization=annualization,
        num_trials=num_trials,
        trial_sharpes=trial_sharpes,
        benchmark=benchmark,
    )
    _write_parquet(equity_frame(result), out_dir / "equity.parquet")
    positions, doc["positions_frequency"] = positions_frame(result, max_rows)
    _write_parquet(positions, out_dir / "positions.parquet")
    trades, doc["trades_frequency"] = trades_frame(result, max_rows)
    _write_parquet(trades, out_dir / "trades.parquet")
    daily = daily_returns_frame(result)
    _write_parquet(daily, out_dir / "daily_returns.parquet")
    doc["tearsheet"] = None
    if tearsheet:
        strategy = result.names[0]
        doc["tearsheet"] = write_tearsheet(out_dir / "tearsheet.png", daily, strategy, doc["benchmark"])
    atomic_write_json(out_dir / "metrics.json", json_safe(doc))
    return doc


def json_safe(obj: Any) -> Any:
    """NaN/inf -> None anywhere in a JSON document (json would write invalid NaN tokens)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, torch.Tensor | np.generic):
        return json_safe(obj.item())
    return obj
