"""Plotly figures of the paper page's check against the simulator (``app.paper.sim_record``): the
paper account's equity at each session's close beside the simulated one, and the distribution of the
broker's fill slippage beside the execution model's. Pure functions, no Streamlit (as
``app.dashboard.charts``, whose layout they share)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.dashboard.charts import _LAYOUT, _bins


def sim_equity_figure(days: pd.DataFrame) -> go.Figure:
    """``paper_equity`` and ``sim_equity`` per session (``app.paper.sim_record.day_frame``)."""
    fig = go.Figure()
    mode = "lines+markers" if len(days) <= 60 else "lines"
    for col, name, color in (
        ("paper_equity", "paper (the broker's fills)", "#1f77b4"),
        ("sim_equity", "simulated (the model's fills)", "#ff7f0e"),
    ):
        fig.add_trace(
            go.Scatter(x=days["session"], y=days[col], name=name, mode=mode, line=dict(color=color, width=2))
        )
    fig.update_layout(title="Daily equity: paper vs simulator", **_LAYOUT)
    fig.update_yaxes(tickformat="$,.0f")
    return fig


def slippage_figure(orders: pd.DataFrame) -> go.Figure:
    """Histogram of the filled orders' slippage against the fill bar's open (bp, positive a cost), the
    broker's and the model's (``app.paper.sim_record.order_frame``)."""
    broker = orders["slippage_bps"].dropna().to_numpy(dtype="float64")
    model = orders.loc[orders["slippage_bps"].notna(), "model_bps"].dropna().to_numpy(dtype="float64")
    both = np.concatenate([broker, model]) if len(broker) or len(model) else np.zeros(1)
    fig = go.Figure()
    for values, name, color in ((broker, "broker", "#1f77b4"), (model, "model", "#ff7f0e")):
        fig.add_trace(go.Histogram(x=values, name=name, marker_color=color, opacity=0.7, xbins=_bins(both)))
    fig.update_layout(
        title="Fill slippage vs the next bar's open",
        barmode="overlay",
        xaxis_title="slippage (bp, positive: a cost)",
        yaxis_title="fills",
        **{**_LAYOUT, "hovermode": "closest", "height": 300},
    )
    return fig
