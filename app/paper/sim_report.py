"""``podracer reconcile``'s printed form of the paper-vs-simulator record (``app.paper.sim_record``):
a table per day (paper and simulated P&L, fees, slippage, fill ratio) and one of the execution figures.
Torch-free: it reads the record only."""

from __future__ import annotations

import math

import pandas as pd
from rich.table import Table

from app.paper.sim_record import (
    GAP_SESSIONS,
    SimRecord,
    day_frame,
    gap_problem,
    order_frame,
    recent_gap_bps,
    summary,
)


def _money(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    value = round(value, 2)  # to the cent first: a cent's rounding of the cash reads +$0.00, not -$0.00
    return f"{'-' if value < 0 else '+'}${abs(value):,.2f}"


def _bp(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1%}"


def days_table(record: SimRecord) -> Table:
    """Per session: orders, paper vs simulated P&L and their gap, fees charged vs modelled, mean
    slippage (broker vs model, bp against the fill bar's open) and fill ratio."""
    days, orders = day_frame(record), order_frame(record)
    per_day = (
        orders.assign(
            notional=orders["filled_qty"] * orders["fill_open"],
            model=orders["model_qty"] * orders["fill_open"],
        )
        .groupby("session")
        .agg(
            slip=("slippage_bps", "mean"),
            model_bps=("model_bps", "mean"),
            filled=("notional", "sum"),
            wanted=("model", "sum"),
        )
        if len(orders)
        else pd.DataFrame(columns=["slip", "model_bps", "filled", "wanted"])
    )
    table = Table(title="paper vs simulator, per session")
    heads = (
        "session",
        "orders",
        "paper P&L",
        "sim P&L",
        "gap",
        "fees",
        "fees model",
        "slip bp",
        "model bp",
        "filled",
    )
    for head in heads:
        table.add_column(head, justify="left" if head == "session" else "right")
    for d in days.itertuples():
        o = per_day.loc[d.session] if d.session in per_day.index else None
        ratio = None if o is None or not o["wanted"] > 0 else float(o["filled"] / o["wanted"])
        table.add_row(
            d.session,
            str(d.orders),
            _money(d.paper_pnl),
            _money(d.sim_pnl),
            _money(d.pnl_gap),
            _money(d.fees_charged),
            _money(d.fees_model),
            _bp(None if o is None else float(o["slip"])),
            _bp(None if o is None else float(o["model_bps"])),
            _ratio(ratio),
        )
    return table


def figures_table(record: SimRecord) -> Table:
    """The execution figures over the whole record, and the recent gap against the bound."""
    s = summary(record)
    gap, fills = recent_gap_bps(record)
    table = Table(title="execution: broker vs model")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("sessions / orders / fills", f"{s['sessions']} / {s['orders']} / {s['fills']}"),
        ("slippage vs next open, mean (bp)", _bp(s["slippage_bps"])),
        (
            "slippage median / p10 / p90 (bp)",
            " / ".join(_bp(s[k]) for k in ("slippage_median_bps", "slippage_p10_bps", "slippage_p90_bps")),
        ),
        ("model, mean (bp)", _bp(s["model_bps"])),
        ("gap, broker less model (bp)", _bp(s["gap_bps"])),
        (
            f"gap, last {GAP_SESSIONS} sessions (bp; bound {record.bound_bps:g})",
            f"{_bp(gap)} over {fills} fills",
        ),
        ("fill ratio (filled / model's fill)", _ratio(s["fill_ratio"])),
        ("orders filled past the volume cap", str(s["over_cap"])),
        ("fees charged / modelled", f"{_money(s['fees_charged'])} / {_money(s['fees_model'])}"),
        ("fee gap", _money(s["fee_gap"])),
        ("P&L paper / simulated", f"{_money(s['paper_pnl'])} / {_money(s['sim_pnl'])}"),
        ("daily P&L correlation", "-" if s["pnl_correlation"] is None else f"{s['pnl_correlation']:.3f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    problem = gap_problem(record)
    table.caption = f"problem: {problem}" if problem else "within the bound"
    return table
