"""Plotly figures for the dashboard pages.

Pure functions: DataFrames in, ``plotly.graph_objects.Figure`` out (no Streamlit). Every long series
is thinned first by :mod:`app.dashboard.downsample`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.dashboard.downsample import MAX_POINTS, downsample
from app.dashboard.formatting import strategy_label
from backtests.metrics_model import CapacityRow

MAX_AREA_TICKERS = 12

_COLORS = {
    "champion": "#1f77b4",
    "buy_and_hold": "#ff7f0e",
    "cash": "#7f7f7f",
    "equal_weight": "#2ca02c",
    "linear": "#9467bd",
    "boosted": "#8c564b",
}
# Title top-left, legend top-right on the same line, so neither hides the other.
_LAYOUT = dict(
    margin=dict(l=10, r=10, t=50, b=10),
    title_x=0.0,
    title_y=0.97,
    title_yanchor="top",
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
    hovermode="x unified",
    height=360,
)


# --------------------------------------------------------------------------- overview


def equity_figure(equity: pd.DataFrame, max_points: int = MAX_POINTS) -> go.Figure:
    """Equity in dollars per strategy (champion first)."""
    fig = go.Figure()
    for name in _ordered(equity.columns):
        line = downsample(equity[name].dropna(), max_points)
        fig.add_trace(
            go.Scatter(
                x=line.index,
                y=line.to_numpy(),
                name=strategy_label(name),
                mode="lines",
                line=dict(color=_COLORS.get(name), width=2.2 if name == "champion" else 1.4),
            )
        )
    fig.update_layout(title="Equity vs benchmark", yaxis_title="equity ($)", **_LAYOUT)
    return fig


def underwater_figure(drawdowns: pd.DataFrame, max_points: int = MAX_POINTS) -> go.Figure:
    """Drawdown from the running peak, per strategy, as filled areas below zero."""
    fig = go.Figure()
    for name in _ordered(drawdowns.columns):
        if name == "cash":
            continue
        line = downsample(drawdowns[name].dropna(), max_points, method="minmax")
        fig.add_trace(
            go.Scatter(
                x=line.index,
                y=line.to_numpy(),
                name=strategy_label(name),
                mode="lines",
                # Only the champion is filled: a second filled area would hide the first.
                fill="tozeroy" if name == "champion" else None,
                line=dict(color=_COLORS.get(name), width=1),
            )
        )
    fig.update_layout(title="Underwater (drawdown from peak)", yaxis_tickformat=".1%", **_LAYOUT)
    return fig


def monthly_heatmap(table: pd.DataFrame, title: str = "Monthly returns") -> go.Figure:
    """Heatmap of a returns table (year x month, or week x weekday): red below zero, green above,
    values printed in the cells."""
    z = table.to_numpy(dtype="float64")
    text = [[("" if np.isnan(v) else f"{v * 100:.1f}%") for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(table.columns),
            y=[str(y) for y in table.index],
            text=text,
            texttemplate="%{text}",
            colorscale="RdYlGn",
            zmid=0.0,
            hovertemplate="%{y} %{x}: %{text}<extra></extra>",
            colorbar=dict(tickformat=".0%"),
        )
    )
    layout = {**_LAYOUT, "height": min(900, max(180, 60 + 28 * len(table))), "hovermode": "closest"}
    # Category axes: plotly would read the year labels as numbers and label "2,023.5".
    fig.update_layout(
        title=title, yaxis_autorange="reversed", yaxis_type="category", xaxis_type="category", **layout
    )
    return fig


# --------------------------------------------------------------------------- positions and costs


def weights_area(wide: pd.DataFrame, max_tickers: int = MAX_AREA_TICKERS) -> go.Figure:
    """Stacked weights over time; tickers beyond the ``max_tickers`` largest summed into 'other'."""
    if wide.shape[1] > max_tickers:
        keep = list(wide.columns[:max_tickers])
        wide = wide[keep].assign(other=wide.drop(columns=keep).sum(axis=1))
    fig = go.Figure()
    for ticker in wide.columns:
        fig.add_trace(
            go.Scatter(
                x=wide.index,
                y=wide[ticker].to_numpy(),
                name=str(ticker),
                mode="lines",
                stackgroup="weights",
                line=dict(width=0.5),
            )
        )
    fig.update_layout(title="Portfolio weights (rest is cash)", yaxis_tickformat=".0%", **_LAYOUT)
    return fig


def cumulative_costs_figure(trades: pd.DataFrame, max_points: int = MAX_POINTS) -> go.Figure:
    """Cumulative transaction costs paid per strategy."""
    fig = go.Figure()
    for name, rows in trades.groupby("strategy", sort=False):
        cum = rows.set_index("timestamp")["cost"].cumsum()
        line = downsample(cum, max_points)
        fig.add_trace(
            go.Scatter(
                x=line.index,
                y=line.to_numpy(),
                name=strategy_label(str(name)),
                mode="lines",
                line=dict(color=_COLORS.get(str(name))),
            )
        )
    fig.update_layout(title="Cumulative costs paid", yaxis_title="$", **_LAYOUT)
    return fig


# --------------------------------------------------------------------------- tournament / training


# The leaderboard's pods in colour, every other pod in one grey trace: a legend entry per pod is
# unreadable past a dozen pods, and one trace per pod is slow to draw for hundreds.
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79",
)  # fmt: skip
_GREY = "#c7c7c7"


def _gapped(rows: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One trace's x/y/pod arrays for many pods' lines: each pod's points in time order, the pods
    separated by None (a gap), built without a Python loop over pods (hundreds of them)."""
    rows = rows.sort_values(["pod", x], kind="stable")
    pods = rows["pod"].astype(str).to_numpy(dtype=object)
    starts = np.flatnonzero(pods[1:] != pods[:-1]) + 1  # where the next pod's line begins
    xs = np.insert(rows[x].to_numpy(dtype=object), starts, None)
    ys = np.insert(rows[y].to_numpy(dtype=object), starts, None)
    return xs, ys, np.insert(pods, starts, None)


