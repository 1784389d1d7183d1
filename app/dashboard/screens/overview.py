"""Overview: the champion against buy-and-hold on the held-out window."""

from __future__ import annotations

import streamlit as st

from app.dashboard import artifacts, charts, loaders, ui, views

st.title("Overview")
run_dir = ui.require_run()

metrics = None
with ui.guard("metrics"):
    metrics = loaders.metrics(run_dir)

if metrics is not None:
    st.caption(f"run `{run_dir.name}` · {views.window_caption(metrics)}")
    champion = views.champion_name(metrics)
    bench = views.benchmark_name(metrics)
    if champion is not None:
        st.subheader(views.strategy_label(champion))
        # The plain-words reading first: a quant reads "not significant" before any Sharpe.
        ui.show_verdict(views.edge_verdict(metrics, champion))
        ui.show_cards(views.metric_cards(metrics, champion, versus=bench))
        note = views.short_window_note(metrics)
        if note:
            st.caption(note)
    if bench is not None:
        st.subheader(f"{views.strategy_label(bench)} (benchmark)")
        ui.show_cards(views.metric_cards(metrics, bench))
    with st.expander("What the numbers mean, and all strategies"):
        st.caption(views.card_notes())
        # Markdown, not st.dataframe/st.table: those pull ~1 MB of grid/Arrow JavaScript that
        # would compete with plotly's bundle during the first render.
        st.markdown(views.markdown_table(views.comparison_table(metrics)))

with ui.guard("equity"):
    equity = loaders.equity(run_dir)
    left, right = st.columns(2)
    with left:
        ui.plot(charts.equity_figure(equity), key="equity")
    with right:
        ui.plot(charts.underwater_figure(views.drawdown(equity)), key="underwater")

with ui.guard("returns"):
    daily = loaders.daily_returns(run_dir)
    name = "champion" if "champion" in daily.columns else daily.columns[0]
    # Monthly by default; a short window (a few weeks of test data) reads better day by day.
    short = daily.index.nunique() < 63
    grain = st.radio(
        "Returns heatmap", ["monthly", "daily"], index=int(short), horizontal=True, key="heatmap"
    )
    label = views.strategy_label(name)
    if grain == "monthly":
        table, title = views.monthly_returns(daily[name]), f"Monthly returns: {label}"
    else:
        table, title = views.daily_returns_table(daily[name]), f"Daily returns: {label}"
    ui.plot(charts.monthly_heatmap(table, title), key="heatmap-chart")

logits = views.pbo_logits(metrics) if metrics is not None else []
if logits:
    with ui.guard("pbo"):
        st.subheader("Probability of backtest overfitting")
        pbo = metrics.get("pbo")
        st.caption(
            f"{len(logits)} combinatorial splits of the validation window over "
            f"{metrics.get('num_trials', '?')} pods: on each, the pod best in-sample is ranked out of "
            "sample; the PBO is the share of splits where it fell below the median (logit <= 0)."
        )
        ui.plot(charts.pbo_histogram(logits, pbo if isinstance(pbo, int | float) else None), key="pbo")

tearsheet = artifacts.tearsheet_path(run_dir) if metrics is not None else None
if tearsheet is not None:
    with st.expander("pyfolio tear sheet"):
        st.image(str(tearsheet))
