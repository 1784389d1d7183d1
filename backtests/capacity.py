"""How much money a strategy can run: its backtest replayed at several account sizes in one pass,
and the size beyond which its own trading eats the edge.

The env's execution model (``envs.execution``: a half-spread, a cap on each fill's share of the bar's
volume, square-root impact) makes a fill's cost grow with its size, so the same decisions net less
on a bigger account. :func:`run_capacity` runs the selected strategy and the baselines at every size
of :data:`CAPITAL_LEVELS` as rows of one batched env (``engine.run_backtest(capital=...)``);
:func:`capacity_fields` turns that into metrics.json's ``capacity`` (per size: the net Sharpe, the
period return, the mean daily alpha over the verdict's benchmark and its p-value, the costs, the mean
participation, the share of fills capped by the volume limit, and the verdict's outcome at that size,
each size judged exactly as the report judges its own) and ``estimated_capacity``:

- the largest size up to which the edge stays significant, counted from the smallest size where it is
  significant (``estimated_capacity_rule: "significant"``: it reads the verdict at each size, the
  test of the alpha, its p-value after the looks). The run need not start at the smallest size: a
  strategy that trades many names often pays its per-order fixed costs (fees rounded up to the
  cent, the $1 minimum order) at every size, and on a small account they can eat an edge that a
  larger one keeps; the report's line names the size the run starts from;
- otherwise, when the smallest size's net Sharpe is positive, the largest size up to which the net
  Sharpe stays at least half of the smallest size's (``"half_sharpe"``: it reads the net Sharpe);
- otherwise null (``"no_edge"``: nothing to scale).

Replaying the champion at other sizes on the held-out window is a report, not a selection: it counts
no look of its own (``backtests.looks``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from backtests import engine
from backtests.baselines import is_baseline
from backtests.engine import BacktestResult, capacity_name
from backtests.metrics_model import ExcessFigures, MetricsDocument
from data.market import MarketData
from envs import execution
from envs.trading import EnvParams

#: Account sizes of the capacity curve, in $ (retail to institutional).
CAPITAL_LEVELS: tuple[float, ...] = (1e4, 1e5, 1e6, 1e7, 1e8)
#: Baselines replayed beside the strategy at every size.
CAPACITY_BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "linear", "boosted")
#: ``estimated_capacity`` by the Sharpe rule: the net Sharpe at least this fraction of the smallest size's.
SHARPE_FRACTION = 0.5
#: Multiples of the cost model every strategy is replayed at (``cost_sensitivity``).
COST_LEVELS: tuple[float, ...] = (0.0, 1.0, 2.0)


def cost_name(column: str, level: float) -> str:
    """The column of ``column`` replayed at ``level`` times the cost model."""
    return f"{column}~{level:g}x"


def run_capacity(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, Any],
    *,
    levels: Sequence[float] = CAPITAL_LEVELS,
    device: str | torch.device | None = None,
    seed: int = 0,
    linear: Any | None = None,
    cost_levels: Sequence[float] = COST_LEVELS,
    boosted: Any | None = None,
) -> BacktestResult:
    """Every policy and :data:`CAPACITY_BASELINES` at every size of ``levels``, in one pass, then at
    the env's own account size at every multiple of :data:`COST_LEVELS` of the cost model (one pass
    per multiple: the cost terms are the env's constants; columns :func:`cost_name`); dollars in
    units of each column's starting capital (``engine.run_backtest``'s ``capital``); ``linear``: the
    fitted linear baseline (``backtests.linear.LinearModel``; none: no ``linear`` column), ``boosted``
    the boosted one (``backtests.boosted.BoostedModel``); every baseline under the run's execution
    rules, the volume cap included (``backtests.baselines.investor``)."""
    runs = [
        engine.run_backtest(
            market,
            params,
            policies,
            baselines=CAPACITY_BASELINES,
            device=device,
            seed=seed,
            capital=levels,
            linear=linear,
            boosted=boosted,
        )
    ]
    for level in cost_levels:
        run = engine.run_backtest(
            market,
            execution.scaled_costs(params, level),
            policies,
            baselines=CAPACITY_BASELINES,
            device=device,
            seed=seed,
            capital=[float(params.initial_cash)],
            linear=linear,
            boosted=boosted,
        )
        runs.append(dataclasses.replace(run, names=tuple(cost_name(n, level) for n in run.names)))
    return concat_results(runs)


#: The fields of a ``BacktestResult`` with one column per strategy on axis 1.
_COLUMN_FIELDS = (
    "equity",
    "returns",
    "costs",
    "turnover",
    "day_equity",
    "weights",
    "trades",
    "trade_costs",
    "shares",
    "spread_costs",
    "impact_costs",
)


def concat_results(runs: Sequence[BacktestResult]) -> BacktestResult:
    """The columns of several runs of the same window side by side."""
    first = runs[0]
    if len(runs) == 1:
        return first
    changes: dict[str, Any] = {"names": tuple(n for r in runs for n in r.names)}
    for name in _COLUMN_FIELDS:
        values = [getattr(r, name) for r in runs]
        changes[name] = None if any(v is None for v in values) else torch.cat(values, dim=1)
    changes["terminated_at"] = tuple(x for r in runs for x in r.terminated_at)
    return dataclasses.replace(first, **changes)


def _columns(result: BacktestResult, cols: Sequence[int], names: Sequence[str]) -> BacktestResult:
    """Columns ``cols`` of ``result`` under ``names``."""
    pick = torch.as_tensor(list(cols), dtype=torch.long)
    changes: dict[str, Any] = {"names": tuple(names)}
    for name in _COLUMN_FIELDS:
        value = getattr(result, name)
        changes[name] = None if value is None else value.index_select(1, pick)
    changes["terminated_at"] = tuple(result.terminated_at[i] for i in cols)
    return dataclasses.replace(result, **changes)


def capacity_levels(result: BacktestResult) -> list[float]:
    """The account sizes of a :func:`run_capacity` result's capacity columns."""
    return sorted({float(n.rsplit("@", 1)[1]) for n in result.names if "~" not in n})


