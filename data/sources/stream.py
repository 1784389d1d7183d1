"""Streaming, resumable fetch into the bar store: chunk by chunk, each written as it arrives.

``fetch_to_store`` plans the chunks (``data.sources.chunks``), skips the (ticker, window) pairs the
manifest records as complete, and for each remaining chunk: requests it (bounded retries:
``data.sources.retry``), validates, aligns and writes its store files (atomic per file), then records
it in the manifest. Memory holds one chunk (a batch of tickers x at most one month), whatever the
date range. A failure after the retries stops the fetch with a one-line error naming the chunk to
resume from; completed chunks stay stored and recorded, so the same command resumes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import pandas as pd

from data.actions import empty_actions
from data.errors import DataError
from data.schema import normalize_ticker
from data.sources import alpaca, yfinance
from data.sources.chunks import DEFAULT_BATCH, Chunk, FetchManifest, plan_chunks
from data.sources.retry import FetchFailed, FetchRetryPolicy
from data.store import BarStore

SOURCES = ("alpaca", "yfinance")


@dataclass
class FetchReport:
    """What a streaming fetch did (``--json``'s body). ``bars``: bars received per ticker in this
    run; ``gaps_filled``: forward-filled minutes in the month files this run wrote."""

    source: str
    interval: str
    chunks_total: int = 0
    chunks_fetched: int = 0
    chunks_skipped: int = 0
    chunks_failed: int = 0
    requests_throttled: int = 0
    waited_s: float = 0.0
    bars_fetched: int = 0
    files_written: int = 0
    files_unchanged: int = 0
    bars: dict[str, int] = field(default_factory=dict)
    gaps_filled: dict[str, int] = field(default_factory=dict)
    dropped_outside_hours: int = 0
    failed_chunk: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "interval": self.interval,
            "chunks": {
                "total": self.chunks_total,
                "fetched": self.chunks_fetched,
                "skipped": self.chunks_skipped,
                "failed": self.chunks_failed,
            },
            "requests_throttled": self.requests_throttled,
            "waited_s": round(self.waited_s, 3),
            "bars_fetched": self.bars_fetched,
            "files_written": self.files_written,
            "files_unchanged": self.files_unchanged,
            "tickers": sorted(self.bars),
            "bars": dict(sorted(self.bars.items())),
            "gaps_filled": dict(sorted(self.gaps_filled.items())),
            "dropped_outside_hours": self.dropped_outside_hours,
            "failed_chunk": self.failed_chunk,
        }


ChunkFetcher = Callable[[Sequence[str], date, date], pd.DataFrame]
ActionsFetcher = Callable[[Sequence[str], date, date], dict[str, pd.DataFrame]]


def _source_fetcher(
    source: str, interval: str, start: str, end: str, policy: FetchRetryPolicy, client: Any, today: date
):
    """(first, last, max days per request, chunk fetcher, manifest key, actions fetcher or None) of
    ``source``; checks its range limits."""
    if source == "alpaca":
        first, last = alpaca.parse_date_range(start, end, "alpaca")
        alpaca._timeframe(interval)  # refuse a bad interval before any request
        feed = alpaca._feed()
        cli = alpaca.quiet_client(client if client is not None else alpaca.make_client(policy.timeout_s))

        def fetch(symbols: Sequence[str], lo: date, hi: date) -> pd.DataFrame:
            return alpaca.fetch_chunk(cli, symbols, lo, hi, interval, policy=policy, feed=feed)

        def actions(symbols: Sequence[str], lo: date, hi: date) -> dict[str, pd.DataFrame]:
            return alpaca.fetch_actions(cli, symbols, lo, hi, policy=policy)

        return first, last, alpaca.CHUNK_DAYS, fetch, f"alpaca/{feed.value}", actions
    if source == "yfinance":
        first, last = yfinance.check_range(start, end, interval, today=pd.Timestamp(today))

        known: dict[str, pd.DataFrame] = {}  # Yahoo's full action history per ticker, asked once a run

        def fetch(symbols: Sequence[str], lo: date, hi: date) -> pd.DataFrame:
            bars = policy.call(lambda: yfinance.fetch_chunk(symbols, lo, hi, interval), "yfinance")
            # Actions only for tickers with bars: one Yahoo has nothing for costs no request (nor error).
            for name in pd.unique(bars["ticker"]) if len(bars) else ():
                if name not in known:
                    known[name] = policy.call(lambda n=name: yfinance.fetch_actions(n), "yfinance")
            return yfinance.unsplit(bars, known)

        def actions(symbols: Sequence[str], lo: date, hi: date) -> dict[str, pd.DataFrame]:
            return {name: known[name] for name in symbols if name in known}

        # "/raw": chunks an older podracer recorded (bars adjusted at fetch) do not count as fetched.
        return first, last, yfinance.LIMITS[interval][1], fetch, "yfinance/raw", actions
    raise DataError(f"unknown source {source!r} (yfinance or alpaca)")


def _symbols_to_fetch(source: str, tickers: Sequence[str]) -> list[str]:
    """The tickers under the source's ticker rule, deduplicated (BRK/B = BRK.B), checked before any
    request, file or manifest is made."""
    if source not in SOURCES:
        raise DataError(f"unknown source {source!r} (yfinance or alpaca)")
    symbols = list(dict.fromkeys(normalize_ticker(t, source=source) for t in tickers))
    if not symbols:
        raise DataError("no tickers to fetch (give --tickers or --universe)")
    return symbols


def _fetch_chunk(
    fetch: ChunkFetcher,
    fetch_actions: ActionsFetcher | None,
    chunk: Chunk,
    wanted: Sequence[str],
    report: FetchReport,
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame] | None]:
    """The bars (and corporate actions, with an actions fetcher) of the ``wanted`` tickers over one
    chunk; a failed request is counted in ``report`` and re-raised saying how to resume."""
    try:
        bars = fetch(wanted, chunk.start, chunk.stop)
    except FetchFailed as err:
        report.chunks_failed += 1
        report.failed_chunk = chunk.label
        raise FetchFailed(
            f"{err}; stopped at chunk {chunk.label} ({report.chunks_fetched + report.chunks_skipped}"
            f" of {report.chunks_total} chunks stored): rerun the same command to resume from it"
        ) from None
    if fetch_actions is None:
        return bars, None
    try:
        return bars, fetch_actions(wanted, chunk.start, chunk.stop)
    except FetchFailed as err:
        report.chunks_failed += 1
        report.failed_chunk = chunk.label
        raise FetchFailed(
            f"{err}; stopped at chunk {chunk.label} (corporate actions): rerun the same "
            "command to resume from it"
        ) from None


def _note_waits(report: FetchReport, policy: FetchRetryPolicy) -> None:
    """Copy the retry policy's throttling counts into the report."""
    report.requests_throttled = policy.throttled
    report.waited_s = policy.waited_s


def fetch_to_store(
    home: str | os.PathLike[str],
    source: str,
    tickers: Sequence[str],
    start: str,
    end: str,
    interval: str = "1m",
    *,
    extended_hours: bool = False,
    batch: int = DEFAULT_BATCH,
    policy: FetchRetryPolicy | None = None,
    client: Any = None,
    fetcher: ChunkFetcher | None = None,
    actions_fetcher: ActionsFetcher | None = None,
    on_chunk: Callable[[FetchReport, Chunk, int], None] | None = None,
    on_plan: Callable[[FetchReport], None] | None = None,
    today: date | None = None,
    writer: str = "podracer data fetch",
) -> FetchReport:
    """Fetch ``tickers`` for session dates ``start..end`` into the store under ``home``, chunk by
    chunk (resumable; see the module docstring). ``on_plan(report)`` runs once the chunks are planned,
    ``on_chunk(report, chunk, bars)`` after each chunk (progress display). ``fetcher`` replaces the
    source's chunk fetcher (tests) and ``actions_fetcher`` its corporate-actions fetcher (with an
    injected ``fetcher``, none unless given).

    With an actions fetcher (Alpaca, yfinance), bars are stored raw and each chunk's splits and
    dividends are merged into the ticker's actions table *before* its bars are written
    (``data.actions``; the store adjusts on load). A ticker whose bars in this interval were stored without an actions table
    (fetched adjusted by an older podracer, or imported) is refused before any request: raw bars
    beside adjusted ones would mix two bases.

    Each chunk's actions merge, month-file writes and manifest row run under the store's writer
    lock (``BarStore.writing``; ``writer`` names this fetch to a writer that waits for it)."""
    symbols = _symbols_to_fetch(source, tickers)
    policy = policy or FetchRetryPolicy()
    today = today or datetime.now(UTC).date()
    # The manifest's source key names the feed too: IEX bars recorded do not count as SIP bars fetched.
    first, last, max_days, source_fetch, key, source_actions = _source_fetcher(
        source, interval, start, end, policy, client, today
    )
    fetch = fetcher or source_fetch
    fetch_actions = (
        actions_fetcher if (actions_fetcher is not None or fetcher is not None) else source_actions
    )
    store = BarStore(home)
    _refuse_mixed_bases(store, interval, symbols, source, raw=fetch_actions is not None)
    chunks = plan_chunks(symbols, first, last, max_days=max_days, batch=batch)
    report = FetchReport(source=source, interval=interval, chunks_total=len(chunks))
    manifest = FetchManifest(home)
    gaps: dict[tuple[str, str], int] = {}
    try:
        done = manifest.completed(key, interval)
        if on_plan is not None:
            on_plan(report)
        for chunk in chunks:
            wanted = manifest.missing(chunk, done)
            if not wanted:
                report.chunks_skipped += 1
                if on_chunk is not None:
                    on_chunk(report, chunk, 0)
                continue
            bars, found = _fetch_chunk(fetch, fetch_actions, chunk, wanted, report)
            # One writer at a time from the actions merge to the manifest row (data.lock.store_lock):
            # the manifest records the chunk only once its bars are renamed into their month files.
            with store.writing(writer):
                _store_chunk(
                    store, report, gaps, chunk, wanted, bars, found, interval, extended_hours, source
                )
                manifest.record(
                    key, interval, Chunk(wanted, chunk.start, chunk.stop), per_ticker(bars), today=today
                )
            report.chunks_fetched += 1
            report.bars_fetched += len(bars)
            _note_waits(report, policy)
            if on_chunk is not None:
                on_chunk(report, chunk, len(bars))
    finally:
        _note_waits(report, policy)
        manifest.close()
    return report


def _refuse_mixed_bases(
    store: BarStore, interval: str, symbols: Sequence[str], source: str, *, raw: bool
) -> None:
    """Refuse bars of one basis (``raw``: stored with an actions table, else adjusted at fetch) where
    the store holds the other for these tickers."""
    if raw:
        _refuse_adjusted(store, interval, symbols)
    else:
        _refuse_raw(store, interval, symbols, source)


def _refuse_adjusted(store: BarStore, interval: str, symbols: Sequence[str]) -> None:
    """One-line error when a ticker already has bars in ``interval`` but no actions table."""
    held = set(store.tickers(interval))
    legacy = [t for t in symbols if t in held and store.actions.read(interval, t) is None]
    if legacy:
        folder = store.ticker_dir(interval, legacy[0])
        where = folder if len(legacy) == 1 else f"their ticker=<T> folders in {folder.parent}"
        raise DataError(
            f"the store's interval={interval} holds {', '.join(legacy[:5])}{' ...' if len(legacy) > 5 else ''}"
            " without corporate actions (fetched adjusted by an older podracer, or imported); raw bars "
            f"beside them would mix two price bases: move {where} aside (re-import a file of raw bars with "
            "`podracer data import --raw`) and fetch again"
        )


def _refuse_raw(store: BarStore, interval: str, symbols: Sequence[str], source: str) -> None:
    """One-line error when a fetcher without corporate actions (an injected one: bars of unknown
    adjustment) would write beside raw bars that the store adjusts on load (adjusted twice)."""
    raw = [t for t in symbols if store.actions.read(interval, t) is not None]
    if raw:
        raise DataError(
            f"{source}: the store's interval={interval} holds raw bars with corporate actions for "
            f"{', '.join(raw[:5])}{' ...' if len(raw) > 5 else ''}; fetch them with their corporate "
            "actions, or into another --home"
        )


def per_ticker(bars: pd.DataFrame) -> dict[str, int]:
    """Bars received per ticker in one chunk."""
    if not len(bars):
        return {}
    return {str(k): int(v) for k, v in bars.groupby("ticker").size().items()}


def _store_chunk(
    store: BarStore,
    report: FetchReport,
    gaps: dict[tuple[str, str], int],
    chunk: Chunk,
    wanted: Sequence[str],
    bars: pd.DataFrame,
    found: dict[str, pd.DataFrame] | None,
    interval: str,
    extended_hours: bool,
    source: str,
) -> None:
    """Merge one chunk's actions (before its bars: a kill in between leaves raw bars marked raw) and
    write its bars, adding to ``report``; the caller holds the store's writer lock."""
    if found is not None:
        for name in wanted:
            store.actions.merge(interval, name, found.get(name, empty_actions()), source=source)
    if not len(bars):
        return
    written = store.write(bars, interval, extended_hours=extended_hours, source=source)
    report.files_written += len(written.files_written)
    report.files_unchanged += written.files_unchanged
    report.dropped_outside_hours += written.dropped_outside_hours
    for name, count in per_ticker(bars).items():
        report.bars[name] = report.bars.get(name, 0) + count
    for name in written.bars:
        # The month file's gap count after this chunk (a later chunk of the month replaces it).
        gaps[(name, chunk.start.strftime("%Y-%m"))] = written.gaps_filled[name]
        report.gaps_filled[name] = sum(v for (t, _), v in gaps.items() if t == name)
