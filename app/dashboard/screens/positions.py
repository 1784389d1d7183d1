"""Positions & trades: the weights each strategy held, the trades it made and what they cost."""

from __future__ import annotations

import streamlit as st

from app.dashboard import charts, formatting, loaders, series, ui
from data.errors import PodracerError

st.title("Positions & trades")
run_dir = ui.require_run()

try:
    metrics = loaders.metrics(run_dir)
    frequency = {"positions": metrics.positions_frequency, "trades": metrics.trades_frequency}
except PodracerError:
    frequency = {}  # the blocks below say what is missing
if "session" in frequency.values():
    # The report summarizes very long runs per session (see backtests/report.py).
    st.caption(
        f"Positions are stored per {frequency['positions'] or 'decision'}, "
        f"trades per {frequency['trades'] or 'decision'} (the backtest summarizes long runs per session)."
    )

with ui.guard("positions"):
    positions = loaders.positions(run_dir)
    strategies = sorted(positions["strategy"].unique(), key=lambda s: (s != "champion", s))
    if not strategies:
        st.info("positions.parquet is empty")
    else:
        strategy = st.selectbox(
            "Strategy", strategies, format_func=formatting.strategy_label, key="positions_strategy"
        )
        wide = series.weights_wide(positions, strategy)
        ui.plot(charts.weights_area(wide), key="weights")
        last = positions[positions["timestamp"] == positions["timestamp"].max()]
        last = last[(last["strategy"] == strategy) & (last["weight"] != 0)]
        st.caption(f"Holdings at the last bar ({positions['timestamp'].max():%Y-%m-%d %H:%M} UTC)")
        # In percent with two decimals everywhere ("7.90%", not "7.9%").
        st.dataframe(
            last[["ticker", "weight"]]
            .assign(weight=last["weight"] * 100)
            .sort_values("weight", ascending=False),
            hide_index=True,
            column_config={"weight": st.column_config.NumberColumn("weight", format="%.2f%%")},
        )

with ui.guard("trades"):
    trades = loaders.trades(run_dir)
    st.subheader("Costs")
    st.dataframe(series.cost_summary(trades).rename(index=formatting.strategy_label))
    if not trades.empty:
        ui.plot(charts.cumulative_costs_figure(trades), key="costs")
        names = sorted(trades["strategy"].unique(), key=lambda s: (s != "champion", s))
        chosen = st.selectbox(
            "Trades of", names, format_func=formatting.strategy_label, key="trades_strategy"
        )
        st.subheader("Trades (most recent first)")
        st.dataframe(series.trades_table(trades, chosen), hide_index=True)
        with st.expander("Costs by ticker"):
            st.dataframe(series.costs_by_ticker(trades, chosen))
