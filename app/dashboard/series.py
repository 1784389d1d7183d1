"""Series and tables derived from a backtest's files and a run's training curves, for the charts.

No Streamlit here, so every function is unit-tested directly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


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