def fitness_figure(history: pd.DataFrame, leaders: list[str] | None = None) -> go.Figure:
    """Validation scores over time: the leaderboard's pods coloured, the rest grey, best so far dotted.

    ``leaders``: the leaderboard's pod ids, best first. No legend entry per pod: hovering a point
    names its pod.
    """
    leaders = [str(p) for p in (leaders or [])]
    fig = go.Figure()
    pods = history["pod"].astype(str)
    others = history[~pods.isin(leaders)]
    if not others.empty:
        xs, ys, names = _gapped(others, "time", "score")
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                text=names,
                name="other pods",
                mode="lines+markers",
                line=dict(color=_GREY, width=1),
                marker=dict(color=_GREY, size=4),
                hovertemplate="%{text}: %{y:.3f}<extra></extra>",
            )
        )
    for rank, pod in enumerate(leaders):
        rows = history[pods == pod]
        if rows.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=rows["time"],
                y=rows["score"],
                name=pod,
                mode="lines+markers",
                showlegend=False,
                line=dict(color=_PALETTE[rank % len(_PALETTE)], width=2),
                marker=dict(size=7),
                hovertemplate=f"{pod} (leaderboard #{rank + 1}): " + "%{y:.3f}<extra></extra>",
            )
        )
    if not history.empty:
        best = history["score"].cummax()
        fig.add_trace(
            go.Scatter(
                x=history["time"],
                y=best,
                name="best so far",
                mode="lines",
                line=dict(color="black", dash="dot", shape="hv"),
                hovertemplate="best so far: %{y:.3f}<extra></extra>",
            )
        )
    title = "Fitness over time (leaderboard pods in colour)"
    fig.update_layout(title=title, yaxis_title="score", **{**_LAYOUT, "hovermode": "closest"})
    return fig


_ROLE_STYLE = {
    "other": dict(color=_GREY, size=7, symbol="circle"),
    "leaderboard": dict(color="#1f77b4", size=10, symbol="circle"),
    "champion": dict(color="#d62728", size=16, symbol="star"),
}


