"""Run ``podracer retrain`` on a cron schedule: in-process (APScheduler 3), or as crontab / systemd text.

One parser (:func:`parse_cron`) reads the standard 5-field crontab expression (``minute hour
day-of-month month day-of-week``; numbers, names, ``*``, lists, ranges, steps, ``@daily``-style
macros) into explicit value sets, and every back end is generated from those sets:

- :func:`cron_trigger`: an APScheduler ``CronTrigger``. We never call ``CronTrigger.from_crontab``:
  in APScheduler 3 it reads day-of-week 0 as *Monday* (crontab: Sunday), so ``1-5`` would silently
  mean Tuesday..Saturday. Weekdays are passed by name instead.
- :func:`crontab_text`: a crontab block (``CRON_TZ=`` line + the job line).
- :func:`systemd_units`: a ``.service`` + ``.timer`` pair whose ``OnCalendar=`` carries the time zone.

Semantics we pin down (and test):
- Times are wall-clock times in ``tz`` (default America/New_York), so ``0 2 * * 1-5`` runs at 02:00
  local on both sides of a DST change (07:00 UTC in winter, 06:00 UTC in summer).
- An expression that restricts BOTH day-of-month and day-of-week is rejected: crontab ORs the two
  fields while APScheduler and systemd AND them, so no single meaning would hold everywhere.
- A wall-clock time that occurs twice (the autumn fall-back hour) fires once, at its first
  occurrence, in-process as with cron and systemd. A wall-clock time that does not exist (the spring
  jump, e.g. 02:30 on the second Sunday of March in New York) fires at the shifted time in-process
  (03:30, like cron) but is skipped by systemd. US DST changes fall on Sundays, so weekday schedules
  such as ``0 2 * * 1-5`` never meet either case.
"""

from __future__ import annotations

import calendar
import logging
import os
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from data.errors import ConfigError, PodracerError

log = logging.getLogger(__name__)

DEFAULT_TZ = "America/New_York"
DEFAULT_CRON = "0 2 * * 1-5"
UNIT_NAME = "podracer-retrain"

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbering: 0 = Sunday
_SYSTEMD_DAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0  # value of names[0]


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day-of-week", 0, 7, _DAYS, 0),  # 7 is Sunday too
)


@dataclass(frozen=True)
class CronSpec:
    """A parsed crontab expression: the explicit set of values of each field (sorted)."""

    expr: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]  # day of month, 1..31
    months: tuple[int, ...]  # 1..12
    weekdays: tuple[int, ...]  # 0 = Sunday .. 6 = Saturday

    @property
    def any_day(self) -> bool:
        """Day-of-month unrestricted."""
        return len(self.days) == 31

    @property
    def any_weekday(self) -> bool:
        """Day-of-week unrestricted."""
        return len(self.weekdays) == 7


def _value(token: str, spec: _Field, expr: str) -> int:
    low = token.lower()
    if spec.names and low in spec.names:
        return spec.names.index(low) + spec.name_base
    if not token.isdigit():
        raise ConfigError(f"cron {expr!r}: {spec.name} field: {token!r} is not a number or name")
    return int(token)


def _parse_field(text: str, spec: _Field, expr: str) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise ConfigError(f"cron {expr!r}: {spec.name} field: empty list item")
        base, _, step_text = item.partition("/")
        step = 1
        if _:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ConfigError(f"cron {expr!r}: {spec.name} field: bad step {step_text!r}")
            step = int(step_text)
        if base == "*":
            start, stop = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, stop = _value(first, spec, expr), _value(last, spec, expr)
        else:
            start = _value(base, spec, expr)
            # "a/n" means a, a+n, ... up to the field's maximum (cronie); a bare "a" is just a.
            stop = spec.high if step_text else start
        for v in (start, stop):
            if not spec.low <= v <= spec.high:
                raise ConfigError(f"cron {expr!r}: {spec.name} field: {v} is outside {spec.low}..{spec.high}")
        if start > stop:
            raise ConfigError(f"cron {expr!r}: {spec.name} field: range {base!r} runs backwards")
        values.update(range(start, stop + 1, step))
    return values


