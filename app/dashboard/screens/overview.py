"""Overview: the champion against buy-and-hold on the held-out window."""

from __future__ import annotations

import streamlit as st

from app.dashboard import artifacts, cards, charts, formatting, loaders, series, tables, ui
from app.dashboard.verdict_box import verdict_box
from backtests.capacity import capacity_rule_text, sensitivity_line

st.title("Overview")
run_dir = ui.require_run()

metrics = None
with ui.guard("metrics"):
    metrics = loaders.metrics(run_dir)

if metrics is not None:
    st.caption(f"run `{run_dir.name}` · {cards.window_caption(metrics)}")
    champion = cards.champion_name(metrics)
    bench = cards.benchmark_name(metrics)
    if champion is not None:
        st.subheader(formatting.strategy_label(champion))
        # The plain-words reading first: a quant reads "not significant" before any Sharpe.
        ui.show_verdict(verdict_box(metrics))
        ui.show_cards(cards.metric_cards(metrics, champion, versus=bench))
        note = cards.short_window_note(metrics)
        if note:
            st.caption(note)
    if bench is not None:
        st.subheader(f"{formatting.strategy_label(bench)} (benchmark)")
        ui.show_cards(cards.metric_cards(metrics, bench))
    with st.expander("What the numbers mean, and all strategies"):
        st.caption(cards.card_notes())
        # Markdown, not st.dataframe/st.table: those pull ~1 MB of grid/Arrow JavaScript that
        # would compete with plotly's bundle during the first render.
        st.markdown(tables.markdown_table(cards.comparison_table(metrics)))

with ui.guard("equity"):
    equity = loaders.equity(run_dir)
    left, right = st.columns(2)
    with left:
        ui.plot(charts.equity_figure(equity), key="equity")
    with right:
        ui.plot(charts.underwater_figure(series.drawdown(equity)), key="underwater")

with ui.guard("returns"):
    daily = loaders.daily_returns(run_dir)
    name = "champion" if "champion" in daily.columns else daily.columns[0]
    # Monthly by default; a short window (a few weeks of test data) reads better day by day.
    short = daily.index.nunique() < 63
    grain = st.radio(
        "Returns heatmap", ["monthly", "daily"], index=int(short), horizontal=True, key="heatmap"
    )
    label = formatting.strategy_label(name)
    if grain == "monthly":
        table, title = series.monthly_returns(daily[name]), f"Monthly returns: {label}"
    else:
        table, title = series.daily_returns_table(daily[name]), f"Daily returns: {label}"
    ui.plot(charts.monthly_heatmap(table, title), key="heatmap-chart")

capacity = (metrics.capacity or []) if metrics is not None else []
if capacity:
    with ui.guard("capacity"):
        st.subheader("Capacity: how much money the strategy can run")
        st.caption(
            "The champion and the baselines replayed on the same window at each account size, with the "
            "env's execution model (half-spread, a cap on each fill's share of the bar's volume, "
            "square-root impact): bigger accounts pay more for the same decisions. Estimated capacity: "
            + capacity_rule_text(metrics)
        )
        ui.plot(charts.capacity_figure(capacity, metrics.estimated_capacity), key="capacity")
        sensitivity = sensitivity_line(metrics)
        if sensitivity:
            st.caption(sensitivity[:1].upper() + sensitivity[1:])

logits = cards.pbo_logits(metrics) if metrics is not None else []
if logits:
    with ui.guard("pbo"):
        st.subheader("Probability of backtest overfitting: does the ranking among pods carry information?")
        pbo = metrics.pbo
        st.caption(
            f"{len(logits)} combinatorial splits of the validation window over "
            f"{metrics.num_trials if metrics.num_trials is not None else '?'} pods: on each, the pod best in-sample is ranked out of "
            "sample; the PBO is the share of splits where it fell below the median (logit <= 0). Near "
            "0.5 the pods' order is noise, which it also is when the top pods learned the same edge: "
            "it diagnoses the ranking step, not the champion's edge (the verdict above tests that)."
        )
        ui.plot(charts.pbo_histogram(logits, pbo), key="pbo")

tearsheet = artifacts.tearsheet_path(run_dir) if metrics is not None else None
if tearsheet is not None:
    with st.expander("pyfolio tear sheet"):
        st.image(str(tearsheet))