def lineage_figure(points: pd.DataFrame) -> go.Figure:
    """Generation x score, one marker per scored pod, a line from each parent to its child.

    Hovering a pod shows its score, its parent and the hyper-parameters it changed (the mutation).
    Pods of one generation are spread a little along x (by launch order) so they do not overlap.
    """
    fig = go.Figure()
    if points.empty:
        return fig
    points = points.copy()
    spread = points.groupby("generation")["seq"].rank(method="first") - 1
    width = points.groupby("generation")["seq"].transform("size").clip(lower=2) - 1
    points["x"] = points["generation"] + 0.6 * (spread / width - 0.5) * (width > 0)
    where = dict(zip(points["pod"], zip(points["x"], points["score"], strict=True), strict=True))
    xs: list = []
    ys: list = []
    for pod, parent in zip(points["pod"], points["parent"], strict=True):
        if parent in where:
            xs += [where[parent][0], where[pod][0], None]
            ys += [where[parent][1], where[pod][1], None]
    if xs:
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="lines", name="parent -> child", hoverinfo="skip",
                line=dict(color="#9e9e9e", width=0.8),
            )
        )  # fmt: skip
    for role in ("other", "leaderboard", "champion"):
        rows = points[points["role"] == role]
        if rows.empty:
            continue
        text = [
            f"<b>{p}</b> (gen {g}) score {s:.3f}<br>parent: {par or 'none'}<br>{_wrap(m)}"
            for p, g, s, par, m in zip(
                rows["pod"], rows["generation"], rows["score"], rows["parent"], rows["mutation"], strict=True
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=rows["x"],
                y=rows["score"],
                mode="markers",
                name={"other": "other pods", "leaderboard": "leaderboard", "champion": "champion"}[role],
                text=text,
                hovertemplate="%{text}<extra></extra>",
                marker=dict(**_ROLE_STYLE[role], line=dict(color="white", width=0.5)),
            )
        )
    fig.update_layout(
        title="Lineage: generation x score (hover a pod for its mutation)",
        xaxis=dict(title="generation", dtick=1),
        yaxis_title="score",
        **{**_LAYOUT, "hovermode": "closest", "height": 420},
    )
    return fig


def _wrap(text: str, width: int = 60) -> str:
    """Hover text on several lines (plotly does not wrap)."""
    parts, line = [], ""
    for piece in text.split(", "):
        if line and len(line) + len(piece) > width:
            parts.append(line)
            line = piece
        else:
            line = f"{line}, {piece}" if line else piece
    parts.append(line)
    return "<br>".join(parts)


def pbo_histogram(logits: list[float], pbo: float | None = None) -> go.Figure:
    """Histogram of the CSCV logits (out-of-sample relative rank of the in-sample best, as a logit).

    Mass left of zero is the probability of backtest overfitting: the selected pod ranked below
    the median out of sample on those splits.
    """
    values = np.asarray(logits, dtype="float64")
    fig = go.Figure()
    fig.add_trace(
        go.Histogram(
            x=values[values <= 0], name="overfit (logit <= 0)", marker_color="#d62728", opacity=0.8,
            xbins=_bins(values),
        )
    )  # fmt: skip
    fig.add_trace(
        go.Histogram(
            x=values[values > 0], name="held up (logit > 0)", marker_color="#2ca02c", opacity=0.8,
            xbins=_bins(values),
        )
    )  # fmt: skip
    fig.add_vline(x=0, line=dict(color="black", dash="dot"))
    title = "PBO: logits of the selected pod's out-of-sample rank"
    if pbo is not None:
        title += f" (PBO {pbo:.2f})"
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis_title="logit of relative rank (left of 0: below the median)",
        yaxis_title="splits",
        **{**_LAYOUT, "hovermode": "closest", "height": 300},
    )
    return fig


def capacity_figure(rows: Sequence[CapacityRow], estimated: float | None = None) -> go.Figure:
    """The capacity curve: net period return of the strategy and the baselines against the account size
    (log axis), the strategy's net Sharpe on a second axis, the estimated capacity marked."""
    frame = pd.DataFrame([row.model_dump() for row in rows])
    # Each size's alpha over the verdict's benchmark and its p-value, beside its return in the hover.
    alpha = [
        "alpha n/a"
        if a is None or pd.isna(a)
        else f"alpha {100 * a:+.3f}%/day (p {'n/a' if p is None or pd.isna(p) else f'{p:.3f}'})"
        for a, p in zip(frame["alpha_per_day"], frame["alpha_p_value"], strict=True)
    ]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=frame["capital"], y=frame["cum_returns_final"], name=str(frame["strategy"].iloc[0]),
            mode="lines+markers", line=dict(width=3), text=alpha,
            hovertemplate="%{y:.2%}, %{text}",
        )
    )  # fmt: skip
    baselines = pd.DataFrame(list(frame["baselines"])) if "baselines" in frame else pd.DataFrame()
    for name in baselines.columns:
        fig.add_trace(
            go.Scatter(
                x=frame["capital"], y=baselines[name], name=name, mode="lines+markers", line=dict(dash="dot")
            )
        )
    fig.add_trace(
        go.Scatter(
            x=frame["capital"], y=frame["sharpe_ratio"], name="net Sharpe (right axis)", yaxis="y2",
            mode="lines+markers", line=dict(color="#7f7f7f", dash="dash"),
        )
    )  # fmt: skip
    if estimated is not None:
        fig.add_vline(x=estimated, line=dict(color="black", dash="dot"))
    fig.update_layout(
        title="Capacity: net return by account size"
        + (f" (estimated capacity ${estimated:,.0f})" if estimated else ""),
        xaxis=dict(type="log", title="account size ($)", tickprefix="$"),
        yaxis=dict(title="net period return", tickformat=".1%"),
        yaxis2=dict(title="net Sharpe", overlaying="y", side="right", showgrid=False),
        **{**_LAYOUT, "hovermode": "x unified", "height": 340},
    )
    return fig


