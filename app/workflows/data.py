"""``podracer data fetch`` / ``data universe`` / ``data info``: resolve the tickers, stream the fetch,
show progress, summarize the store."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from app import context
from app.config import load_config
from data.errors import DataError
from data.sources.chunks import DEFAULT_BATCH, Chunk
from data.sources.retry import FetchRetryPolicy
from data.sources.stream import FetchReport, fetch_to_store
from data.store import BarStore
from data.universe import check_universe, members, resolve_tickers


class FetchProgress:
    """A rich progress bar over chunks: bars/s received and the ETA (off with --json / --quiet, or when
    stderr is not a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and context.err_console.is_terminal
        self.progress: Any = None
        self.started = time.monotonic()

    def __enter__(self) -> FetchProgress:
        if self.enabled:
            self.progress = Progress(
                TextColumn("[bold]fetch"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    "chunks · {task.fields[bars]} bars · {task.fields[rate]} bars/s · {task.fields[chunk]}"
                ),
                TimeRemainingColumn(),
                console=context.err_console,
            )
            self.progress.start()
        return self

    def on_plan(self, report: FetchReport) -> None:
        if self.progress is not None:
            self.task = self.progress.add_task(
                "fetch", total=report.chunks_total, bars="0", rate="-", chunk=""
            )

    def on_chunk(self, report: FetchReport, chunk: Chunk, bars: int) -> None:
        if self.progress is None:
            return
        elapsed = max(time.monotonic() - self.started, 1e-9)
        self.progress.update(
            self.task,
            completed=report.chunks_fetched + report.chunks_skipped,
            bars=f"{report.bars_fetched:,}",
            rate=f"{report.bars_fetched / elapsed:,.0f}",
            chunk=chunk.label,
        )

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


def fetch_tickers(universe: str, as_of: str | None, start: str, tickers: Sequence[str]) -> list[str]:
    """The tickers a fetch asks for: the universe's members on ``as_of`` (default: ``start``, the
    survivorship-free choice) then ``tickers`` (each item may be comma-separated); none is an error."""
    universe = check_universe(universe)
    names = [t.strip() for item in tickers for t in item.split(",") if t.strip()]
    symbols = resolve_tickers(universe, (as_of or start) if universe else None, names)
    if not symbols:
        raise DataError("data fetch: give --tickers and/or --universe nasdaq100")
    return symbols


def fetch(
    home: Path,
    *,
    source: str,
    tickers: Sequence[str],
    start: str,
    end: str,
    interval: str,
    extended_hours: bool,
    progress: bool,
    batch: int = DEFAULT_BATCH,
    max_wait_s: float = 120.0,
) -> FetchReport:
    """Stream ``tickers`` into the store under ``home`` with a progress bar when ``progress``."""
    if source not in ("yfinance", "alpaca"):
        raise DataError(f"unknown source {source!r} (yfinance or alpaca)")
    with FetchProgress(progress) as bar:
        return fetch_to_store(
            home,
            source,
            tickers,
            start,
            end,
            interval,
            extended_hours=extended_hours,
            batch=batch,
            policy=FetchRetryPolicy(max_wait_s=max_wait_s),
            on_plan=bar.on_plan,
            on_chunk=bar.on_chunk,
        )


def store_summary(home: Path, config: Path | None, universe: str | None, as_of: str | None) -> dict[str, Any]:
    """The store's summary; with a universe (``universe``, else the config's ``data.universe``), which
    of its members on ``as_of`` (else the config's ``data.as_of``) the store holds."""
    cfg = load_config(config).data if config is not None or universe is None else None
    name = universe if universe is not None else (cfg.universe if cfg is not None else "")
    date_ = as_of or (cfg.as_of if cfg is not None else "")
    summary = BarStore(home).info()
    if check_universe(name):
        summary["universe"] = universe_coverage(home, summary, name, date_)
    return summary


def universe_coverage(home: Path, summary: dict[str, Any], universe: str, as_of: str) -> dict[str, Any]:
    """Per stored interval: the universe's members on ``as_of`` (default: the interval's first stored
    month) and which of them the store holds."""
    out: dict[str, Any] = {}
    store = BarStore(home)
    for interval, part in summary["intervals"].items():
        day = as_of or store.first_month(interval)
        names = members(day)
        stored = set(part["tickers"])
        out[interval] = {
            "universe": universe,
            "as_of": str(day),
            "members": names,
            "stored": [t for t in names if t in stored],
            "missing": [t for t in names if t not in stored],
        }
    return out
