"""Run ``podracer retrain`` on a cron schedule in-process, with APScheduler 3.

:func:`cron_trigger` builds an APScheduler ``CronTrigger`` from the parsed expression
(``app.nightly.cron``). We never call ``CronTrigger.from_crontab``: in APScheduler 3 it reads
day-of-week 0 as *Monday* (crontab: Sunday), so ``1-5`` would silently mean Tuesday..Saturday.
Weekdays are passed by name instead, and :class:`OncePerWallClockTrigger` fires a repeated autumn
wall-clock time once, as cron and systemd do. :func:`run_schedule` runs the job on the trigger until
``max_runs``. The same schedule as crontab or systemd text: ``app.nightly.os_schedule``.

The schedule record, ``<home>/schedule.json``: the cron expression, time zone, config and format
(``in-process``, ``crontab`` or ``systemd``) that ``podracer schedule run`` set up or
``podracer schedule print`` printed last (:func:`record_schedule`, atomic), and when; ``podracer
status`` computes the next retrain from it (:func:`read_schedule`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from apscheduler.triggers.cron import CronTrigger
from pydantic import Field, field_validator

from app.nightly.cron import DEFAULT_TZ, parse_cron, zone
from data.artifact import Artifact
from data.errors import ArtifactError, ConfigError, PodracerError, one_line

log = logging.getLogger(__name__)


def _join(values: Sequence[int], full: int) -> str:
    return "*" if len(values) == full else ",".join(str(v) for v in values)


class OncePerWallClockTrigger(CronTrigger):
    """A ``CronTrigger`` that fires each local wall-clock time at most once.

    APScheduler 3 fires a time inside the autumn fall-back hour twice (once per UTC offset); cron and
    systemd fire it once. We skip the second occurrence (``fold=1``) when the first one matched too.
    """

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        """The next fire time after ``now``, skipping the repeat of an ambiguous wall-clock time."""
        candidate = super().get_next_fire_time(previous_fire_time, now)
        while candidate is not None and _is_repeat(candidate):
            # APScheduler searches in wall-clock time and re-localizes with fold=0, so any "now"
            # inside the repeated hour leads back here: restart from the first unambiguous instant.
            # previous_fire_time=None: otherwise APScheduler would restart the search from it.
            candidate = super().get_next_fire_time(None, _after_repeat(candidate))
        return candidate


def _ambiguous(moment: datetime) -> bool:
    wall = moment.replace(tzinfo=None)
    tz = moment.tzinfo
    return wall.replace(fold=0, tzinfo=tz).utcoffset() != wall.replace(fold=1, tzinfo=tz).utcoffset()


def _is_repeat(moment: datetime) -> bool:
    """True if ``moment`` is the second (later) occurrence of its local wall-clock time."""
    if not _ambiguous(moment):
        return False
    return moment.utcoffset() == moment.replace(fold=1).utcoffset()


def _after_repeat(moment: datetime) -> datetime:
    """The first whole minute after ``moment`` whose wall-clock time is no longer ambiguous."""
    tz = moment.tzinfo
    # Step in UTC: aware-datetime arithmetic in Python is wall-clock arithmetic and ignores fold.
    utc = moment.astimezone(UTC).replace(second=0, microsecond=0)
    for _ in range(24 * 60):
        utc += timedelta(minutes=1)
        local = utc.astimezone(tz)
        if not _ambiguous(local):
            return local
    return utc.astimezone(tz)


def cron_trigger(expr: str, tz: str = DEFAULT_TZ) -> CronTrigger:
    """An APScheduler trigger for ``expr`` in ``tz`` (weekdays by name; see the module docstring)."""
    spec = parse_cron(expr)
    day_names = ",".join(
        ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[(d - 1) % 7] for d in spec.weekdays
    )
    return OncePerWallClockTrigger(
        minute=_join(spec.minutes, 60),
        hour=_join(spec.hours, 24),
        day=_join(spec.days, 31),
        month=_join(spec.months, 12),
        day_of_week="*" if spec.any_weekday else day_names,
        timezone=zone(tz),
    )


def next_fire_times(trigger: CronTrigger, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times strictly after ``start`` (a timezone-aware datetime)."""
    out: list[datetime] = []
    previous: datetime | None = None
    now = start
    for _ in range(count + 2):  # at most one extra call: when the first answer is ``start`` itself
        if len(out) == count:
            break
        fire = trigger.get_next_fire_time(previous, now)
        if fire is None:
            break
        if fire <= start:  # get_next_fire_time may return ``now`` itself
            now = fire + timedelta(seconds=1)
            continue
        # Normalized through UTC: APScheduler may hand back a wall time that does not exist
        # (02:30 on a spring-forward day), which only the UTC instant describes correctly.
        out.append(fire.astimezone(UTC).astimezone(fire.tzinfo))
        previous = fire
        now = fire + timedelta(seconds=1)
    return out


