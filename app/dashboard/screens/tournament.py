"""Tournament: the leaderboard, fitness over time per pod, the champion's lineage, pods tried."""

from __future__ import annotations

import streamlit as st

from app.dashboard import charts, loaders, ui, views

# Unix-second columns of the leaderboard store (agents.tournament.leaderboard).
_TIMES = ("created", "updated", "time")

st.title("Tournament")
run_dir = ui.require_run()

with ui.guard("tournament"):
    data = loaders.tournament(run_dir)
    info = loaders.run_info(run_dir)
    board, events, pods = data.leaderboard, data.events, data.pods

    counts = views.status_counts(pods)
    cols = st.columns(4)
    cols[0].metric("Pods tried", counts["tried"], border=True)
    cols[1].metric("Failed", counts.get("failed", 0), border=True)
    cols[2].metric("On the leaderboard", len(board), border=True)
    score_col = views.first_column(board, "score", "fitness")
    best = board[score_col].max() if score_col and not board.empty else None
    cols[3].metric("Best score", views.format_metric(best, "ratio"), border=True)

    st.subheader("Leaderboard")
    if board.empty:
        st.info("the leaderboard is empty: no pod has been scored yet")
    else:
        st.dataframe(views.tidy_table(board, _TIMES), hide_index=True)

    history = views.score_history(events)
    if not history.empty:
        ui.plot(charts.fitness_figure(history), key="fitness")
    else:
        st.info("no scored events yet")

    st.subheader("Champion lineage")
    id_col = views.first_column(board, "pod_id", "id", "pod")
    champion = (info.champion.pod_id if info.champion else None) or (
        str(board.iloc[0][id_col]) if id_col and not board.empty else None
    )
    chain = views.lineage(pods if not pods.empty else board, str(champion)) if champion else None
    if chain is None or chain.empty:
        st.info("no champion yet")
    else:
        st.caption(f"{champion} and its ancestors, newest first ({len(chain)} generation(s))")
        st.dataframe(views.tidy_table(chain, _TIMES), hide_index=True)

    with st.expander(f"All pods tried ({counts['tried']})"):
        st.dataframe(views.tidy_table(pods, _TIMES), hide_index=True)
