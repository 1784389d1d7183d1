"""Pure transforms from artifacts to what the pages show: metric cards, tables, derived series.

No Streamlit here, so every function is unit-tested directly. Formatting lives here too, so the
tests compare exactly the strings a user sees with the values in metrics.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

BENCHMARK_DEFAULT = "buy_and_hold"
CHAMPION_DEFAULT = "champion"

Kind = Literal["pct", "ratio", "prob", "money"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric of metrics.json: its key, card label, display kind and which direction is better."""

    key: str
    label: str
    kind: Kind
    higher_is_better: bool = True
    help: str = ""


# The eight cards of the Overview, in order (the list).
CARD_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("cum_returns_final", "Cum. return", "pct", help="Cumulative (total) return over the window."),
    MetricSpec("annual_return", "Ann. return", "pct", help="Annual return: compound annual growth rate."),
    MetricSpec(
        "annual_volatility", "Volatility", "pct", higher_is_better=False, help="Annualized std of returns."
    ),
    MetricSpec("sharpe_ratio", "Sharpe", "ratio", help="Annualized Sharpe ratio of daily returns (rf = 0)."),
    MetricSpec("sortino_ratio", "Sortino", "ratio", help="Annualized Sortino ratio (downside deviation)."),
    MetricSpec("max_drawdown", "Max drawdown", "pct", help="Worst peak-to-trough loss (negative)."),
    MetricSpec("calmar_ratio", "Calmar", "ratio", help="Annual return / |max drawdown|."),
    MetricSpec(
        "deflated_sharpe_ratio",
        "DSR",
        "prob",
        help="Deflated Sharpe ratio: probability the Sharpe is real after the number of pods tried.",
    ),
)

# The extra columns of the full comparison table.
TABLE_METRICS: tuple[MetricSpec, ...] = CARD_METRICS + (
    MetricSpec("probabilistic_sharpe_ratio", "PSR", "prob"),
    MetricSpec("turnover", "Turnover / day", "ratio", higher_is_better=False),
    # costs_paid is a fraction of the initial value (backtests.metrics.costs_paid).
    MetricSpec("costs_paid", "Costs (of initial)", "pct", higher_is_better=False),
    MetricSpec("exposure", "Exposure", "pct"),
    MetricSpec("hit_rate", "Hit rate", "pct"),
)


@dataclass(frozen=True)
class Card:
    """One ``st.metric`` card: what the page renders, already formatted."""

    strategy: str
    key: str
    label: str
    value: str
    delta: str | None
    delta_color: Literal["normal", "inverse", "off"]
    help: str


# --------------------------------------------------------------------------- formatting


def format_metric(value: float | None, kind: Kind) -> str:
    """The one display format of a metric value; ``n/a`` for null/NaN."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    value = float(value)
    if kind == "pct":
        return f"{value * 100:.2f}%"
    if kind == "money":
        return f"${value:,.2f}"
    return f"{value:.2f}"


def format_delta(delta: float | None, kind: Kind) -> str | None:
    """A card's delta: signed, percentage points for percent metrics; None when undefined."""
    if delta is None or not math.isfinite(delta):
        return None
    if kind == "pct":
        return f"{delta * 100:+.2f} pp"
    if kind == "money":
        return f"{delta:+,.2f}"
    return f"{delta:+.2f}"


def strategy_label(name: str) -> str:
    """A strategy's display name (``buy_and_hold`` -> Buy & hold)."""
    return {"buy_and_hold": "Buy & hold", "champion": "Champion", "cash": "Cash"}.get(
        name, name.replace("_", " ")
    )


# --------------------------------------------------------------------------- metrics


def benchmark_name(metrics: dict[str, Any]) -> str | None:
    """The benchmark strategy named by metrics.json (default buy_and_hold), if present."""
    strategies = metrics.get("strategies", {})
    name = metrics.get("benchmark") or BENCHMARK_DEFAULT
    return name if name in strategies else None