# --- the schedule record ------------------------------------------------------------------------------

SCHEDULE_FILE = "schedule.json"
#: How the schedule runs: ``podracer schedule run`` (in-process) or the text ``schedule print`` gave.
FORMATS = ("in-process", "crontab", "systemd")


class ScheduleRecord(Artifact):
    """The schedule the user set up last, as ``<home>/schedule.json`` holds it (a versioned
    ``data.artifact.Artifact``: a file written before ``schema_version`` reads as version 1; a newer
    one, a malformed field, an unknown cron expression or time zone is one line naming the file)."""

    FILE = "the schedule record"
    SCHEMA_VERSION = 1

    cron: str = Field(description="the cron expression (5 fields)")
    tz: str = Field(description="the time zone it fires in")
    config: str | None = Field(
        None, description="absolute path of the config the runs read (null: the defaults)"
    )
    format: Literal["in-process", "crontab", "systemd"] = Field(description="how it runs: one of FORMATS")
    written_at: str = Field(description="when it was set up, ISO UTC")

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            parse_cron(value)
        except ConfigError as err:
            raise ValueError(one_line(err, typed=False)) from None
        return value

    @field_validator("tz")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            zone(value)
        except ConfigError as err:
            raise ValueError(one_line(err, typed=False)) from None
        return value

    @field_validator("written_at")
    @classmethod
    def _when(cls, value: str) -> str:
        datetime.fromisoformat(value)
        return value

    @property
    def source(self) -> str:
        """The command that set it up: ``schedule run`` or ``schedule print --format <format>``."""
        return "schedule run" if self.format == "in-process" else f"schedule print --format {self.format}"

    def settings(self) -> dict[str, Any]:
        """The record's settings (what ``podracer status`` shows)."""
        return self.model_dump(include={"cron", "tz", "config", "format", "written_at"})


