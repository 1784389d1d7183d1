"""Fetch chunks (ticker batch x date window) and the manifest of completed ones.

A long fetch is cut into chunks: tickers in batches of ``batch`` and the date range in windows that
never cross a calendar month (so one chunk feeds one store file per ticker) and never exceed the
source's per-request limit (``max_days``). Each chunk is fetched, validated, aligned and written to
the store before the next one is requested, so memory holds one chunk at a time.

Completed work is recorded per (source, interval, ticker, window) in ``<home>/data/fetch_manifest.sqlite``
(WAL, one ``BEGIN IMMEDIATE`` transaction per chunk, committed only after the chunk's files were
renamed into place). Rerunning a fetch asks only for the (ticker, window) pairs not recorded; a kill
between a file rename and the manifest commit re-fetches that chunk, and the store's merge makes the
rewrite byte-identical. A window that reaches today or later is never recorded: its last session
may still be trading, so the next run fetches it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from data.sqlite import connect, transaction, use_wal

MANIFEST_FILE = "fetch_manifest.sqlite"
DEFAULT_BATCH = 10


@dataclass(frozen=True)
class Chunk:
    """One request unit: ``tickers`` for session dates ``[start, stop)`` (``stop`` exclusive)."""

    tickers: tuple[str, ...]
    start: date
    stop: date

    @property
    def label(self) -> str:
        names = self.tickers[0] if len(self.tickers) == 1 else f"{self.tickers[0]}..{self.tickers[-1]}"
        last = self.stop - timedelta(days=1)
        return f"{names} ({len(self.tickers)} ticker(s)) {self.start}..{last}"


#: The data feed each fetch manifest source names (``feed_label``): Alpaca's free plan serves the IEX
#: exchange's bars only, its paid one the consolidated tape (SIP).
FEED_LABELS = {"alpaca/iex": "iex", "alpaca/sip": "sip", "alpaca/otc": "otc", "yfinance/raw": "yfinance"}
#: What stored bars no fetch recorded are labelled (imported from CSV, or written by a synthetic run).
UNRECORDED_FEED = "stored (source not recorded)"


def feed_label(sources: Sequence[str]) -> str:
    """The data feed of bars fetched by ``sources`` (fetch manifest keys): ``"iex"``, ``"sip"``,
    ``"yfinance"``, several joined by ``"+"``; :data:`UNRECORDED_FEED` for none."""
    labels = sorted({FEED_LABELS.get(s, s.split("/", 1)[0]) for s in sources})
    return "+".join(labels) if labels else UNRECORDED_FEED


def windows(start: date, end: date, max_days: int) -> list[tuple[date, date]]:
    """Session dates ``start..end`` (inclusive) as ``[lo, hi)`` windows inside one calendar month
    and at most ``max_days`` long."""
    out: list[tuple[date, date]] = []
    cursor, stop = start, end + timedelta(days=1)
    while cursor < stop:
        month_end = date(cursor.year + cursor.month // 12, cursor.month % 12 + 1, 1)
        hi = min(stop, month_end, cursor + timedelta(days=max_days))
        out.append((cursor, hi))
        cursor = hi
    return out


def plan_chunks(
    tickers: Sequence[str], start: date, end: date, *, max_days: int = 31, batch: int = DEFAULT_BATCH
) -> list[Chunk]:
    """Every chunk of a fetch, window by window (all batches of a month before the next month)."""
    batches = [tuple(tickers[i : i + batch]) for i in range(0, len(tickers), max(1, batch))]
    return [Chunk(b, lo, hi) for lo, hi in windows(start, end, max_days) for b in batches]


class FetchManifest:
    """The completed (source, interval, ticker, window) rows of ``<home>/data/fetch_manifest.sqlite``."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.path = Path(home) / "data" / MANIFEST_FILE
        self._conn = None

    def _db(self):  # noqa: ANN202 - sqlite3.Connection
        if self._conn is None:
            self._conn = use_wal(connect(self.path, row_factory=None), synchronous="FULL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS done (source TEXT, interval TEXT, ticker TEXT, start TEXT,"
                " stop TEXT, bars INTEGER, finished_at TEXT,"
                " PRIMARY KEY (source, interval, ticker, start, stop))"
            )
        return self._conn

    def completed(self, source: str, interval: str) -> set[tuple[str, str, str]]:
        """``(ticker, start, stop)`` of every recorded window."""
        if not self.path.is_file():
            return set()
        rows = self._db().execute(
            "SELECT ticker, start, stop FROM done WHERE source = ? AND interval = ?", (source, interval)
        )
        return {(t, s, e) for t, s, e in rows}

    def sources(self, interval: str, tickers: Sequence[str]) -> list[str]:
        """The sources (``"alpaca/iex"``, ``"yfinance/raw"``, ...) that fetched any window of ``tickers``
        at ``interval``, sorted (read only; none without a manifest)."""
        if not self.path.is_file() or not tickers:
            return []
        conn = connect(self.path, read_only=True, row_factory=None)
        try:
            marks = ", ".join("?" * len(tickers))
            rows = conn.execute(
                f"SELECT DISTINCT source FROM done WHERE interval = ? AND ticker IN ({marks})",  # noqa: S608
                (interval, *tickers),
            )
            return sorted(str(source) for (source,) in rows)
        finally:
            conn.close()

    def record(self, source: str, interval: str, chunk: Chunk, bars: dict[str, int], *, today: date) -> bool:
        """Record ``chunk`` as complete (one transaction); False (nothing recorded) if it reaches today."""
        if chunk.stop > today:
            return False
        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [
            (source, interval, t, str(chunk.start), str(chunk.stop), int(bars.get(t, 0)), now)
            for t in chunk.tickers
        ]
        with transaction(self._db()) as conn:
            conn.executemany("INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        return True

    def missing(self, chunk: Chunk, done: Iterable[tuple[str, str, str]]) -> tuple[str, ...]:
        """The tickers of ``chunk`` whose window is not recorded in ``done``."""
        done = done if isinstance(done, set) else set(done)
        return tuple(t for t in chunk.tickers if (t, str(chunk.start), str(chunk.stop)) not in done)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
