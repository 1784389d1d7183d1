"""Paper trading: orders, fills, positions and P&L from ``<home>/paper/journal.sqlite``; the paper
account against the simulator (``<home>/paper/sim_reconcile.json``: daily equity, fill slippage); the
days the journal compacted (``[retention] journal_sessions``) as one summary row each."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import artifacts, charts, formatting, loaders, paper_charts, tables, ui
from app.paper.sim_record import day_frame, gap_problem, order_frame, summary
from app.paper.slippage import slippage_report

st.title("Paper trading")

with ui.guard("paper"):
    journal = loaders.paper(ui.home())
    pnl = journal.get("pnl", pd.DataFrame())

    st.subheader("P&L")
    if pnl.empty:
        st.info("no P&L recorded yet (a dry run records decisions and orders only)")
    else:
        last = pnl.iloc[-1]
        cols = st.columns(4)
        cols[0].metric("Equity", formatting.format_metric(last.get("equity"), "money"), border=True)
        cols[1].metric("Cash", formatting.format_metric(last.get("cash"), "money"), border=True)
        cols[2].metric("Day P&L", formatting.format_metric(last.get("day_pnl"), "money"), border=True)
        cols[3].metric("Day return", formatting.format_metric(last.get("day_return"), "pct"), border=True)
        time_col = tables.first_column(pnl, "recorded_at", "decision_ts", "time", "timestamp")
        if time_col and "equity" in pnl.columns:
            frame = pnl.assign(**{time_col: pd.to_datetime(pnl[time_col], utc=True, errors="coerce")})
            if "bundle_id" not in frame.columns:
                frame = frame.assign(bundle_id=None)
            # One colour per champion (the bundle that decided each cycle); the Nightly page has
            # each one's record.
            ui.plot(charts.champion_equity_figure(frame, time_col), key="pnl")

    counts = st.columns(4)
    for col, name in zip(counts, ("decisions", "orders", "fills", "positions"), strict=True):
        col.metric(f"{name.capitalize()} recorded", len(journal.get(name, ())), border=True)
    # Orders by final status, one per client_order_id (a re-run bar or a late fill is not counted twice).
    by_status = {k: v for k, v in artifacts.paper_order_counts(journal).items() if v}
    if by_status:
        st.caption("Orders by final status")
        cols = st.columns(len(by_status))
        for col, (name, count) in zip(cols, by_status.items(), strict=True):
            col.metric(name.replace("_", " ").capitalize(), count, border=True)

    orders = journal.get("orders", pd.DataFrame())
    by_ticker = slippage_report(orders, by_ticker=True)
    if not by_ticker.empty:
        # The execution model checked against the broker's fills: realized vs predicted, in bps of
        # the decision bar's close (positive: a cost), per champion and ticker.
        st.subheader("Slippage vs the execution model")
        for bundle_id, rows in by_ticker.groupby("bundle_id", sort=False):
            mean = slippage_report(orders[orders["bundle_id"] == bundle_id]).iloc[0]
            st.caption(
                f"champion {str(bundle_id)[:12]}: realized {mean['realized_bps']:.1f} bp vs model "
                f"{mean['model_bps']:.1f} bp over {int(mean['fills'])} fills"
            )
            st.dataframe(tables.tidy_table(rows.drop(columns="bundle_id")), hide_index=True)

    record = loaders.sim_record(ui.home())
    if record is not None and record.days:
        # The simulator's replay of the sessions (podracer reconcile): the broker's fills against the
        # env's execution model at the next bar's open, and the P&L either would have made.
        st.subheader("Paper vs the simulator")
        figures = summary(record)
        cols = st.columns(4)
        cols[0].metric(
            "Slippage (bp)", formatting.format_metric(figures["slippage_bps"], "ratio"), border=True
        )
        cols[1].metric("Model (bp)", formatting.format_metric(figures["model_bps"], "ratio"), border=True)
        cols[2].metric("Fill ratio", formatting.format_metric(figures["fill_ratio"], "pct"), border=True)
        cols[3].metric("Fee gap", formatting.format_metric(figures["fee_gap"], "money"), border=True)
        ui.plot(paper_charts.sim_equity_figure(day_frame(record)), key="sim_equity")
        ui.plot(paper_charts.slippage_figure(order_frame(record)), key="sim_slippage")
        if problem := gap_problem(record):
            st.warning(problem)

    daily = journal.get("daily")
    if daily is not None and not daily.empty:
        # Older days live on as one row each (app.paper.compact): the tables below hold the newest
        # sessions in full.
        st.subheader("Earlier days (compacted)")
        st.caption(f"{len(daily)} days up to {daily['session'].max()}, one summary row each")
        st.dataframe(tables.tidy_table(daily.sort_values("session", ascending=False)), hide_index=True)

    for name in ("positions", "orders", "fills", "decisions", "events"):
        table = journal.get(name)
        st.subheader(name.capitalize())
        if table is None or table.empty:
            st.info(f"no {name} recorded yet")
        else:
            # Newest first: what happened this morning is what a person looks for.
            st.dataframe(tables.tidy_table(table.iloc[::-1]), hide_index=True)