def schedule_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/schedule.json``."""
    return Path(home) / SCHEDULE_FILE


def record_schedule(
    home: str | os.PathLike[str],
    *,
    cron: str,
    tz: str,
    config: str | os.PathLike[str] | None,
    fmt: str,
    now: datetime | None = None,
) -> ScheduleRecord:
    """Write the schedule set up in ``home`` to ``<home>/schedule.json`` (atomically); returns it."""
    if fmt not in FORMATS:
        raise ConfigError(f"schedule format {fmt!r}: one of {', '.join(FORMATS)}")
    record = ScheduleRecord(
        cron=parse_cron(cron).expr,
        tz=tz,
        config=str(Path(config).resolve()) if config is not None else None,
        format=fmt,
        written_at=(now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds"),
    )
    record.write(schedule_path(home))
    return record


def read_schedule(home: str | os.PathLike[str]) -> ScheduleRecord | None:
    """The recorded schedule, or None when none was recorded; an unreadable one is a one-line error."""
    path = schedule_path(home)
    if not path.exists():
        return None
    try:
        return ScheduleRecord.read(path)
    except ArtifactError as err:
        detail = str(err).removeprefix(str(path)).removeprefix(":").removeprefix(" is").strip()
        raise ArtifactError(f"{path} is unreadable: {detail}") from None


# --- in-process scheduler ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleReport:
    """What an in-process schedule did before it stopped."""

    runs: int
    failures: int
    results: tuple[Any, ...]


@dataclass
class _ScheduledRuns:
    """The job as the scheduler calls it: each run logged and counted, a failing run logged and kept
    as its error (one failed night must not stop the schedule), ``finished`` set after ``max_runs``."""

    job: Callable[[], Any]
    describe: Callable[[Any], str]
    max_runs: int | None
    finished: threading.Event = field(default_factory=threading.Event)
    results: list[Any] = field(default_factory=list)
    runs: int = 0
    failures: int = 0

    def __call__(self) -> None:
        number = self.runs + 1
        started = time.monotonic()
        log.info("scheduled retrain #%d starting", number)
        try:
            result = self.job()
        except PodracerError as err:
            self.failures += 1
            log.error(
                "scheduled retrain #%d failed after %.1f s: %s", number, time.monotonic() - started, err
            )
            self.results.append(err)
        except Exception as err:  # noqa: BLE001 - one failed night must not stop the schedule
            self.failures += 1
            log.exception("scheduled retrain #%d crashed: %s: %s", number, type(err).__name__, err)
            self.results.append(err)
        else:
            elapsed = time.monotonic() - started
            log.info("scheduled retrain #%d done in %.1f s: %s", number, elapsed, self.describe(result))
            self.results.append(result)
        finally:
            self.runs = number

    def after(self, event: Any, scheduler: Any) -> None:
        """The scheduler's listener: a missed run is logged; the last run sets ``finished``; else the
        next fire time is logged."""
        from apscheduler.events import EVENT_JOB_MISSED

        if event.code == EVENT_JOB_MISSED:
            log.warning("a scheduled retrain was missed (due %s)", event.scheduled_run_time)
            return
        if self.max_runs is not None and self.runs >= self.max_runs:
            self.finished.set()
            return
        job_obj = scheduler.get_job("retrain")
        if job_obj is not None and job_obj.next_run_time is not None:
            log.info("next retrain at %s", job_obj.next_run_time.isoformat())

    def report(self) -> ScheduleReport:
        return ScheduleReport(runs=self.runs, failures=self.failures, results=tuple(self.results))


def _stop_when_finished(scheduler: Any, finished: threading.Event) -> None:
    """Shut ``scheduler`` down once ``finished`` is set, from a thread of our own, never from the
    listener: a job that finishes before its future's callback is attached runs the listener in the
    scheduler's own thread, in the middle of its job-store update, and shutting down there breaks that
    update (JobLookupError)."""

    def stop() -> None:
        finished.wait()
        scheduler.shutdown(wait=True)

    threading.Thread(target=stop, name="podracer-schedule-stop", daemon=True).start()


def run_schedule(
    job: Callable[[], Any],
    trigger: Any,
    *,
    max_runs: int | None = None,
    run_now: bool = False,
    describe: Callable[[Any], str] = str,
) -> ScheduleReport:
    """Run ``job`` on ``trigger`` with an APScheduler ``BlockingScheduler`` until ``max_runs`` runs.

    Each run is logged (start, outcome, duration, next fire time); a failing run is logged and the
    schedule goes on. ``max_instances=1`` and ``coalesce=True``: a run still going when the next is due,
    or several missed runs, collapse into one. ``run_now`` also runs once immediately.
    """
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.schedulers.blocking import BlockingScheduler

    if max_runs is not None and max_runs < 1:
        raise ConfigError("--max-runs must be at least 1")
    scheduler = BlockingScheduler(timezone=getattr(trigger, "timezone", None) or zone(DEFAULT_TZ))
    runs = _ScheduledRuns(job, describe, max_runs)
    scheduler.add_listener(
        lambda event: runs.after(event, scheduler), EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED
    )
    _stop_when_finished(scheduler, runs.finished)
    kwargs: dict[str, Any] = {}
    if run_now:
        kwargs["next_run_time"] = datetime.now(scheduler.timezone)
    job_obj = scheduler.add_job(
        runs,
        trigger,
        id="retrain",
        name="podracer retrain",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=3600,
        **kwargs,
    )
    first = job_obj.next_run_time if hasattr(job_obj, "next_run_time") else None
    log.info("retrain scheduled (%s)%s", trigger, f"; first run at {first.isoformat()}" if first else "")
    scheduler.start()
    return runs.report()
