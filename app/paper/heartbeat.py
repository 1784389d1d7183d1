"""The paper loop's heartbeat: ``<home>/paper/heartbeat.json``, its last cycle, written atomically.

``run_paper`` writes one after every cycle (closed market included) with ``data.atomic``, so a
reader (``podracer status``, the dashboard) sees the previous heartbeat or the new one, never half
of one. It says when (``time``: the wall clock, UTC), what (``status``, ``alert``, ``messages``),
which bundle (``bundle_id``, ``run_id``, ``mode``), the orders, the gone tickers needing attention,
and when the next cycle is due.

The file is :class:`Heartbeat`, a versioned ``data.artifact.Artifact``: read back validated (every
field of its type: a hand-edited or foreign file is one line naming the field, never an internal error
further on), a file from a newer schema version refused.

**Stale**: more than :data:`STALE_INTERVALS` decision intervals of *market hours* since the
heartbeat (``data.calendar.market_seconds``): a loop that wrote its last heartbeat at Friday's close
is not stale on Sunday, one silent for half an hour of an open market (15-minute decisions) is.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pandas as pd
from pydantic import ConfigDict, Field, field_validator

from data.artifact import Artifact
from data.calendar import market_seconds
from data.errors import ArtifactError

STALE_INTERVALS = 2  # decision intervals of market hours without a heartbeat: the loop is stale
# Cycle statuses that are a failure of the loop itself (a halt or the kill switch is the loop working).
FAILED_STATUSES = ("error", "no_champion")


def heartbeat_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/paper/heartbeat.json``."""
    return Path(home) / "paper" / "heartbeat.json"


class Heartbeat(Artifact):
    """One cycle of the paper loop, as ``heartbeat.json`` holds it."""

    FILE = "heartbeat.json"
    SCHEMA_VERSION = 1
    model_config = ConfigDict(strict=True)  # a number is not a string, nor a boolean an integer

    time: str  # wall clock (UTC, ISO) when written
    status: str  # the cycle's (app.paper.cycle.CycleResult.status; app.paper.cycle.heartbeat_of builds it)
    mode: str  # "champion" | "bundle"
    interval_s: float = Field(gt=0)  # seconds between two decisions
    next_due: str  # wall clock (UTC, ISO) of the next cycle
    bundle_id: str | None = None
    run_id: str | None = None
    session: str | None = None
    broker_time: str | None = None
    decision_ts: str | None = None
    orders: int = 0  # planned
    submitted: int = 0
    alert: str | None = None  # what the operator must see (a refused champion bundle, an error)
    messages: list[str] = Field(default_factory=list)
    attention: list[str] = Field(default_factory=list)  # gone tickers the broker will not trade
    kill_switch: str | None = None
    dry_run: bool = False
    pid: int = 0

    @field_validator("time", "next_due")
    @classmethod
    def _a_time(cls, value: str) -> str:
        pd.Timestamp(value)  # ValueError when not a time
        return value

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
    return beat.write(path)


def read_heartbeat(home: str | os.PathLike[str]) -> Heartbeat | None:
    """The last heartbeat, or None when the loop never ran; an unreadable file is a one-line error."""
    path = heartbeat_path(home)
    if not path.is_file():
        return None
    try:
        return Heartbeat.read(path)
    except ArtifactError as err:
        problem = str(err)[len(str(path)) :].lstrip(":").strip().removeprefix("is ")
        raise ArtifactError(
            f"{path} is unreadable ({problem}): the paper loop rewrites it each cycle"
        ) from None
