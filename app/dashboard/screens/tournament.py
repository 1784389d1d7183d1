"""Tournament: the leaderboard, fitness over time, the lineage (who was copied from whom), pods tried."""

from __future__ import annotations

import streamlit as st

from app.dashboard import charts, formatting, loaders, pods, tables, ui

# Unix-second columns of the leaderboard store (agents.tournament.leaderboard).
_TIMES = ("created", "updated", "time")

st.title("Tournament")
run_dir = ui.require_run()

with ui.guard("tournament"):
    data = loaders.tournament(run_dir)
    info = loaders.run_info(run_dir)
    board, events, tried = data.leaderboard, data.events, data.pods

    counts = pods.status_counts(tried)
    cols = st.columns(4)
    cols[0].metric("Pods tried", counts["tried"], border=True)
    cols[1].metric("Failed", counts.get("failed", 0), border=True)
    cols[2].metric("On the leaderboard", len(board), border=True)
    score_col = tables.first_column(board, "score", "fitness")
    best = board[score_col].max() if score_col and not board.empty else None
    cols[3].metric(
        "Best score",
        formatting.format_metric(best, "ratio"),
        help=formatting.format_full(best, "ratio"),
        border=True,
    )

    id_col = tables.first_column(board, "pod_id", "id", "pod")
    leaders = [str(p) for p in board[id_col]] if id_col and not board.empty else []
    champion = (info.champion.pod_id if info.champion else None) or (leaders[0] if leaders else None)

    st.subheader("Leaderboard")
    if board.empty:
        st.info("the leaderboard is empty: no pod has been scored yet")
    else:
        st.caption("Validation metrics and hyper-parameters per pod; click a column header to sort.")
        ui.show_table(pods.pod_table(board), key="leaderboard")

    history = pods.score_history(events)
    if not history.empty:
        ui.plot(charts.fitness_figure(history, leaders), key="fitness")
    else:
        st.info("no scored events yet")

    st.subheader("Lineage")
    everyone = tried if not tried.empty else board
    points = pods.lineage_points(everyone, set(leaders), champion)
    if points.empty:
        st.info("no scored pod yet")
    else:
        ui.plot(charts.lineage_figure(points), key="lineage")
        ids = list(points.sort_values("score", ascending=False)["pod"])
        start = ids.index(champion) if champion in ids else 0
        chosen = st.selectbox(
            "Ancestry of",
            ids,
            index=start,
            key="lineage_pod",
            help="Pods by score, best first; the table shows what each generation changed.",
        )
        chain = pods.lineage_table(everyone, str(chosen))
        st.caption(f"{chosen} and its ancestors, newest first ({len(chain.frame)} generation(s))")
        ui.show_table(chain, key="lineage_table")

    with st.expander(f"All pods tried ({counts['tried']})"):
        ui.show_table(pods.pod_table(tried), key="pods")
