"""The Walk-forward page's table and chart: pure functions of a walk-forward's fold records
(``app.walkforward.record.FoldRecord``) and its stitched account's equity (no Streamlit), so they are
unit-tested directly."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from app.dashboard.charts import equity_figure
from app.walkforward.record import FoldRecord
from backtests.metrics_model import ChampionSpan


def folds_frame(records: Sequence[FoldRecord]) -> pd.DataFrame:
    """One row per fold: windows, pods tried, the Sharpes on the gate's window and its decision, the policy in
    charge and its test figures (plain values: no nested JSON in a cell)."""
    rows = []
    for r in records:
        gate, test, w = r.gate, r.test, r.windows
        rows.append(
            {
                "fold": r.index,
                "test": f"{w['test'][0]} .. {w['test'][1]}",
                "train": f"{w['train'][0]} .. {w['train'][1]}",
                "validation": f"{w['valid'][0]} .. {w['valid'][1]}",
                "pods tried": r.pods_tried,
                "gate Sharpe (challenger)": gate.challenger.sharpe_ratio,
                "gate Sharpe (incumbent)": gate.incumbent.sharpe_ratio
                if gate.incumbent is not None
                else None,
                "gate": "promoted" if r.promoted else "kept",
                "in charge": r.in_charge_label(),
                "test return": test.period_return,
                "buy & hold return": test.buy_and_hold_return,
                "test Sharpe": test.sharpe_ratio,
                "costs ($)": test.costs_paid,
                "seconds": r.seconds.get("total"),
                "gate reason": gate.reason,
            }
        )
    return pd.DataFrame(rows)


def before_champion_note(records: Sequence[FoldRecord]) -> str:
    """A caption's clause naming what the account held in the folds no champion was in charge of
    (empty when a champion traded every fold)."""
    waiting = [r for r in records if r.in_charge is None]
    if not waiting:
        return ""
    held = sorted({r.in_charge_label() for r in waiting})
    return f"; until a champion qualified (its gate test significant) it held {', '.join(held)} ({len(waiting)} fold(s))"


def champion_changes(records: Sequence[FoldRecord]) -> list[tuple[str, str]]:
    """``(first test session, new champion)`` for each fold whose policy in charge differs from the
    previous fold's (the first fold counts when it starts with a champion, not with what the account
    holds before one qualifies)."""
    changes: list[tuple[str, str]] = []
    previous = records[0].in_charge_label() if records and records[0].in_charge is None else None
    for r in records:
        now = r.in_charge_label()
        if now != previous:
            changes.append((r.test_window()[0], now))
        previous = now
    return changes


def walkforward_equity_figure(equity: pd.DataFrame, records: Sequence[FoldRecord]) -> go.Figure:
    """The stitched account against the baselines, a dotted line at each fold's first test session
    and a labelled solid line where a new champion took over."""
    fig = equity_figure(equity)
    changed = {day for day, _ in champion_changes(records)}
    for r in records:
        day = r.test_window()[0]
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


def spans_frame(spans: Sequence[ChampionSpan]) -> pd.DataFrame:
    """metrics.json ``walkforward.champions`` as a table: champion, first and last session, sessions,
    folds (as text)."""
    return pd.DataFrame(
        [
            {
                "champion": s.champion,
                "first session": s.first,
                "last session": s.last,
                "sessions": s.sessions,
                "folds": ", ".join(str(f) for f in s.folds),
            }
            for s in spans
        ]
    )
