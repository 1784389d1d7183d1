"""The cron expression of the nightly schedule: one parser that every back end is generated from.

:func:`parse_cron` reads the standard 5-field crontab expression (``minute hour day-of-month month
day-of-week``; numbers, names, ``*``, lists, ranges, steps, ``@daily``-style macros) into explicit
value sets (:class:`CronSpec`); ``app.nightly.schedule`` turns them into an APScheduler trigger and
``app.nightly.os_schedule`` into crontab and systemd text.

Semantics we pin down (and test):
- Times are wall-clock times in ``tz`` (default: the exchange's time zone, ``data.calendar.TZ``), so
  ``0 2 * * 1-5`` runs at 02:00 local on both sides of a DST change (07:00 UTC in winter, 06:00 UTC
  in summer).
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
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from data.calendar import TZ
from data.errors import ConfigError

DEFAULT_TZ = TZ  # 02:00 in the exchange's time zone: after its close, before its next open
DEFAULT_CRON = "0 2 * * 1-5"

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbering: 0 = Sunday
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
        raise ConfigError(f"unknown time zone {tz!r} (use an IANA name such as {DEFAULT_TZ})") from None
