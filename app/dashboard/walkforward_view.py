"""The Walk-forward page's table and chart: pure functions of a walk-forward's fold records and its
stitched account's equity (no Streamlit), so they are unit-tested directly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from app.dashboard.charts import equity_figure

CASH = "cash"


def _in_charge(record: Mapping[str, Any]) -> str:
    label = record.get("in_charge")
    return str(label["run"]) if label else CASH


def folds_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per fold: windows, pods tried, the Sharpes on the gate's window and its decision, the policy in
    charge and its test figures (plain values: no nested JSON in a cell)."""
    rows = []
    for r in records:
        gate = r.get("gate") or {}
        test = r.get("test") or {}
        w = r["windows"]
        rows.append(
            {
                "fold": int(r["index"]),
                "test": f"{w['test'][0]} .. {w['test'][1]}",
                "train": f"{w['train'][0]} .. {w['train'][1]}",
                "validation": f"{w['valid'][0]} .. {w['valid'][1]}",
                "pods tried": r.get("pods_tried"),
                "gate Sharpe (challenger)": (gate.get("challenger") or {}).get("sharpe_ratio"),
                "gate Sharpe (incumbent)": (gate.get("incumbent") or {}).get("sharpe_ratio"),
                "gate": "promoted" if r.get("promoted") else "kept",
                "in charge": _in_charge(r),
                "test return": test.get("return"),
                "buy & hold return": test.get("buy_and_hold_return"),
                "test Sharpe": test.get("sharpe_ratio"),
                "costs ($)": test.get("costs_paid"),
                "seconds": (r.get("seconds") or {}).get("total"),
                "gate reason": gate.get("reason"),
            }
        )
    return pd.DataFrame(rows)


def champion_changes(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(first test session, new champion)`` for each fold whose policy in charge differs from the
    previous fold's (the first fold counts when it starts with a champion)."""
    changes, previous = [], CASH
    for r in records:
        now = _in_charge(r)
        if now != previous:
            changes.append((r["windows"]["test"][0], now))
        previous = now
    return changes


def walkforward_equity_figure(equity: pd.DataFrame, records: Sequence[Mapping[str, Any]]) -> go.Figure:
    """The stitched account against the baselines, a dotted line at each fold's first test session
    and a labelled solid line where a new champion took over."""
    fig = equity_figure(equity)
    changed = {day for day, _ in champion_changes(records)}
    for r in records:
        day = r["windows"]["test"][0]
        if day not in changed:
            fig.add_vline(x=pd.Timestamp(day, tz="UTC"), line=dict(color="#bbbbbb", width=1, dash="dot"))
    for day, name in champion_changes(records):
        fig.add_vline(x=pd.Timestamp(day, tz="UTC"), line=dict(color="#d62728", width=1.2))
        fig.add_annotation(
            x=pd.Timestamp(day, tz="UTC"),
            y=1.0,
            yref="paper",
            text=name,
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font=dict(size=10, color="#d62728"),
        )
    fig.update_layout(title="Stitched out-of-sample account vs baselines (folds dotted, new champions red)")
    return fig


def spans_frame(spans: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """metrics.json ``walkforward.champions`` as a table: champion, first and last session, sessions,
    folds (as text)."""
    return pd.DataFrame(
        [
            {
                "champion": s["champion"],
                "first session": s["first"],
                "last session": s["last"],
                "sessions": s["sessions"],
                "folds": ", ".join(str(f) for f in s.get("folds") or []),
            }
            for s in spans
        ]
    )
