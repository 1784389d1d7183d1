"""Nightly: the operating loop's status, the champions with their paper records, every decision."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import charts, formatting, loaders, tables, ui
from app.dashboard.in_charge import in_charge
from app.paper.attribution import MIN_SHARPE_SESSIONS


def _stamp(iso: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM`` (in its own offset); ``-`` for none."""
    return str(iso)[:16].replace("T", " ") if iso else "-"


def _status_box(state) -> None:  # noqa: ANN001 - app.workflows.status.Status
    """What `podracer status` prints (the same ``Status``): champion and since when, the paper loop,
    today's P&L, the last and next retrain, the kill switch, the gone tickers, problems."""
    beat, champ, last, kill = state.heartbeat, state.champion, state.last_decision, state.kill_switch
    plain = {"delta_color": "off", "delta_arrow": "off", "border": True}  # a delta that is a note
    cols = st.columns(4)
    card = in_charge(state)
    cols[0].metric("Champion", card.value, card.note, help=card.explanation, **plain)
    cols[1].metric(
        "Demoted on" if champ is None and card.explanation else "Champion since", card.since, border=True
    )
    age = f"{state.heartbeat_age_s / 60:.0f} min ago" if state.heartbeat_age_s is not None else None
    cols[2].metric(
        "Paper loop", state.loop, f"{beat['status']} {age}" if beat else None, delta_color="off", border=True
    )
    today = state.today or {}
    cols[3].metric("Today's paper P&L", formatting.format_metric(today.get("pnl"), "money"), border=True)
    cols = st.columns(4)
    if last:
        reason = str(last.get("reason") or "") or None
        cols[0].metric(
            "Last retrain", str(last["verdict"]), _stamp(last.get("decided_at")), help=reason, **plain
        )
    else:
        cols[0].metric("Last retrain", "none recorded", border=True)
    cron = state.schedule
    cols[1].metric(
        "Next retrain",
        _stamp(state.next_retrain),
        cron["cron"],
        help=f"cron '{cron['cron']}' {cron['tz']} ({cron['described']})",
        **plain,
    )
    cols[2].metric("Kill switch", "ON" if kill["on"] else "off", help=str(kill["path"]), border=True)
    cols[3].metric("Gone tickers", ", ".join(state.gone) or "none", border=True)
    if card.explanation:
        st.warning(card.explanation)
    for problem in state.problems:
        st.error(problem)
    for warning in state.warnings:
        st.warning(warning)
    if kill["on"]:
        st.warning(f"kill switch on ({kill['path']}): no new orders")
    if state.switch_pending:
        st.caption(
            "A new champion was promoted: the paper loop trades it from the next session's first cycle."
        )


def _record_cards(record) -> None:  # noqa: ANN001 - app.paper.attribution.ChampionRecord
    cols = st.columns(4)
    cols[0].metric("Return", formatting.format_metric(record.cum_return, "pct"), border=True)
    cols[1].metric("Sharpe", formatting.format_metric(record.sharpe, "ratio"), border=True)
    cols[2].metric("Buy & hold", formatting.format_metric(record.buy_and_hold, "pct"), border=True)
    cols[3].metric("Costs", formatting.format_metric(record.costs, "money"), border=True)
    sharpe = (
        f"; a Sharpe ratio from {MIN_SHARPE_SESSIONS} sessions on"
        if record.sharpe is None and record.sessions < MIN_SHARPE_SESSIONS
        else ""
    )
    st.caption(
        f"in charge {record.first_session} → {record.last_session}: {record.sessions} session(s), "
        f"{record.decisions} decisions, {record.num_orders} orders, P&L "
        f"{formatting.format_metric(record.pnl, 'money')} (costs included){sharpe}"
    )


st.title("Nightly retraining")

with ui.guard("status"):
    _status_box(loaders.status(ui.home()))

with ui.guard("nightly"):
    decisions, champion = loaders.nightly(ui.home())

    st.subheader("Current champion")
    if champion:
        cols = st.columns(4)
        cols[0].metric("Run", champion.run_id, border=True)
        cols[1].metric("Promoted on", str(champion.promoted_at or "?")[:10], border=True)
        cols[2].metric(
            f"Fitness ({champion.fitness or '?'})",
            formatting.format_metric(champion.fitness_value, "ratio"),
            border=True,
        )
        cols[3].metric("Bundle", "yes" if champion.bundle else "none", border=True)
        with st.expander("Champion record"):
            st.json(champion.model_dump(mode="json", exclude_none=True), expanded=True)
    else:
        st.info("no champion yet: the first successful nightly retrain promotes one")

    st.subheader("Champions in paper trading")
    st.caption(
        "The gate promoted each champion on its test-window figures, so those are selection figures; "
        "its paper trading while in charge is out of sample. Whole sessions, from its first decision "
        "to its successor's."
    )
    timeline = loaders.champion_timeline(ui.home())
    for entry in reversed(timeline.entries):
        name = entry.run_id or "paper --bundle"
        when = f"promoted {str(entry.promoted_at)[:10]}" if entry.promoted_at else "not a registry champion"
        current = " (current)" if entry.current else ""
        st.markdown(f"**{name}**{current} · bundle `{str(entry.bundle_id or '?')[:12]}` · {when}")
        if entry.record is not None:
            _record_cards(entry.record)
        else:
            st.caption("not paper-traded yet")
    if timeline.account_pnl is not None:
        st.caption(
            f"The records add up to {formatting.format_metric(timeline.records_pnl, 'money')}; the account "
            f"moved {formatting.format_metric(timeline.account_pnl, 'money')} over the same sessions."
        )
    elif timeline.note:
        st.caption(timeline.note)

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
