"""The state of the operating loop in one look: ``podracer status`` and the top of the Nightly page.

:func:`gather_status` reads, never writes: the registry's champion and last decision
(``app.nightly.registry``, read-only), the next retrain from the cron schedule (``cron``/``tz`` when
given, else the one ``podracer schedule run|print`` recorded in ``<home>/schedule.json``, else the
default; ``schedule["source"]`` says which), the paper loop's heartbeat
(``app.paper.heartbeat``: stale after two decision intervals of market hours), the kill-switch file,
the gone tickers the last cycle could not trade, and today's P&L (the journal's newest P&L row, when
it is from today's session).

``problems`` lists what needs the operator (a stale or failing loop, a refused champion bundle, an
unreadable store, gone tickers); ``podracer status`` exits 1 when there is any. The kill switch is a
state the operator chose, shown but not a problem. ``warnings`` lists what status could not read but
worked around (an unreadable schedule record: the default schedule is shown); they are not problems.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from app.nightly.cron import DEFAULT_CRON, DEFAULT_TZ
from app.nightly.registry import current_champion, read_decisions
from app.nightly.schedule import cron_trigger, next_fire_times, read_schedule
from app.paper.heartbeat import STALE_INTERVALS, Heartbeat, read_heartbeat
from app.paper.journal import latest_pnl
from app.timestamps import local_time
from data.calendar import exchange_date
from data.errors import PodracerError, one_line


@dataclass(frozen=True)
class Status:
    """Everything ``podracer status`` shows (``to_dict``: its ``--json``)."""

    home: str
    now: str  # ISO UTC
    champion: dict[str, Any] | None  # run_id, promoted_at, bundle, bundle_id
    last_decision: dict[str, Any] | None  # verdict, decided_at, reason, challenger_run_id
    next_retrain: str | None  # ISO, in the schedule's time zone
    schedule: dict[str, Any]  # cron, tz, source ("options" | "recorded" | "default"), the record's fields
    heartbeat: dict[str, Any] | None  # the heartbeat file's fields
    heartbeat_age_s: float | None
    loop: str  # "not started" | "ok" | "stale" | "failing"
    switch_pending: bool  # the champion's bundle is not the one the loop trades (next session's)
    kill_switch: dict[str, Any]  # path, on
    gone: list[str]  # held tickers the broker will not trade: manual attention
    today: dict[str, Any] | None  # session, pnl, return, equity (None: no P&L row today)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # read around, not problems (see the module)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "healthy": self.healthy}


def _bundle_id(bundle: str | None) -> str | None:
    """The ``bundle_id`` in a bundle's manifest (not verified: ``podracer paper`` does that)."""
    if not bundle:
        return None
    try:
        value = json.loads((Path(bundle) / "manifest.json").read_text(encoding="utf-8")).get("bundle_id")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def _registry(home: Path, problems: list[str]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    try:
        champion = current_champion(home, timeout=2.0)
        decisions = read_decisions(home, limit=1)
    except PodracerError as err:
        problems.append(f"registry: {one_line(err)}")
        return None, None
    if champion is not None:
        keys = ("run_id", "promoted_at", "bundle", "decision_id")
        champion = {k: champion.get(k) for k in keys} | {"bundle_id": _bundle_id(champion.get("bundle"))}
    last = None
    if decisions:
        keys = ("id", "verdict", "decided_at", "reason", "challenger_run_id", "step")
        last = {k: decisions[-1].get(k) for k in keys}
    return champion, last


def _today(home: Path, now: datetime, problems: list[str]) -> dict[str, Any] | None:
    try:
        row = latest_pnl(home)
    except Exception as err:  # noqa: BLE001 - sqlite3 errors of a damaged journal: reported, not raised
        problems.append(f"journal: {one_line(err)}")
        return None
    if row is None:
        return None
    session = exchange_date(now).date().isoformat()
    if exchange_date(pd.Timestamp(row["recorded_at"])).date().isoformat() != session:
        return None
    return {
        "session": session,
        "pnl": row.get("day_pnl"),
        "return": row.get("day_return"),
        "equity": row.get("equity"),
        "as_of": row["recorded_at"],
    }


def _schedule(home: Path, cron: str | None, tz: str | None, warnings: list[str]) -> dict[str, Any]:
    """The schedule the next retrain comes from: the options, else the recorded one, else the default."""
    if cron is not None or tz is not None:
        return {"cron": cron or DEFAULT_CRON, "tz": tz or DEFAULT_TZ, "source": "options"}
    default = {"cron": DEFAULT_CRON, "tz": DEFAULT_TZ, "source": "default"}
    try:
        record = read_schedule(home)
    except PodracerError as err:
        warnings.append(f"{one_line(err)}; the default schedule is shown")
        return default | {"unreadable": True}
    if record is None:
        return default
    return asdict(record) | {"source": "recorded", "command": record.source}


def schedule_source(schedule: dict[str, Any]) -> str:
    """Where the schedule of the next retrain came from, in words (``podracer status``, the dashboard)."""
    source = schedule.get("source")
    if source == "recorded":
        return f"schedule from {schedule.get('command')}, {local_time(schedule.get('written_at'), schedule['tz'], '%Y-%m-%d')}"
    if source == "options":
        return "from --cron/--tz"
    if schedule.get("unreadable"):
        return "default schedule: the recorded one is unreadable"
    return "default schedule: none recorded"


def gather_status(
    home: str | os.PathLike[str],
    *,
    cron: str | None = None,
    tz: str | None = None,
    now: datetime | None = None,
) -> Status:
    """The operating loop's state (see the module docstring); ``now`` for tests.

    ``cron``/``tz``: the schedule of the next retrain (either given: the other is its default); neither:
    the one recorded in ``<home>/schedule.json``, else the default.
    """
    home = Path(home)
    now = now or datetime.now(UTC)
    problems: list[str] = []
    warnings: list[str] = []
    champion, last = _registry(home, problems)
    schedule = _schedule(home, cron, tz, warnings)
    schedule["described"] = schedule_source(schedule)
    upcoming = next_fire_times(cron_trigger(schedule["cron"], schedule["tz"]), now, 1)
    try:
        beat: Heartbeat | None = read_heartbeat(home)
    except PodracerError as err:
        problems.append(one_line(err))
        beat = None
    loop, age, gone = "not started", None, []
    kill_path = Path(beat.kill_switch) if beat is not None and beat.kill_switch else home / "paper" / "KILL"
    if beat is not None:
        age = beat.age_s(now)
        gone = list(beat.attention)
        if beat.stale(now):
            loop = "stale"
            problems.append(
                f"paper loop stale: last heartbeat {beat.time}, more than {STALE_INTERVALS} decision "
                f"intervals ({STALE_INTERVALS * beat.interval_s / 60:g} min) of market hours ago"
            )
        elif not beat.ok:
            loop = "failing"
        else:
            loop = "ok"
        if not beat.ok:
            problems.append(f"paper loop: {beat.status}: {beat.alert or '; '.join(beat.messages) or '?'}")
        if gone:
            problems.append(f"gone tickers need manual attention: {', '.join(gone)}")
    pending = bool(
        champion
        and beat is not None
        and beat.mode == "champion"
        and beat.bundle_id is not None
        and champion.get("bundle_id") != beat.bundle_id
    )
    return Status(
        home=str(home),
        now=now.isoformat(timespec="seconds"),
        champion=champion,
        last_decision=last,
        next_retrain=upcoming[0].isoformat() if upcoming else None,
        schedule=schedule,
        heartbeat=beat.model_dump() if beat is not None else None,
        heartbeat_age_s=age,
        loop=loop,
        switch_pending=pending,
        kill_switch={"path": str(kill_path), "on": kill_path.exists()},
        gone=gone,
        today=_today(home, now, problems),
        problems=problems,
        warnings=warnings,
    )
