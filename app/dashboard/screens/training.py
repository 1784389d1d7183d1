"""Training: learning curves of every pod of the run (``<run>/pods/<pod>/curve.parquet``)."""

from __future__ import annotations

import streamlit as st

from app.dashboard import charts, loaders, series, ui

st.title("Training")
run_dir = ui.require_run()

with ui.guard("curves"):
    curves = loaders.curves(run_dir)
    metric_names = series.curve_metrics(curves)
    if not metric_names:
        st.info("the curves have no metric columns yet")
    else:
        pods = st.multiselect("Pods", list(curves), default=list(curves)[:20], key="training_pods")
        preferred = [m for m in metric_names if m.startswith(("eval/", "charts/episodic_return"))]
        chosen = st.multiselect(
            "Metrics", metric_names, default=preferred[:2] or metric_names[:1], key="training_metrics"
        )
        axes = series.curve_x_axes(curves) or ["env_steps"]
        x = axes[0]
        if len(axes) > 1:
            x = st.radio(
                "x axis",
                axes,
                horizontal=True,
                key="training_x",
                format_func=lambda a: (
                    "env steps along the lineage" if a == "lineage_env_steps" else "env steps"
                ),
                help="Along the lineage, a child pod's curve continues where its parent's ended.",
            )
        selected = {p: curves[p] for p in pods}
        cols = st.columns(2)
        for i, metric in enumerate(chosen):
            with cols[i % 2]:
                ui.plot(charts.learning_curves_figure(selected, metric, x=x), key=f"curve-{metric}")
        st.caption(f"{len(curves)} pod(s) with curves · {len(metric_names)} metric(s)")
