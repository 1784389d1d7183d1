"""The retrain checks of ``podracer status`` (``app.workflows.status``): the last retrain failed (and
how many in a row), none recorded since the installed schedule's last run time plus the budget and
slack, a retrain holding its lock past its budget, one killed mid-run (a lock left by a dead process,
or the newest nightly run folder still marked running with no retrain holding the lock). Reads only:
the lock is tested with a shared non-blocking ``flock`` on a read-only descriptor."""

from __future__ import annotations

import fcntl
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from app.alerts import AlertSettings, Problem
from app.nightly.lock import RETRAIN_LOCK_NAME, LockInfo, read_lock_info
from app.nightly.schedule import cron_trigger, next_fire_times
from app.retrain_limits import MAX_MINUTES, SLACK_MINUTES
from app.runs import list_runs

ABANDONED_RUNS = 20  # newest run folders looked at for the newest nightly one


def retrain_checks(
    home: Path,
    decisions: list[dict[str, Any]],
    schedule: dict[str, Any],
    settings: AlertSettings,
    now: datetime,
    problems: list[Problem],
) -> None:
    """The last retrain failed; none since the schedule's last run time (plus budget and slack); a
    retrain holding its lock past its budget; one killed mid-run."""
    if decisions and decisions[-1].get("verdict") == "failed":
        failed = 0
        for row in reversed(decisions):
            if row.get("verdict") != "failed":
                break
            failed += 1
        last = decisions[-1]
        count = f"the last {failed} retrains failed" if failed > 1 else "last retrain failed"
        problems.append(
            Problem(
                "retrain_failed",
                f"{count} ({last.get('decided_at')}, step {last.get('step')}): {last.get('reason')}",
            )
        )
    budget = settings.max_minutes if settings.max_minutes is not None else MAX_MINUTES
    holder = _retrain_holder(home)
    if holder is not None:
        info, alive = holder
        if alive and info.started_at is not None:
            minutes = (now.timestamp() - info.started_at) / 60.0
            if minutes > budget + SLACK_MINUTES:
                problems.append(
                    Problem(
                        "retrain_stuck",
                        f"a retrain has held its lock for {minutes:.0f} min ({info.describe()}), past its "
                        f"budget of {budget:g} min: cron runs meanwhile exit 75",
                    )
                )
        elif not alive and info.pid is not None:
            problems.append(
                Problem(
                    "retrain_killed", f"a retrain died mid-run ({info.describe()}); its lock was left behind"
                )
            )
    if not any(p.check in ("retrain_stuck", "retrain_killed") for p in problems) and (
        holder is None or not holder[1]
    ):
        left = _abandoned_run(home)
        if left is not None:
            problems.append(
                Problem("retrain_killed", f"nightly run {left} is still marked running but no retrain is")
            )
    if schedule.get("source") == "recorded":  # the installed schedule (--cron only shows another)
        due = _last_due(schedule, now - timedelta(minutes=budget + SLACK_MINUTES))
        written = schedule.get("written_at")
        if due is not None and (written is None or pd.Timestamp(written) <= pd.Timestamp(due)):
            latest = max((str(r.get("decided_at") or "") for r in decisions), default="")
            if (not latest or pd.Timestamp(latest) < pd.Timestamp(due)) and not holder_alive(holder):
                problems.append(
                    Problem(
                        "retrain_overdue",
                        f"no retrain recorded since the scheduled run of {due.isoformat(timespec='minutes')} "
                        f"(cron '{schedule['cron']}', {schedule['tz']}; budget {budget:g} min + "
                        f"{SLACK_MINUTES:g} min slack)",
                    )
                )


def holder_alive(holder: tuple[LockInfo, bool] | None) -> bool:
    """Whether a live retrain holds the lock (``_retrain_holder``'s answer)."""
    return holder is not None and holder[1]


def _retrain_holder(home: Path) -> tuple[LockInfo, bool] | None:
    """The retrain lock's holder info and whether a live process holds it (tested with a shared
    non-blocking ``flock`` on a read-only descriptor: status writes nothing); None without a lock file."""
    path = home / RETRAIN_LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        info = read_lock_info(path) or LockInfo(None, None, None, None)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return info, True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return info, False
    finally:
        os.close(fd)


def _abandoned_run(home: Path) -> str | None:
    """The newest nightly run folder when its record still says ``running`` (the caller knows no
    retrain holds the lock). Only the newest: once a later retrain ran, a killed one is history."""
    nightly = [run for run in list_runs(home)[:ABANDONED_RUNS] if run.run_id.startswith("nightly-")]
    if nightly and nightly[0].status() == "running":
        return nightly[0].run_id
    return None


def _last_due(schedule: dict[str, Any], before: datetime) -> datetime | None:
    """The last fire time of the schedule at or before ``before``."""
    trigger = cron_trigger(schedule["cron"], schedule["tz"])
    for lookback in (timedelta(days=1), timedelta(days=35)):
        times = [t for t in next_fire_times(trigger, before - lookback, 2000) if t <= before]
        if times:
            return times[-1]
    return None
