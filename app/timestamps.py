"""ISO timestamps as local wall-clock text, for status lines and cards (standard library only, so the
CLI's command modules may import it at their top without slowing ``--help``)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo


def local_time(iso: str | None, tz: str = "UTC", fmt: str = "%Y-%m-%d %H:%M") -> str:
    """``iso`` (UTC when it has no offset) in ``tz`` as ``fmt``; ``-`` for none, the text itself when
    it is not an ISO time.

    >>> local_time("2026-11-26T07:30:00+00:00", "America/New_York")
    '2026-11-26 02:30'
    """
    if not iso:
        return "-"
    try:
        stamp = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    stamp = stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp
    return f"{stamp.astimezone(ZoneInfo(tz)):{fmt}}"