def parse_cron(expr: str) -> CronSpec:
    """Parse a 5-field crontab expression (or ``@daily``-style macro); errors name the field."""
    text = " ".join(expr.split())
    fields = _MACROS.get(text.lower(), text).split(" ")
    if text.startswith("@") and text.lower() not in _MACROS:
        raise ConfigError(f"cron {expr!r}: unsupported macro (use one of {', '.join(_MACROS)})")
    if len(fields) != 5:
        raise ConfigError(
            f"cron {expr!r}: expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    minutes, hours, days, months, weekdays = (
        _parse_field(f, s, expr) for f, s in zip(fields, _FIELDS, strict=True)
    )
    if 7 in weekdays:
        weekdays = (weekdays - {7}) | {0}
    spec = CronSpec(
        expr=text,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=tuple(sorted(days)),
        months=tuple(sorted(months)),
        weekdays=tuple(sorted(weekdays)),
    )
    if not spec.any_day and not spec.any_weekday:
        raise ConfigError(
            f"cron {expr!r}: restrict day-of-month or day-of-week, not both "
            "(crontab ORs them, APScheduler and systemd AND them)"
        )
    # Feb 29 counts: a leap-day schedule is valid, it just runs every four years.
    max_day = {m: calendar.monthrange(2024, m)[1] for m in spec.months}
    if not any(d <= max_day[m] for m in spec.months for d in spec.days):
        raise ConfigError(f"cron {expr!r}: no month in the expression has such a day, it would never run")
    return spec


def zone(tz: str) -> ZoneInfo:
    """An IANA time zone, or a ConfigError naming it."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {tz!r} (use an IANA name such as America/New_York)") from None


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


# --- text for the OS schedulers ---------------------------------------------------------------------


def _systemd_numbers(values: Sequence[int], low: int, high: int) -> str:
    """A systemd calendar component: ``*``, ``a/step`` for a progression up to the max, else a list."""
    if len(values) == high - low + 1:
        return "*"
    if len(values) >= 3:
        step = values[1] - values[0]
        regular = all(b - a == step for a, b in zip(values, values[1:], strict=False))
        if regular and values[-1] + step > high:
            return f"{values[0]:02d}/{step}"
    return ",".join(f"{v:02d}" for v in values)


def _systemd_weekdays(days: Sequence[int]) -> str:
    # Monday-first runs, so Mon..Fri stays one range; Sunday (0) sorts last.
    order = sorted(days, key=lambda d: (d - 1) % 7)
    runs: list[list[int]] = []
    for d in order:
        if runs and (runs[-1][-1] % 7) + 1 == d:
            runs[-1].append(d)
        else:
            runs.append([d])
    parts = [
        f"{_SYSTEMD_DAYS[r[0]]}..{_SYSTEMD_DAYS[r[-1]]}"
        if len(r) >= 3
        else ",".join(_SYSTEMD_DAYS[x] for x in r)
        for r in runs
    ]
    return ",".join(parts)


def on_calendar(expr: str, tz: str = DEFAULT_TZ) -> str:
    """The systemd ``OnCalendar=`` value equivalent to the cron expression, time zone included."""
    spec = parse_cron(expr)
    zone(tz)
    weekday = "" if spec.any_weekday else _systemd_weekdays(spec.weekdays) + " "
    month = _systemd_numbers(spec.months, 1, 12)
    day = _systemd_numbers(spec.days, 1, 31)
    hour = _systemd_numbers(spec.hours, 0, 23)
    minute = _systemd_numbers(spec.minutes, 0, 59)
    return f"{weekday}*-{month}-{day} {hour}:{minute}:00 {tz}"


def podracer_executable() -> list[str]:
    """An absolute command that runs this podracer's CLI (the console script next to the interpreter)."""
    script = Path(sys.executable).parent / "podracer"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("podracer")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "app.cli"]


def retrain_command(home: str | os.PathLike[str], config: str | os.PathLike[str] | None) -> list[str]:
    """The argv of one retrain run, absolute paths only (OS schedulers start in another directory)."""
    argv = [*podracer_executable(), "--home", str(Path(home).resolve()), "retrain"]
    if config is not None:
        argv += ["--config", str(Path(config).resolve())]
    return argv


def crontab_text(
    expr: str, *, tz: str = DEFAULT_TZ, home: str | os.PathLike[str], config: str | os.PathLike[str] | None
) -> str:
    """A crontab block (paste into ``crontab -e``): a comment, ``CRON_TZ=``, and the job line."""
    spec = parse_cron(expr)
    zone(tz)
    home_abs = Path(home).resolve()
    log_file = home_abs / "logs" / "retrain.log"
    command = " ".join(shlex.quote(a) for a in retrain_command(home, config))
    # cron starts jobs in $HOME: run from today's directory, as the user's own retrain would.
    command = f"cd {shlex.quote(str(Path.cwd()))} && mkdir -p {shlex.quote(str(log_file.parent))} && {command} >> {shlex.quote(str(log_file))} 2>&1"
    # In a crontab line an unescaped % ends the command and feeds the rest to stdin.
    command = command.replace("%", r"\%")
    return (
        "# podracer nightly retrain (minute hour day-of-month month day-of-week)\n"
        f"# times are {tz} wall-clock times. CRON_TZ applies to every later line of the crontab; cronie\n"
        "# honours it, other crons may not: if `man 5 crontab` does not list CRON_TZ, write the times in\n"
        "# the system time zone instead.\n"
        f"CRON_TZ={tz}\n"
        f"{spec.expr} {command}\n"
    )


