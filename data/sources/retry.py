"""Retries for data requests: HTTP 429 waits out ``Retry-After``; 5xx and dropped connections back off.

Both are bounded: all 429 waits of one fetch together may not exceed ``max_wait_s`` (the data API's
rate limit is per minute, so a couple of minutes is plenty), and a request failing with a 5xx or a
dropped connection is tried ``attempts`` times. Past either bound the caller gets a ``FetchFailed``
naming what failed; the fetch engine adds the chunk to resume from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

from data.errors import DataError
from data.sources.access import DATA_TIMEOUT_S

T = TypeVar("T")


class FetchFailed(DataError):
    """A request that still failed after the bounded retries (the chunk stays unrecorded)."""


class Throttled(Exception):
    """HTTP 429: wait ``wait_s`` seconds (from Retry-After) before asking again."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"rate limited (Retry-After {wait_s:g} s)")
        self.wait_s = wait_s


class Transient(Exception):
    """A 5xx reply or a dropped connection: worth another try."""


def retry_after_seconds(
    value: str | None, *, default: float | None = 1.0, now: datetime | None = None
) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; ``default`` when absent or unreadable.
    The one parser of the header (market-data fetches and the paper broker's retries)."""
    if value is None or not str(value).strip():
        return default
    text = str(value).strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return default
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass
class FetchRetryPolicy:
    """Bounds on waiting: total 429 wait per fetch, tries per request, backoff for transient errors,
    and each request's deadline (``timeout_s``)."""

    max_wait_s: float = 120.0
    attempts: int = 4
    timeout_s: float = (
        DATA_TIMEOUT_S  # seconds one request may take (connect, each read): a hung server is a retry
    )
    backoff_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    waited_s: float = field(default=0.0, init=False)
    throttled: int = field(default=0, init=False)

    def call(self, request: Callable[[], T], what: str) -> T:
        """``request()``, retried on ``Throttled`` / ``Transient`` within the bounds."""
        tries = 0
        while True:
            try:
                return request()
            except Throttled as err:
                self.throttled += 1
                if self.waited_s + err.wait_s > self.max_wait_s:
                    raise FetchFailed(
                        f"{what}: still rate limited after waiting {self.waited_s:.0f} s in total "
                        f"(limit {self.max_wait_s:.0f} s)"
                    ) from None
                self.waited_s += err.wait_s
                self.sleep(err.wait_s)
            except Transient as err:
                tries += 1
                if tries >= self.attempts:
                    raise FetchFailed(f"{what}: {err} (after {tries} tries)") from None
                self.sleep(self.backoff_s * 2 ** (tries - 1))