def _bins(values: np.ndarray) -> dict:
    if values.size == 0:
        return {}
    lo, hi = float(values.min()), float(values.max())
    size = max((hi - lo) / 20, 1e-6)
    # Edges aligned on zero so no bar straddles the overfit line.
    start = np.floor(lo / size) * size
    return dict(start=start, end=hi + size, size=size)


def learning_curves_figure(
    curves: dict[str, pd.DataFrame], metric: str, max_points: int = MAX_POINTS, x: str = "env_steps"
) -> go.Figure:
    """``metric`` against ``x`` (env steps), one line per pod."""
    fig = go.Figure()
    for pod, frame in curves.items():
        if metric not in frame.columns or x not in frame.columns:
            continue
        series = frame.set_index(x)[metric].dropna()
        line = downsample(series, max_points)
        # Short curves (a few evaluations) need markers: a one-point line draws nothing.
        mode = "lines+markers" if len(line) <= 60 else "lines"
        fig.add_trace(go.Scatter(x=line.index, y=line.to_numpy(), name=pod, mode=mode))
    fig.update_layout(title=metric, xaxis_title=x.replace("_", " "), **{**_LAYOUT, "hovermode": "closest"})
    return fig


def line_figure(
    frame: pd.DataFrame, x: str, ys: list[str], title: str, yformat: str | None = None
) -> go.Figure:
    """A generic multi-line chart (nightly scores, paper P&L)."""
    fig = go.Figure()
    for col in ys:
        series = frame.set_index(x)[col].dropna()
        line = downsample(series, MAX_POINTS) if not isinstance(series.index, pd.MultiIndex) else series
        fig.add_trace(go.Scatter(x=line.index, y=line.to_numpy(), name=col, mode="lines+markers"))
    fig.update_layout(title=title, **_LAYOUT)
    if yformat:
        fig.update_yaxes(tickformat=yformat)
    return fig


def _bundle_name(bundle_id: str) -> str:
    """A bundle's legend name; the paper benchmark's ids (``app.paper.benchmark``) by what it is."""
    return (
        "benchmark (no qualified champion)"
        if bundle_id.startswith("benchmark-")
        else f"bundle {bundle_id[:12]}"
    )


def champion_equity_figure(frame: pd.DataFrame, x: str, title: str = "Paper account equity") -> go.Figure:
    """Equity over time, one colour per bundle (``bundle_id``; "?" before bundles were journaled);
    each stretch starts at the previous one's last point, so the line has no gap at a switch."""
    fig = go.Figure()
    frame = frame.sort_values(x).reset_index(drop=True)
    bundles = frame["bundle_id"].fillna("?").astype(str)
    colors = {b: _PALETTE[i % len(_PALETTE)] for i, b in enumerate(dict.fromkeys(bundles))}
    mode = "lines+markers" if len(frame) <= 60 else "lines"
    seen: set[str] = set()
    for _, part in frame.groupby((bundles != bundles.shift()).cumsum(), sort=True):
        bundle = bundles[part.index[0]]
        rows = frame.loc[max(part.index[0] - 1, 0) : part.index[-1]]
        fig.add_trace(
            go.Scatter(
                x=rows[x], y=rows["equity"], mode=mode, name=_bundle_name(bundle), legendgroup=bundle,
                showlegend=bundle not in seen, line=dict(color=colors[bundle], width=2),
            )
        )  # fmt: skip
        seen.add(bundle)
    fig.update_layout(title=title, **_LAYOUT)
    fig.update_yaxes(tickformat="$,.0f")
    return fig


def _ordered(columns: pd.Index) -> list[str]:
    """Champion first, then the benchmark, then the rest in file order."""
    names = [str(c) for c in columns]
    head = [n for n in ("champion", "buy_and_hold") if n in names]
    return head + [n for n in names if n not in head]