def _systemd_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-+=:@," for c in arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_units(
    expr: str,
    *,
    tz: str = DEFAULT_TZ,
    home: str | os.PathLike[str],
    config: str | os.PathLike[str] | None,
    name: str = UNIT_NAME,
) -> dict[str, str]:
    """``{"<name>.service": text, "<name>.timer": text}`` for a user or system systemd instance."""
    calendar_spec = on_calendar(expr, tz)
    home_abs = Path(home).resolve()
    exec_start = " ".join(_systemd_quote(a) for a in retrain_command(home, config))
    service = (
        "[Unit]\n"
        "Description=podracer nightly retrain (champion vs challenger)\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        # Relative paths inside the config resolve as they do for the user who printed these units.
        f"WorkingDirectory={_systemd_quote(str(Path.cwd()))}\n"
        f"Environment=PODRACER_HOME={_systemd_quote(str(home_abs))}\n"
        f"ExecStart={exec_start}\n"
        # Exit 75: another retrain holds the lock; not a failure worth an alert.
        "SuccessExitStatus=75\n"
        "Nice=10\n"
    )
    timer = (
        "[Unit]\n"
        f"Description=podracer nightly retrain at {spec_comment(expr, tz)}\n"
        "\n"
        "[Timer]\n"
        f"OnCalendar={calendar_spec}\n"
        # Persistent: a run missed while the machine was off happens at the next boot.
        "Persistent=true\n"
        f"Unit={name}.service\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    return {f"{name}.service": service, f"{name}.timer": timer}


def spec_comment(expr: str, tz: str) -> str:
    """``'0 2 * * 1-5' (cron) in America/New_York`` with any % doubled for systemd."""
    return f"'{parse_cron(expr).expr}' (cron) in {tz}".replace("%", "%%")


def systemd_text(units: dict[str, str]) -> str:
    """Both units as one printable text with install instructions."""
    out = []
    for filename, body in units.items():
        out.append(f"# ---- {filename} ----\n{body}")
    timer = next(f for f in units if f.endswith(".timer"))
    out.append(
        "# install (per user): copy both files to ~/.config/systemd/user/, then\n"
        f"#   systemctl --user daemon-reload && systemctl --user enable --now {timer}\n"
        "#   loginctl enable-linger $USER   # keep user timers running while logged out\n"
        f"# check: systemctl --user list-timers {timer}\n"
    )
    return "\n".join(out)


# --- in-process scheduler ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleReport:
    """What an in-process schedule did before it stopped."""

    runs: int
    failures: int
    results: tuple[Any, ...]


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
    results: list[Any] = []
    counts = {"runs": 0, "failures": 0}

    def wrapped() -> None:
        number = counts["runs"] + 1
        started = time.monotonic()
        log.info("scheduled retrain #%d starting", number)
        try:
            result = job()
        except PodracerError as err:
            counts["failures"] += 1
            log.error(
                "scheduled retrain #%d failed after %.1f s: %s", number, time.monotonic() - started, err
            )
            results.append(err)
        except Exception as err:  # noqa: BLE001 - one failed night must not stop the schedule
            counts["failures"] += 1
            log.exception("scheduled retrain #%d crashed: %s: %s", number, type(err).__name__, err)
            results.append(err)
        else:
            log.info(
                "scheduled retrain #%d done in %.1f s: %s",
                number,
                time.monotonic() - started,
                describe(result),
            )
            results.append(result)
        finally:
            counts["runs"] = number

    def after(event: Any) -> None:
        if event.code == EVENT_JOB_MISSED:
            log.warning("a scheduled retrain was missed (due %s)", event.scheduled_run_time)
            return
        if max_runs is not None and counts["runs"] >= max_runs:
            finished.set()
            return
        job_obj = scheduler.get_job("retrain")
        if job_obj is not None and job_obj.next_run_time is not None:
            log.info("next retrain at %s", job_obj.next_run_time.isoformat())

    scheduler.add_listener(after, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)

    # Shut down from a thread of our own, never from the listener: a job that finishes before its
    # future's callback is attached runs the listener in the scheduler's own thread, in the middle of
    # its job-store update, and shutting down there breaks that update (JobLookupError).
    finished = threading.Event()

    def stop_when_finished() -> None:
        finished.wait()
        scheduler.shutdown(wait=True)

    threading.Thread(target=stop_when_finished, name="podracer-schedule-stop", daemon=True).start()
    kwargs: dict[str, Any] = {}
    if run_now:
        kwargs["next_run_time"] = datetime.now(scheduler.timezone)
    job_obj = scheduler.add_job(
        wrapped,
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
    return ScheduleReport(runs=counts["runs"], failures=counts["failures"], results=tuple(results))
