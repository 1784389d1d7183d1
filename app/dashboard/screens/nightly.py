"""Nightly: the champion history and every promotion decision of ``podracer retrain``."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import charts, formatting, loaders, tables, ui

st.title("Nightly retraining")

with ui.guard("nightly"):
    decisions, champion = loaders.nightly(ui.home())

    st.subheader("Current champion")
    if champion:
        cols = st.columns(4)
        cols[0].metric("Run", str(champion.get("run_id", "?")), border=True)
        cols[1].metric("Promoted on", str(champion.get("promoted_at", "?"))[:10], border=True)
        cols[2].metric(
            f"Fitness ({champion.get('fitness') or '?'})",
            formatting.format_metric(champion.get("fitness_value"), "ratio"),
            border=True,
        )
        cols[3].metric("Bundle", "yes" if champion.get("bundle") else "none", border=True)
        with st.expander("Champion record"):
            st.json(champion, expanded=True)
    else:
        st.info("no champion yet: the first successful nightly retrain promotes one")

    st.subheader("Out of sample: paper trading since promotion")
    st.caption(
        "The gate promoted the champion on its test-window figures, so those are selection figures; "
        "only its trading after the promotion is out of sample."
    )
    record = loaders.out_of_sample(ui.home())
    if record.decisions:
        cols = st.columns(3)
        cols[0].metric("Decisions since promotion", record.decisions, border=True)
        cols[1].metric(
            "Return since first decision", formatting.format_metric(record.cum_return, "pct"), border=True
        )
        cols[2].metric("Since", str(record.start or "?")[:10], border=True)
        if len(record.pnl) > 1:
            frame = record.pnl.assign(recorded_at=pd.to_datetime(record.pnl["recorded_at"], utc=True))
            ui.plot(
                charts.line_figure(
                    frame, "recorded_at", ["equity"], "Paper equity since promotion", yformat="$,.0f"
                ),
                key="out_of_sample",
            )
    else:
        st.info(record.note or "no paper trading with the champion's bundle since its promotion")

    st.subheader("Decisions")
    if decisions.empty:
        st.info("no decisions recorded yet")
    else:
        verdict_col = tables.first_column(decisions, "verdict", "decision")
        if verdict_col:
            counts = decisions[verdict_col].astype(str).value_counts()
            cols = st.columns(max(1, len(counts)))
            for col, (name, count) in zip(cols, counts.items(), strict=True):
                col.metric(str(name).capitalize(), int(count), border=True)
        time_col = tables.first_column(decisions, "decided_at", "time", "created_at", "timestamp")
        score_cols = [c for c in ("challenger_fitness", "champion_fitness") if c in decisions.columns]
        if time_col and score_cols and decisions[score_cols].notna().any().any():
            frame = decisions.assign(
                **{time_col: pd.to_datetime(decisions[time_col], utc=True, errors="coerce")}
            ).rename(columns={c: c.removesuffix("_fitness") for c in score_cols})
            names = [c.removesuffix("_fitness") for c in score_cols]
            ui.plot(
                charts.line_figure(frame, time_col, names, "Challenger vs champion fitness"), key="nightly"
            )
        if verdict_col:
            promoted = decisions[decisions[verdict_col].astype(str) == "promoted"]
            st.caption(f"Champion history: {len(promoted)} promotion(s)")
            st.dataframe(tables.tidy_table(promoted.iloc[::-1]), hide_index=True)
        st.caption("Every decision, newest first")
        st.dataframe(tables.tidy_table(decisions.iloc[::-1]), hide_index=True)