def champion_name(metrics: dict[str, Any]) -> str | None:
    """``champion`` if present, else the first strategy that is neither the benchmark nor cash."""
    strategies = list(metrics.get("strategies", {}))
    if CHAMPION_DEFAULT in strategies:
        return CHAMPION_DEFAULT
    bench = benchmark_name(metrics)
    others = [s for s in strategies if s not in (bench, "cash")]
    return others[0] if others else None


def metric_cards(metrics: dict[str, Any], strategy: str, versus: str | None = None) -> list[Card]:
    """Cards for ``strategy``; with ``versus``, each card's delta is strategy minus versus."""
    values = metrics["strategies"][strategy]
    other = metrics["strategies"].get(versus) if versus else None
    cards = []
    for spec in CARD_METRICS:
        value = values.get(spec.key)
        delta = None
        if other is not None:
            base = other.get(spec.key)
            if value is not None and base is not None:
                delta = format_delta(float(value) - float(base), spec.kind)
        cards.append(
            Card(
                strategy=strategy,
                key=spec.key,
                label=spec.label,
                value=format_metric(value, spec.kind),
                delta=delta,
                delta_color="normal" if spec.higher_is_better else "inverse",
                help=spec.help,
            )
        )
    return cards


def card_notes(cards: list[Card] | None = None) -> str:
    """One caption explaining every card (what each number means)."""
    specs = CARD_METRICS if cards is None else [s for s in CARD_METRICS if s.key in {c.key for c in cards}]
    notes = " · ".join(f"**{s.label}**: {s.help}" for s in specs)
    return (
        notes
        + " · The small numbers under the champion's cards are champion minus benchmark (pp: percentage points)."
    )


