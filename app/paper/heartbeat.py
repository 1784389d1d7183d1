"""The paper loop's heartbeat: ``<home>/paper/heartbeat.json``, its last cycle, written atomically.

``run_paper`` writes one after every cycle (closed market included) with ``data.atomic``, so a
reader (``podracer status``, the dashboard) sees the previous heartbeat or the new one, never half
of one. It says when (``time``: the wall clock, UTC), what (``status``, ``alert``, ``messages``),
which bundle (``bundle_id``, ``run_id``, ``mode``), the orders, the gone tickers needing attention,
and when the next cycle is due.

**Stale**: more than :data:`STALE_INTERVALS` decision intervals of *market hours* since the
heartbeat (``data.calendar.market_seconds``): a loop that wrote its last heartbeat at Friday's close
is not stale on Sunday, one silent for half an hour of an open market (15-minute decisions) is.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from data.atomic import atomic_write_json
from data.calendar import market_seconds
from data.errors import PodracerError, one_line

STALE_INTERVALS = 2  # decision intervals of market hours without a heartbeat: the loop is stale
# Cycle statuses that are a failure of the loop itself (a halt or the kill switch is the loop working).
FAILED_STATUSES = ("error", "no_champion")


def heartbeat_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/paper/heartbeat.json``."""
    return Path(home) / "paper" / "heartbeat.json"


@dataclass(frozen=True)
class Heartbeat:
    """One cycle of the paper loop, as ``heartbeat.json`` holds it."""

    time: str  # wall clock (UTC, ISO) when written
    status: str  # the cycle's (app.paper.cycle.CycleResult.status; app.paper.cycle.heartbeat_of builds it)
    mode: str  # "champion" | "bundle"
    interval_s: float  # seconds between two decisions
    next_due: str  # wall clock (UTC, ISO) of the next cycle
    bundle_id: str | None = None
    run_id: str | None = None
    session: str | None = None
    broker_time: str | None = None
    decision_ts: str | None = None
    orders: int = 0  # planned
    submitted: int = 0
    alert: str | None = None  # what the operator must see (a refused champion bundle, an error)
    messages: list[str] = field(default_factory=list)
    attention: list[str] = field(default_factory=list)  # gone tickers the broker will not trade
    kill_switch: str | None = None
    dry_run: bool = False
    pid: int = 0

    @property
    def ok(self) -> bool:
        """The last cycle did its job (trading, halted or closed) and nothing needs the operator."""
        return self.status not in FAILED_STATUSES and self.alert is None

    def age_s(self, now: datetime) -> float:
        """Wall-clock seconds since the heartbeat."""
        return (pd.Timestamp(now) - pd.Timestamp(self.time)).total_seconds()

    def stale(self, now: datetime) -> bool:
        """More than :data:`STALE_INTERVALS` decision intervals of market hours since the heartbeat."""
        return market_seconds(pd.Timestamp(self.time), pd.Timestamp(now)) > STALE_INTERVALS * self.interval_s


def write_heartbeat(path: str | os.PathLike[str], beat: Heartbeat) -> Path:
    """Write ``beat`` to ``path`` atomically."""
    return atomic_write_json(path, asdict(beat))


def read_heartbeat(home: str | os.PathLike[str]) -> Heartbeat | None:
    """The last heartbeat, or None when the loop never ran; an unreadable file is a one-line error."""
    path = heartbeat_path(home)
    if not path.is_file():
        return None
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
        known = {k: v for k, v in raw.items() if k in Heartbeat.__dataclass_fields__}
        beat = Heartbeat(**known)
        _check_types(beat)
        return beat
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise PodracerError(
            f"{path} is unreadable ({one_line(err)}): the paper loop rewrites it each cycle"
        ) from None


_TEXT = ("time", "status", "mode", "next_due")
_OPTIONAL_TEXT = ("bundle_id", "run_id", "session", "broker_time", "decision_ts", "alert", "kill_switch")


def _check_types(beat: Heartbeat) -> None:
    """TypeError/ValueError naming the first field of the wrong type (a hand-edited or foreign file):
    a reader gets one line, never an internal error further on."""
    for name in _TEXT:
        if not isinstance(getattr(beat, name), str):
            raise TypeError(f"{name!r} is not a string")
    for name in _OPTIONAL_TEXT:
        if getattr(beat, name) is not None and not isinstance(getattr(beat, name), str):
            raise TypeError(f"{name!r} is not a string")
    if (
        isinstance(beat.interval_s, bool)
        or not isinstance(beat.interval_s, int | float)
        or beat.interval_s <= 0
    ):
        raise TypeError("'interval_s' is not a positive number")
    for name in ("orders", "submitted", "pid"):
        if isinstance(getattr(beat, name), bool) or not isinstance(getattr(beat, name), int):
            raise TypeError(f"{name!r} is not an integer")
    for name in ("messages", "attention"):
        value = getattr(beat, name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{name!r} is not a list of strings")
    if not isinstance(beat.dry_run, bool):
        raise TypeError("'dry_run' is not true or false")
    pd.Timestamp(beat.time), pd.Timestamp(beat.next_due)  # ValueError when not a time