def at_cost_level(result: BacktestResult, level: float) -> BacktestResult | None:
    """The columns of one cost level of a :func:`run_capacity` result, under their plain names
    (None: the result has no such level)."""
    suffix = cost_name("", level)
    cols = [i for i, n in enumerate(result.names) if n.endswith(suffix)]
    if not cols:
        return None
    return _columns(result, cols, [result.names[i][: -len(suffix)].rsplit("@", 1)[0] for i in cols])


def cost_sensitivity_fields(
    result: BacktestResult,
    document: Callable[[BacktestResult], MetricsDocument],
    levels: Sequence[float] = COST_LEVELS,
) -> list[dict[str, Any]] | None:
    """metrics.json's ``cost_sensitivity`` from a :func:`run_capacity` result: per cost level, the
    verdict and every strategy's net Sharpe and return, each level judged by ``document`` (the
    report's own); None when the result has no cost levels."""
    rows = []
    for level in levels:
        sub = at_cost_level(result, level)
        if sub is None:
            return None
        doc = document(sub)
        rows.append(
            {
                "level": float(level),
                "strategy": next((n for n in sub.names if not is_baseline(n)), None),
                "verdict_outcome": doc.verdict_outcome,
                "strategies": {
                    name: {"sharpe_ratio": m.sharpe_ratio, "cum_returns_final": m.cum_returns_final}
                    for name, m in doc.strategies.items()
                },
            }
        )
    return rows


