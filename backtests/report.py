"""Backtest artifacts: ``<run>/backtest/`` with metrics.json, parquet tables and a tear sheet.

The files and their schemas are a contract with the dashboard (see ARCHITECTURE.md):

- ``metrics.json``: :class:`backtests.metrics_model.MetricsDocument` (its fields say what each key
  holds; ARCHITECTURE.md and docs/backtests.md list them): the window and its conventions, the PBO
  over every pod tried, the costs used, the test's level, ``strategies: {name: {<every key of
  backtests.metrics_model.METRIC_KEYS>}}``, ``oos_test`` (the selected strategy's out-of-sample test
  on this window after the looks counted, ``backtests.oos_test``; null without a selected
  strategy), ``selection`` (the diagnostics of the tournament's choice on the validation window,
  ``backtests.snooping``), the verdict (``backtests.verdict``), the capacity curve (``capacity``,
  ``estimated_capacity``, ``estimated_capacity_rule``: the selected strategy replayed at several
  account sizes, ``backtests.capacity``; null when not run) and descriptive extras;
- ``equity.parquet``: ``timestamp`` (UTC) + one float64 column per strategy (equity in $); the first
  row is the initial cash at the window's first bar;
- ``positions.parquet``: long ``timestamp, strategy, ticker, weight`` (zero weights left out);
- ``trades.parquet``: one row per fill, ``timestamp, strategy, ticker, notional, cost, shares,
  fill_price, spread_cost, impact_cost, fill_volume, participation`` (``timestamp`` = the fill bar;
  ``notional`` signed, + = buy, at the fill price; ``shares`` signed; ``cost`` = the broker's fees +
  slippage + half-spread + impact in $, of which ``spread_cost`` is slippage + half-spread and
  ``impact_cost`` the square-root impact; ``fill_volume`` the fill bar's volume in shares as expected
  at the decision bar, the volume cap's base, and ``participation`` the fill's share of it); orders
  under the env's ``min_order_notional`` are never placed, so no dust rows; summed per session
  (large runs), a session whose fills net to zero shares keeps its row (its costs) with a null
  ``fill_price``;
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from backtests import looks, oos_test, selection, snooping
from backtests import metrics as m
from backtests.baselines import is_baseline
from backtests.capacity import capacity_fields, capacity_levels, cost_sensitivity_fields
from backtests.engine import BacktestResult
from backtests.frames import (
    DEFAULT_MAX_ROWS,
    daily_returns_frame,
    equity_frame,
    positions_frame,
    trades_frame,
)
from backtests.metrics_model import RELATIVE_METRICS, MetricsDocument
from backtests.verdict import (
    ANNUALIZED_KEYS,
    ANNUALIZED_MIN_SESSIONS,
    MIN_OOS_SESSIONS,
    SIGNIFICANCE_LEVEL,
    LooksNow,
    judge,
    restate,
    verdict_fields,
)
from data.atomic import atomic_path
from data.errors import one_line

log = logging.getLogger(__name__)

PERIOD = "daily"
#: The benchmarks the selected strategy's excess returns are tested against, when in the backtest (the
#: verdict requires the document's ``benchmark``; the others are reported).
EXCESS_BENCHMARKS: tuple[str, ...] = ("buy_and_hold", "equal_weight", "linear", "boosted")
#: The window on which a backtest is out of sample for the run's selection.
HELD_OUT_WINDOW = "test"


def compute_metrics(result: BacktestResult, *, annualization: float) -> dict[str, dict[str, float | None]]:
    """Every metric of every strategy, on daily returns, as JSON-able floats (None = undefined), plus
    the probabilistic Sharpe ratio against 0 of each and its :data:`RELATIVE_METRICS` to buy-and-hold.
    Annualized compounding metrics are null below :data:`ANNUALIZED_MIN_SESSIONS` sessions."""
    _, daily = result.daily_returns()
    summary = result.summary(annualization)
    psr = selection.probabilistic_sharpe_ratio(daily)
    relative: dict[str, list[float | None]] = {key: [None] * len(result.names) for key in RELATIVE_METRICS}
    if "buy_and_hold" in result.names:
        bench = daily[:, result.names.index("buy_and_hold")]
        kw = {"annualization": annualization}
        relative = {
            "beta": m.to_floats(m.beta(daily, bench)),
            "alpha": m.to_floats(m.alpha(daily, bench, **kw)),
            "information_ratio": m.to_floats(m.information_ratio(daily, bench, **kw)),
        }
    short = daily.shape[0] < ANNUALIZED_MIN_SESSIONS
    out: dict[str, dict[str, float | None]] = {}
    for i, name in enumerate(result.names):
        row = {key: m.to_floats(summary[key][i : i + 1])[0] for key in m.SUMMARY_METRICS}
        row["probabilistic_sharpe_ratio"] = m.to_floats(psr[i : i + 1])[0]
        row.update({key: relative[key][i] for key in RELATIVE_METRICS})
        if short:
            row.update({key: None for key in ANNUALIZED_KEYS})
        out[name] = row
    return out


def selected_strategy(result: BacktestResult) -> str | None:
    """The strategy a run selected (its first non-baseline one: the champion), or None."""
    return next((n for n in result.names if not is_baseline(n)), None)


def oos_fields(
    result: BacktestResult,
    *,
    window: str,
    benchmark: str | None,
    earlier_looks: Sequence[float | None] = (),
    seed: int = 0,
    market: str | None = None,
    level: float = SIGNIFICANCE_LEVEL,
) -> dict[str, Any] | None:
    """The ``oos_test`` block: the selected strategy's out-of-sample test on this window at ``level``
    (``backtests.oos_test``), or None without a selected strategy."""
    strategy = selected_strategy(result)
    if strategy is None:
        return None
    _, daily = result.daily_returns()
    columns = daily.detach().cpu().numpy().astype(np.float64)
    benchmarks = {n: columns[:, result.names.index(n)] for n in EXCESS_BENCHMARKS if n in result.names}
    block = oos_test.out_of_sample_test(
        columns[:, result.names.index(strategy)],
        benchmarks,
        strategy=strategy,
        benchmark=benchmark if benchmark in benchmarks else None,
        earlier_looks=earlier_looks,
        seed=seed,
        level=level,
        market=market,
    )
    return {
        **block,
        "held_out": window == HELD_OUT_WINDOW,
        "prefers_no_asset": strategy in result.no_preference,
    }


def as_selection_inputs(trial_returns: Any | None) -> snooping.SelectionInputs | None:
    """``trial_returns`` as :class:`backtests.snooping.SelectionInputs` (a bare ``(T, N)`` matrix has no
    champion column and no benchmark)."""
    if trial_returns is None or isinstance(trial_returns, snooping.SelectionInputs):
        return trial_returns
    return snooping.SelectionInputs(returns=trial_returns)


def pbo_fields(trial_returns: Any | None, num_splits: int = 16) -> dict[str, Any]:
    """``pbo``, ``pbo_logits``, ``pbo_num_splits`` (and ``pbo_num_trials``) from the trials' daily
    validation returns ``(T, N)``; nulls with fewer than 2 trials or rows too few for CSCV."""
    empty = {"pbo": None, "pbo_logits": [], "pbo_num_splits": None, "pbo_num_trials": 0}
    if trial_returns is None:
        return empty
    arr = np.array(trial_returns, dtype=np.float64)  # a writable copy (parquet arrays are read-only)
    if arr.ndim != 2 or arr.shape[1] < 2:
        return {**empty, "pbo_num_trials": int(arr.shape[1]) if arr.ndim == 2 else 0}
    try:
        res = selection.probability_of_backtest_overfitting(arr, num_splits=num_splits)
    except ValueError as err:
        log.info("no PBO: %s", err)
        return {**empty, "pbo_num_trials": int(arr.shape[1])}
    return {
        "pbo": res.pbo,
        "pbo_logits": [float(v) for v in res.logits],
        "pbo_num_splits": res.num_splits if res.pbo is not None else None,
        "pbo_num_trials": res.num_trials,
    }


def costs_label(cost_rate: float | None, slippage_bps: float | None) -> str:
    """``"costs 0.20% + 1 bp"`` (commission rate + slippage), or ``"costs on"`` when not recorded."""
    if cost_rate is None or slippage_bps is None:
        return "costs on"
    return f"costs {100 * float(cost_rate):.2f}% + {float(slippage_bps):g} bp"


def execution_settings(
    params: Any, *, data_feed: str | None = None, volume_scale: float | None = None
) -> dict[str, Any]:
    """The execution model's and the broker's settings of ``params`` (``EnvParams`` or the ``[env]``
    section) as metrics.json records them (the regulatory fees' dated schedules and their rounding only
    at Alpaca, the profile that charges them), with what was priced: ``data_feed`` (the bars' feed,
    ``data.loader.MarketSplits.feed``) and ``volume_scale`` (``[data] volume_scale``), when given."""
    keys = ("spread_bps", "impact_coef", "max_participation", "min_order_notional")
    out: dict[str, Any] = {
        "broker": str(params.broker),
        "spread": str(params.spread),
        **{key: float(getattr(params, key)) for key in keys},
    }
    if params.broker == "alpaca":
        out["sec_fee_schedule"] = [list(row) for row in params.sec_fee_schedule]
        out["taf_schedule"] = [list(row) for row in params.taf_schedule]
        out["round_fees"] = bool(params.round_fees)
    if data_feed is not None:
        out["data_feed"] = str(data_feed)
    if volume_scale is not None:
        out["volume_scale"] = float(volume_scale)
    return out


def priced_settings(params: Any, splits: Any, data: Any) -> dict[str, Any]:
    """:func:`execution_settings` with what was priced: the feed of ``splits`` (a
    ``data.loader.MarketSplits``; None for one without it) and ``data``'s ``volume_scale`` (the
    ``[data]`` section)."""
    feed = getattr(splits, "feed", None)
    return execution_settings(params, data_feed=feed, volume_scale=getattr(data, "volume_scale", None))


def metrics_document(
    result: BacktestResult,
    *,
    window: str,
    annualization: float,
    num_trials: int = 1,
    trial_returns: Any | None = None,
    benchmark: str = "buy_and_hold",
    cost_rate: float | None = None,
    slippage_bps: float | None = None,
    execution: Mapping[str, Any] | None = None,
    significance_level: float = SIGNIFICANCE_LEVEL,
    earlier_looks: Sequence[float | None] = (),
    seed: int = 0,
    market: str | None = None,
    look: looks.Look | None = None,
    now: LooksNow | None = None,
) -> MetricsDocument:
    """The metrics.json document (also what ``podracer backtest --json`` prints).

    ``trial_returns``: the daily validation returns of every pod tried, a ``(T, N)`` matrix or
    :class:`backtests.snooping.SelectionInputs` with the champion's column and buy-and-hold's
    validation returns (the selection diagnostics and the PBO); ``earlier_looks``: the per-day Sharpe
    ratios of the earlier looks at this window of this ``market`` (``backtests.looks``); ``seed``: the
    bootstraps' seed; ``cost_rate`` / ``slippage_bps``: the env's costs and ``execution`` its execution
    model (:func:`execution_settings`; all recorded for captions);
    ``look``: the look recorded for this backtest (``oos_test.look``: readers find its count there) and
    ``now``: the looks counted now (the verdict is stated with them: ``backtests.verdict.restate``).
    """
    start, end = result.date_range()
    dates, _ = result.daily_returns()
    if (execution or {}).get("broker") == "alpaca":
        cost_rate = 0.0  # the commission charged: none at Alpaca (its fees are recorded beside)
    trials = as_selection_inputs(trial_returns)
    bench = benchmark if benchmark in result.names else None
    fields: dict[str, Any] = {
        "window": window,
        "start": start,
        "end": end,
        "annualization": int(annualization) if float(annualization).is_integer() else annualization,
        "period": PERIOD,
        "benchmark": bench,
        "num_trials": int(num_trials),
        **pbo_fields(trials.returns if trials is not None else None),
        "num_sessions": len(dates),
        "annualized_min_sessions": ANNUALIZED_MIN_SESSIONS,
        "cost_rate": None if cost_rate is None else float(cost_rate),
        "slippage_bps": None if slippage_bps is None else float(slippage_bps),
        **{
            key: float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
            for key, value in (execution or {}).items()
        },
        "significance_level": float(significance_level),
        "min_oos_sessions": MIN_OOS_SESSIONS,
        "decision_interval": result.decision_interval,
        "interval": result.interval,
        "num_decisions": result.num_steps,
        "num_days": len(dates),
        "initial_value": result.initial_value,
        "strategies": compute_metrics(result, annualization=annualization),
        "oos_test": oos_fields(
            result,
            window=window,
            benchmark=bench,
            earlier_looks=earlier_looks,
            seed=seed,
            market=market,
            level=significance_level,
        ),
        "selection": snooping.selection_diagnostics(trials, seed=seed),
    }
    doc = MetricsDocument.parse(json_safe(fields))
    oos = doc.oos_test
    if oos is None:
        return doc.model_copy(update=verdict_fields(None))
    if look is not None:
        doc = doc.model_copy(update={"oos_test": oos.model_copy(update={"look": looks.look_fields(look)})})
    doc = doc.model_copy(update=verdict_fields(judge(doc, oos.strategy)))
    return restate(doc, now)


# --- tables ----------------------------------------------------------------------------------------
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
            "pyfolio could not draw the tear sheet (%s); drawing a simple equity/drawdown figure",
            one_line(err),
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
    tearsheet: bool = True,
    max_rows: int = DEFAULT_MAX_ROWS,
    capacity: BacktestResult | None = None,
    max_participation: float = 0.0,
    **document: Any,
) -> MetricsDocument:
    """Write ``<run_dir>/backtest/`` and return the metrics.json document (``document``: the keyword
    arguments of :func:`metrics_document`). ``capacity``: the ``backtests.capacity.run_capacity``
    result of the same window (adds ``capacity`` / ``estimated_capacity``; ``max_participation``: the
    env's volume cap, to count the fills it capped)."""
    out_dir = Path(run_dir) / "backtest"
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = metrics_document(result, window=window, **document)
    doc = doc.updated(**json_safe(capacity_document(capacity, window, max_participation, document)))
    if doc.capacity and doc.oos_test is not None and doc.oos_test.strategy is not None:
        # Judged again with the capacity curve: a sign change at nearby account sizes is flagged.
        doc = doc.model_copy(update=verdict_fields(judge(doc, doc.oos_test.strategy)))
    _write_parquet(equity_frame(result), out_dir / "equity.parquet")
    positions, positions_frequency = positions_frame(result, max_rows)
    _write_parquet(positions, out_dir / "positions.parquet")
    trades, trades_frequency = trades_frame(result, max_rows)
    _write_parquet(trades, out_dir / "trades.parquet")
    daily = daily_returns_frame(result)
    _write_parquet(daily, out_dir / "daily_returns.parquet")
    drawn = None
    if tearsheet:
        drawn = write_tearsheet(out_dir / "tearsheet.png", daily, result.names[0], doc.benchmark)
    doc = doc.model_copy(
        update={
            "positions_frequency": positions_frequency,
            "trades_frequency": trades_frequency,
            "tearsheet": drawn,
        }
    )
    doc.write(out_dir / "metrics.json")
    return doc


def capacity_document(
    capacity: BacktestResult | None, window: str, max_participation: float, document: dict[str, Any]
) -> dict[str, Any]:
    """metrics.json's capacity keys (null without a capacity run): each size judged by the same
    document as the report's, less the selection diagnostics (the verdict does not read them)."""
    if capacity is None:
        return {
            "capacity": None,
            "estimated_capacity": None,
            "estimated_capacity_rule": None,
            "cost_sensitivity": None,
        }
    kwargs = {k: v for k, v in document.items() if k != "trial_returns"}

    def judged(sub: BacktestResult) -> MetricsDocument:
        return metrics_document(sub, window=window, **kwargs)

    fields = capacity_fields(capacity, max_participation, judged, capacity_levels(capacity))
    return {**fields, "cost_sensitivity": cost_sensitivity_fields(capacity, judged)}


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