def comparison_table(metrics: dict[str, Any]) -> pd.DataFrame:
    """Every strategy (rows) by every metric (columns), formatted."""
    rows = {}
    for name, values in metrics.get("strategies", {}).items():
        rows[strategy_label(name)] = {
            spec.label: format_metric(values.get(spec.key), spec.kind) for spec in TABLE_METRICS
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "strategy"
    return table


def markdown_table(table: pd.DataFrame) -> str:
    """A small DataFrame as a GitHub-flavoured markdown table (index as the first column)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    head = [cell(table.index.name or ""), *map(cell, table.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for index, row in table.iterrows():
        lines.append("| " + " | ".join([cell(index), *map(cell, row.tolist())]) + " |")
    return "\n".join(lines)


def window_caption(metrics: dict[str, Any]) -> str:
    """One line saying which window and conventions the numbers use."""
    parts = []
    if metrics.get("window"):
        parts.append(f"{metrics['window']} window")
    if metrics.get("start") and metrics.get("end"):
        parts.append(f"{metrics['start']} to {metrics['end']}")
    if metrics.get("period"):
        parts.append(f"{metrics['period']} returns")
    if metrics.get("annualization"):
        parts.append(f"annualization {metrics['annualization']}")
    if metrics.get("num_trials") is not None:
        parts.append(f"DSR over {metrics['num_trials']} trial(s)")
    return " · ".join(parts)


# --------------------------------------------------------------------------- series


def drawdown(equity: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """Underwater curve: equity / running peak - 1 (0 at a new high, negative below it)."""
    peak = equity.cummax()
    return equity / peak - 1.0


def monthly_returns(daily: pd.Series) -> pd.DataFrame:
    """Compounded monthly returns as a year x month table (columns Jan..Dec, NaN where no data)."""
    daily = daily.dropna()
    if daily.empty:
        return pd.DataFrame(columns=_MONTHS, dtype="float64")
    index = pd.DatetimeIndex(daily.index)
    grouped = (1.0 + daily).groupby([index.year, index.month]).prod() - 1.0
    table = grouped.unstack(level=1).reindex(columns=range(1, 13))
    table.columns = _MONTHS
    table.index.name = "year"
    return table


def daily_returns_table(daily: pd.Series) -> pd.DataFrame:
    """Daily returns as a week x weekday table (rows: the week's Monday, columns Mon..Fri)."""
    daily = daily.dropna()
    if daily.empty:
        return pd.DataFrame(columns=_WEEKDAYS, dtype="float64")
    index = pd.DatetimeIndex(daily.index).normalize()
    frame = pd.DataFrame(
        {
            "week": (index - pd.to_timedelta(index.weekday, unit="D")).strftime("%Y-%m-%d"),
            "weekday": index.weekday,
            "value": daily.to_numpy(),
        }
    )
    table = frame.pivot_table(index="week", columns="weekday", values="value", aggfunc="last")
    table = table.reindex(columns=range(5))
    table.columns = _WEEKDAYS
    table.index.name = "week of"
    return table


_WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def weights_wide(positions: pd.DataFrame, strategy: str, max_points: int = 1500) -> pd.DataFrame:
    """Weights of ``strategy`` as timestamp x ticker (0 where not held), at most ``max_points`` rows.

    Long runs are thinned by keeping the last row of each bucket: weights are a step function
    (held until the next decision), so the last row is what was actually held at the bucket's end.
    """
    rows = positions[positions["strategy"] == strategy]
    if rows.empty:
        return pd.DataFrame()
    wide = rows.pivot_table(index="timestamp", columns="ticker", values="weight", aggfunc="last").fillna(0.0)
    # Largest average holdings (over the whole window) first: the area chart stacks them lowest.
    wide = wide[wide.mean().sort_values(ascending=False, kind="stable").index]
    if len(wide) > max_points:
        bucket = np.arange(len(wide)) * max_points // len(wide)
        last = np.flatnonzero(np.r_[bucket[1:] != bucket[:-1], True])
        wide = wide.iloc[last]
    return wide


def trades_table(trades: pd.DataFrame, strategy: str | None = None, limit: int = 5000) -> pd.DataFrame:
    """Most recent trades first (at most ``limit`` rows), with a side column."""
    rows = trades if strategy is None else trades[trades["strategy"] == strategy]
    rows = rows.sort_values("timestamp", ascending=False, kind="stable").head(limit).copy()
    rows.insert(3, "side", np.where(rows["notional"] >= 0, "buy", "sell"))
    return rows.reset_index(drop=True)


def cost_summary(trades: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: number of trades, traded notional (absolute), costs paid, costs in bp of notional."""
    if trades.empty:
        return pd.DataFrame(columns=["trades", "traded notional", "costs", "cost bp"])
    grouped = trades.assign(abs_notional=trades["notional"].abs()).groupby("strategy")
    table = pd.DataFrame(
        {
            "trades": grouped.size(),
            "traded notional": grouped["abs_notional"].sum(),
            "costs": grouped["cost"].sum(),
        }
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        table["cost bp"] = np.where(
            table["traded notional"] > 0, table["costs"] / table["traded notional"] * 1e4, np.nan
        )
    return table.round(2)


def costs_by_ticker(trades: pd.DataFrame, strategy: str) -> pd.DataFrame:
    """Per ticker of ``strategy``: trades, traded notional and costs, most expensive first."""
    rows = trades[trades["strategy"] == strategy]
    table = (
        rows.assign(abs_notional=rows["notional"].abs())
        .groupby("ticker")
        .agg(trades=("cost", "size"), traded_notional=("abs_notional", "sum"), costs=("cost", "sum"))
    )
    return table.sort_values("costs", ascending=False)


# --------------------------------------------------------------------------- tables


def tidy_table(frame: pd.DataFrame, time_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A store's rows ready for ``st.dataframe``: dict/list cells as compact JSON, times as UTC.

    Nested cells (hyper-parameters, metrics, payloads) would otherwise make the Arrow conversion
    fall back or fail; unix-second time columns become readable timestamps.
    """
    import json

    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object and out[col].map(lambda v: isinstance(v, dict | list)).any():
            out[col] = out[col].map(
                lambda v: json.dumps(v, sort_keys=True, default=str) if isinstance(v, dict | list) else v
            )
    for col in time_columns:
        if col in out.columns:
            out[col] = _to_time(out[col])
    return out


# --------------------------------------------------------------------------- tournament


def first_column(frame: pd.DataFrame, *names: str) -> str | None:
    """The first of ``names`` that is a column of ``frame`` (stages name things slightly differently)."""
    return next((n for n in names if n in frame.columns), None)


def lineage(pods: pd.DataFrame, pod_id: str, max_depth: int = 1000) -> pd.DataFrame:
    """The ancestry of ``pod_id``: itself, its parent, grandparent, ... (cycles are cut)."""
    id_col = first_column(pods, "pod_id", "id", "pod")
    parent_col = first_column(pods, "parent_id", "parent")
    if pods.empty or id_col is None:
        return pd.DataFrame()
    by_id = {str(row[id_col]): row for _, row in pods.iterrows()}
    chain, seen, current = [], set(), str(pod_id)
    while current in by_id and current not in seen and len(chain) < max_depth:
        seen.add(current)
        row = by_id[current]
        chain.append(row)
        parent = row[parent_col] if parent_col else None
        if parent is None or (isinstance(parent, float) and math.isnan(parent)) or str(parent) == "":
            break
        current = str(parent)
    return pd.DataFrame(chain).reset_index(drop=True)


def status_counts(pods: pd.DataFrame) -> dict[str, int]:
    """Pods tried, and how many ended in each status (``failed`` included)."""
    counts = {"tried": len(pods)}
    col = first_column(pods, "status", "state")
    if col is not None:
        counts.update({str(k): int(v) for k, v in pods[col].value_counts().items()})
    return counts


def score_history(events: pd.DataFrame) -> pd.DataFrame:
    """Scored events as ``time, pod, score`` rows (for the fitness-over-time chart)."""
    if events.empty:
        return pd.DataFrame(columns=["time", "pod", "score"])
    time_col = first_column(events, "time", "timestamp", "created_at", "ts")
    pod_col = first_column(events, "pod_id", "pod", "pod_id_")
    kind_col = first_column(events, "kind", "event", "type")
    rows = events if kind_col is None else events[events[kind_col].astype(str) == "scored"]
    scores = (
        rows["score"]
        if "score" in rows.columns
        else rows.get("payload", pd.Series(dtype=object)).map(_payload_score)
    )
    out = pd.DataFrame(
        {
            "time": _to_time(rows[time_col]) if time_col else pd.RangeIndex(len(rows)),
            "pod": rows[pod_col].astype(str) if pod_col else "pod",
            "score": pd.to_numeric(scores, errors="coerce"),
        }
    ).dropna(subset=["score"])
    return out.sort_values("time", kind="stable").reset_index(drop=True)


def _payload_score(payload: Any) -> float | None:
    import json

    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return None
    if isinstance(payload, dict):
        for key in ("score", "fitness", "sharpe"):
            if isinstance(payload.get(key), int | float):
                return float(payload[key])
    return None


def _to_time(col: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(col):
        # Unix seconds are the usual SQLite convention.
        return pd.to_datetime(col, unit="s", utc=True)
    return pd.to_datetime(col, utc=True, errors="coerce", format="mixed")


# --------------------------------------------------------------------------- training


# Step counters of a curve: x axes, not metrics. ``lineage_env_steps`` (tournament pods) counts the
# steps of the pod's ancestors too, so a child's curve continues its parent's.
STEP_COLUMNS = ("env_steps", "lineage_env_steps", "global_step", "update", "iteration")


def curve_x_axes(curves: dict[str, pd.DataFrame]) -> list[str]:
    """The step columns every curve has (``env_steps`` first)."""
    return [c for c in STEP_COLUMNS[:2] if curves and all(c in f.columns for f in curves.values())]


def curve_metrics(curves: dict[str, pd.DataFrame]) -> list[str]:
    """Metric columns present in any pod's curve, ``eval/`` and ``charts/`` first."""
    names: set[str] = set()
    for frame in curves.values():
        names.update(
            c for c in frame.columns if c not in STEP_COLUMNS and pd.api.types.is_numeric_dtype(frame[c])
        )
    order = {"eval": 0, "charts": 1, "tournament": 2, "losses": 3}
    return sorted(names, key=lambda n: (order.get(n.split("/", 1)[0], 4), n))