def sensitivity_line(doc: MetricsDocument) -> str | None:
    """One line: the strategy's net Sharpe and the verdict at each cost level (None without them)."""
    rows = doc.cost_sensitivity or []
    if not rows:
        return None
    parts = []
    for row in rows:
        figures = row.strategies.get(row.strategy or "")
        sharpe = None if figures is None else figures.sharpe_ratio
        text = "n/a" if sharpe is None else f"{sharpe:.2f}"
        parts.append(f"{row.level:g}x Sharpe {text} {row.verdict_outcome or 'n/a'}")
    return "cost sensitivity (the cost model scaled): " + " · ".join(parts)


def at_level(result: BacktestResult, capital: float) -> BacktestResult:
    """The columns of one size of a :func:`run_capacity` result, under their plain names."""
    suffix = capacity_name("", capital)
    cols = [i for i, n in enumerate(result.names) if n.endswith(suffix)]
    return _columns(result, cols, [result.names[i][: -len(suffix)] for i in cols])


def _fill_stats(
    result: BacktestResult, column: int, max_participation: float
) -> tuple[float | None, float | None]:
    """``(mean participation, share of fills at the volume cap)`` of one column's fills (None: no fill)."""
    if result.shares is None or result.fill_volume is None:
        return None, None
    shares = result.shares[:, column].abs().to(torch.float64)  # (K, A)
    volume = result.fill_volume.to(torch.float64)
    filled = (shares > 0) & (volume > 0)
    if not bool(filled.any()):
        return None, None
    participation = shares[filled] / volume[filled]
    capped = (
        participation >= max_participation * (1 - 1e-4)
        if max_participation > 0
        else torch.zeros_like(filled[filled])
    )
    return float(participation.mean()), float(capped.to(torch.float64).mean())


def capacity_fields(
    result: BacktestResult,
    max_participation: float,
    document: Callable[[BacktestResult], MetricsDocument],
    levels: Sequence[float] = CAPITAL_LEVELS,
) -> dict[str, Any]:
    """metrics.json's ``capacity``, ``estimated_capacity`` and ``estimated_capacity_rule`` from a
    :func:`run_capacity` result; ``document`` builds the metrics document of one size's columns (the
    report's own, so each size is judged as the report judges); ``max_participation``: the env's
    volume cap (a fill at it counts as capped)."""
    rows = []
    for capital in levels:
        sub = at_level(result, capital)
        strategy = next((n for n in sub.names if not is_baseline(n)), None)
        if strategy is None:
            return {"capacity": [], "estimated_capacity": None, "estimated_capacity_rule": "no_edge"}
        doc = document(sub)
        metrics = doc.strategies[strategy]
        participation, capped = _fill_stats(sub, sub.names.index(strategy), max_participation)
        alpha = _alpha(doc)
        rows.append(
            {
                "capital": float(capital),
                "strategy": strategy,
                "sharpe_ratio": metrics.sharpe_ratio,
                "cum_returns_final": metrics.cum_returns_final,
                "alpha_per_day": alpha.alpha_per_day if alpha is not None else None,
                "alpha_p_value": alpha.alpha_p_value if alpha is not None else None,
                "costs_paid": metrics.costs_paid,
                "mean_participation": participation,
                "capped_share": capped,
                "verdict_outcome": doc.verdict_outcome,
                "baselines": {
                    name: doc.strategies[name].cum_returns_final for name in sub.names if is_baseline(name)
                },
            }
        )
    return {"capacity": rows, **estimate(rows)}


def _alpha(doc: MetricsDocument) -> ExcessFigures | None:
    """The out-of-sample test's block of the verdict's benchmark in ``doc`` (its alpha), if any."""
    oos = doc.oos_test
    if oos is None or oos.benchmark is None:
        return None
    return oos.excess.get(oos.benchmark)


def significant_from(outcomes: Sequence[str | None]) -> int | None:
    """The index of the smallest size whose verdict is significant, given each size's verdict
    outcome from the smallest up (None: none is)."""
    return next((i for i, outcome in enumerate(outcomes) if outcome == "significant"), None)


