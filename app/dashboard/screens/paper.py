"""Paper trading: orders, fills, positions and P&L from ``<home>/paper/journal.sqlite``."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import artifacts, charts, loaders, ui, views

st.title("Paper trading")

with ui.guard("paper"):
    tables = loaders.paper(ui.home())
    pnl = tables.get("pnl", pd.DataFrame())

    st.subheader("P&L")
    if pnl.empty:
        st.info("no P&L recorded yet (a dry run records decisions and orders only)")
    else:
        last = pnl.iloc[-1]
        cols = st.columns(4)
        cols[0].metric("Equity", views.format_metric(last.get("equity"), "money"), border=True)
        cols[1].metric("Cash", views.format_metric(last.get("cash"), "money"), border=True)
        cols[2].metric("Day P&L", views.format_metric(last.get("day_pnl"), "money"), border=True)
        cols[3].metric("Day return", views.format_metric(last.get("day_return"), "pct"), border=True)
        time_col = views.first_column(pnl, "recorded_at", "decision_ts", "time", "timestamp")
        if time_col and "equity" in pnl.columns:
            frame = pnl.assign(**{time_col: pd.to_datetime(pnl[time_col], utc=True, errors="coerce")})
            ui.plot(
                charts.line_figure(frame, time_col, ["equity"], "Paper account equity", yformat="$,.0f"),
                key="pnl",
            )

    counts = st.columns(4)
    for col, name in zip(counts, ("decisions", "orders", "fills", "positions"), strict=True):
        col.metric(f"{name.capitalize()} recorded", len(tables.get(name, ())), border=True)
    # Orders by final status, one per client_order_id (a re-run bar or a late fill is not counted twice).
    by_status = {k: v for k, v in artifacts.paper_order_counts(tables).items() if v}
    if by_status:
        st.caption("Orders by final status")
        cols = st.columns(len(by_status))
        for col, (name, count) in zip(cols, by_status.items(), strict=True):
            col.metric(name.replace("_", " ").capitalize(), count, border=True)

    for name in ("positions", "orders", "fills", "decisions", "events"):
        table = tables.get(name)
        st.subheader(name.capitalize())
        if table is None or table.empty:
            st.info(f"no {name} recorded yet")
        else:
            # Newest first: what happened this morning is what a person looks for.
            st.dataframe(views.tidy_table(table.iloc[::-1]), hide_index=True)
