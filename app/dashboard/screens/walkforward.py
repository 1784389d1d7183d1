"""Walk-forward: nightly retraining replayed over history, and the out-of-sample account it traded."""

from __future__ import annotations

import streamlit as st

from app.dashboard import cards, charts, loaders, series, tables, ui, walkforward_view
from app.dashboard.verdict_box import verdict_box

st.title("Walk-forward")
run_dir = ui.require_run()

records: list = []
with ui.guard("walk-forward"):
    records = loaders.fold_records(run_dir)
    info = loaders.run_info(run_dir)
    layout = info.walkforward.folds
    settings = info.walkforward.settings
    st.caption(
        f"run `{run_dir.name}` · {len(records)} of {len(layout)} folds done · "
        f"{settings.get('window', '?')} windows: train {settings.get('train_sessions', '?')}, validation "
        f"{settings.get('valid_sessions', '?')}, embargo {settings.get('embargo_sessions', '?')}, "
        f"retrain every {settings.get('step_sessions', '?')} sessions · gate {settings.get('gate', '?')} · "
        f"status {info.status or '?'}"
    )
    if not records:
        st.info("no fold completed yet: the page fills in as the walk-forward records its folds")

metrics = None
if records:
    with ui.guard("metrics"):
        metrics = loaders.metrics(run_dir)
        st.subheader("Stitched out-of-sample account")
        st.caption(
            f"{cards.window_caption(metrics)} · the policy in charge of each fold's test window, one "
            "account carried across folds (a new champion rebalances from the holdings, costs on); "
            "the whole span is one look" + walkforward_view.before_champion_note(records)
        )
        ui.show_verdict(verdict_box(metrics))
        bench = cards.benchmark_name(metrics)
        ui.show_cards(cards.metric_cards(metrics, "champion", versus=bench))

    with ui.guard("equity"):
        equity = loaders.equity(run_dir)
        ui.plot(walkforward_view.walkforward_equity_figure(equity, records), key="wf_equity")
        ui.plot(charts.underwater_figure(series.drawdown(equity)), key="wf_underwater")

    with ui.guard("folds"):
        st.subheader("Folds")
        frame = walkforward_view.folds_frame(records)
        st.dataframe(tables.tidy_table(frame.drop(columns=["gate reason"])), hide_index=True)
        promoted = int((frame["gate"] == "promoted").sum())
        st.caption(
            f"{promoted} promotion(s) in {len(frame)} folds. The gate (the nightly rule) compared the "
            "fold's challenger with the incumbent on the gate's window (never the test window); test figures are out of sample."
        )
        with st.expander("Why each fold's gate decided as it did"):
            for fold, gate, reason in zip(frame["fold"], frame["gate"], frame["gate reason"], strict=True):
                st.markdown(f"- fold {fold} ({gate}): {reason}")
        summary = metrics.walkforward if metrics is not None else None
        spans = summary.champions if summary is not None else []
        if spans:
            st.caption("Which champion traded which sessions")
            st.markdown(tables.markdown_table(walkforward_view.spans_frame(spans).set_index("champion")))