def estimate(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``estimated_capacity`` and its rule from the ``capacity`` rows (see the module docstring)."""
    if not rows:
        return {"estimated_capacity": None, "estimated_capacity_rule": "no_edge"}
    start = significant_from([row.get("verdict_outcome") for row in rows])
    if start is not None:
        last = rows[start]["capital"]
        for row in rows[start + 1 :]:
            if row.get("verdict_outcome") != "significant":
                break
            last = row["capital"]
        return {"estimated_capacity": last, "estimated_capacity_rule": "significant"}
    first = rows[0].get("sharpe_ratio")
    if first is None or not np.isfinite(first) or first <= 0:
        return {"estimated_capacity": None, "estimated_capacity_rule": "no_edge"}
    last = rows[0]["capital"]
    for row in rows[1:]:
        sharpe = row.get("sharpe_ratio")
        if sharpe is None or sharpe < SHARPE_FRACTION * first:
            break
        last = row["capital"]
    return {"estimated_capacity": last, "estimated_capacity_rule": "half_sharpe"}


def money(value: float) -> str:
    """``$10k``, ``$1M``, ``$100M``: an account size as shown."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"${value / scale:g}{unit}"
    return f"${value:g}"


def curve_lines(doc: MetricsDocument) -> list[str]:
    """The capacity curve of a metrics.json document in a few lines (empty without one)."""
    rows = doc.capacity or []
    if not rows:
        return []

    def pct(v: Any) -> str:
        return "n/a" if v is None else f"{100 * v:+.2f}%"

    def num(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    lines = ["capacity (the strategy replayed at each account size, execution costs on):"]
    lines.append(
        f"  {'capital':>7}  {'Sharpe':>6}  {'return':>8}  {'alpha/day':>9}  {'alpha p':>7}  {'costs':>7}"
        f"  {'particip.':>9}  {'capped':>6}  verdict"
    )
    for row in rows:
        part, capped = row.mean_participation, row.capped_share
        part_text = "n/a" if part is None else f"{100 * part:.3f}%"
        capped_text = "n/a" if capped is None else f"{100 * capped:.0f}%"
        costs_text = "n/a" if row.costs_paid is None else f"{100 * row.costs_paid:.2f}%"
        alpha_text = "n/a" if row.alpha_per_day is None else f"{100 * row.alpha_per_day:+.3f}%"
        lines.append(
            f"  {money(row.capital):>7}  {num(row.sharpe_ratio, '6.2f')}"
            f"  {pct(row.cum_returns_final):>8}  {alpha_text:>9}  {num(row.alpha_p_value, '7.3f'):>7}"
            f"  {costs_text:>7}  {part_text:>9}  {capped_text:>6}  {row.verdict_outcome or 'n/a'}"
        )
    lines.append(f"  estimated capacity: {capacity_rule_text(doc)}")
    sensitivity = sensitivity_line(doc)
    if sensitivity:
        lines.append(sensitivity)
    return lines


def capacity_rule_text(doc: MetricsDocument) -> str:
    """``"$1M (the largest size with a significant edge)"``: the estimate and its rule, in words."""
    cap = doc.estimated_capacity
    why = {
        "significant": "the largest size with a significant edge: read on the verdict at each size, the "
        "alpha's p-value after the looks",
        "half_sharpe": "the largest size keeping half the smallest size's net Sharpe: read on the Sharpe "
        "column",
    }.get(
        doc.estimated_capacity_rule or "",
        "no edge to scale: the smallest size is neither significant nor of positive net Sharpe",
    )
    rows = doc.capacity or []
    start = significant_from([row.verdict_outcome for row in rows])
    if doc.estimated_capacity_rule == "significant" and start:  # (a run that starts above the smallest size)
        why += f", from {money(rows[start].capital)}: not significant below it"
    return f"{money(cap) if cap is not None else 'none'} ({why})"
