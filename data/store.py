"""The Parquet bar store: ``<home>/data/bars/interval=<iv>/ticker=<T>/<YYYY-MM>.parquet``.

What is stored: bars already aligned to the XNAS grid (``data.align.align_ticker``): the real bars
plus within-session forward fills, with a ``filled`` column. Columns: ``timestamp`` (UTC bar start,
ns), ``open, high, low, close, volume`` (float64), ``filled`` (bool). The ticker is the folder; the
month is the session month (US/Eastern), so a session never straddles two files.

Guarantees:
- atomic: each file is written to a temp file, fsynced and renamed (``data.atomic``);
- one writer at a time: every read-merge-write runs under the store's writer lock
  (``data.lock.store_lock``, ``<home>/data/store.lock``): two writers that both read a month file
  and rename their own merge over it would drop the first one's bars (a writer planning several
  writes, as a fetch chunk with its manifest row, holds :meth:`BarStore.writing` around them all);
- all or nothing on bad input: ``write`` receives validated bars and computes every new file's bytes
  in memory before it writes the first one, so a validation error anywhere leaves the store
  byte-for-byte unchanged;
- idempotent: a month file is rebuilt from the union of its real bars (new bars win at equal
  timestamps) and re-aligned; if the result equals what is on disk, nothing is written, so
  re-importing the same rows changes no byte.

Paths are built from tickers only through ``ticker_dir``, which applies the ticker rule
(``data.schema.normalize_ticker``): a ticker that breaks it is a DataError, never a path.

``<home>/data/bars/interval=<iv>/_meta.json`` records whether the interval holds regular-hours or
extended-hours bars (mixing them would put two grids in one folder, so it is refused).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from data.actions import ActionStore, adjust_raw
from data.align import Panel, align_panel, align_ticker
from data.artifact import Artifact
from data.atomic import atomic_write_bytes
from data.calendar import check_interval, exchange_dates, session_dates
from data.errors import ArtifactError, DataError
from data.lock import store_lock
from data.schema import normalize_ticker

log = logging.getLogger(__name__)

#: (store root, interval) already told that bars without an actions table are read as stored.
_NOTED_AS_STORED: set[tuple[str, str]] = set()

STORE_COLUMNS = ["timestamp", "open", "high", "low", "close", "volume", "filled"]
_SCHEMA = pa.schema(
    [
        ("timestamp", pa.timestamp("ns", tz="UTC")),
        ("open", pa.float64()),
        ("high", pa.float64()),
        ("low", pa.float64()),
        ("close", pa.float64()),
        ("volume", pa.float64()),
        ("filled", pa.bool_()),
    ]
)


@dataclass
class WriteReport:
    """What a ``write`` did: files written/unchanged, bars per ticker, gaps filled, bars dropped."""

    interval: str
    files_written: list[str] = field(default_factory=list)
    files_unchanged: int = 0
    bars: dict[str, int] = field(default_factory=dict)
    gaps_filled: dict[str, int] = field(default_factory=dict)
    dropped_outside_hours: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "files_written": len(self.files_written),
            "files_unchanged": self.files_unchanged,
            "tickers": sorted(self.bars),
            "bars": self.bars,
            "gaps_filled": self.gaps_filled,
            "dropped_outside_hours": self.dropped_outside_hours,
        }


def _to_bytes(frame: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(frame[STORE_COLUMNS], schema=_SCHEMA, preserve_index=False)
    sink = io.BytesIO()
    # No pandas metadata or statistics that could vary between runs: same rows -> same bytes.
    pq.write_table(table.replace_schema_metadata(None), sink, compression="zstd", write_statistics=False)
    return sink.getvalue()


def _read_file(path: Path) -> pd.DataFrame:
    try:
        frame = pq.read_table(path, schema=_SCHEMA).to_pandas()
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise DataError(
            f"store file {path} is unreadable ({type(err).__name__}); delete it and re-import"
        ) from None
    frame["timestamp"] = frame["timestamp"].astype("datetime64[ns, UTC]")
    return frame


def _check_spelling(bars: pd.DataFrame, source: str) -> None:
    """One-line DataError when a ticker of ``bars`` breaks the ticker rule or is not in its stored
    spelling (two spellings of one ticker would plan the same files twice; the second would win)."""
    for ticker in pd.unique(bars["ticker"]) if "ticker" in bars else ():
        spelled = normalize_ticker(str(ticker), source=source)
        if spelled != ticker:
            raise DataError(
                f"{source}: ticker {ticker} is not in its stored spelling {spelled} (validate the bars first)"
            )


def _session_month(ts: pd.Series) -> np.ndarray:
    """``datetime64[M]`` exchange-time month of each timestamp (no string formatting per row: fast)."""
    return exchange_dates(ts).as_unit("ns").values.astype("datetime64[M]")


class IntervalMeta(Artifact):
    """``interval=<iv>/_meta.json``: what kind of bars the interval holds (written with its first
    bars; a file written before the document base carried no ``schema_version`` and reads as 1)."""

    FILE = "_meta.json"
    SCHEMA_VERSION = 1

    extended_hours: bool = False


class BarStore:
    """The bar store under ``<home>/data/bars``."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home)
        self.root = self.home / "data" / "bars"
        self.actions = ActionStore(self.home)

    # --- layout ------------------------------------------------------------------------------
    def interval_dir(self, interval: str) -> Path:
        return self.root / f"interval={check_interval(interval)}"

    def ticker_dir(self, interval: str, ticker: str) -> Path:
        """``interval=<iv>/ticker=<T>`` for the ticker in its normalized spelling (DataError if it
        breaks the ticker rule: no path is ever built from an unchecked string)."""
        return self.interval_dir(interval) / f"ticker={normalize_ticker(ticker, source='store')}"

    def intervals(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name.split("=", 1)[1] for p in self.root.glob("interval=*") if p.is_dir())

    def tickers(self, interval: str) -> list[str]:
        folder = self.interval_dir(interval)
        if not folder.is_dir():
            return []
        out = []
        for path in folder.glob("ticker=*"):
            name = path.name.split("=", 1)[1]
            if not any(path.glob("*.parquet")):
                continue
            try:
                checked = normalize_ticker(name, source="store")
            except DataError:
                checked = None
            if checked != name:  # a folder a user (or an older podracer) made: never read through it
                log.warning("store: skipping %s (not a valid ticker folder)", path)
                continue
            out.append(name)
        return sorted(out)

    def first_month(self, interval: str) -> str | None:
        """``YYYY-MM-01`` of the earliest stored month file of ``interval`` (None: nothing stored)."""
        stems = [
            f.stem for t in self.tickers(interval) for f in self.ticker_dir(interval, t).glob("*.parquet")
        ]
        return f"{min(stems)}-01" if stems else None

    def _meta(self, interval: str) -> IntervalMeta | None:
        path = self.interval_dir(interval) / IntervalMeta.FILE
        if not path.is_file():
            return None
        try:
            return IntervalMeta.read(path)
        except ArtifactError as err:
            raise DataError(f"store metadata unreadable ({err}); delete it and re-import") from None

    def _extended_hours(self, interval: str) -> bool:
        meta = self._meta(interval)
        return meta is not None and meta.extended_hours

    # --- writing -----------------------------------------------------------------------------
    def plan(
        self, bars: pd.DataFrame, interval: str, *, extended_hours: bool = False, source: str = "input"
    ) -> tuple[list[tuple[Path, bytes]], WriteReport]:
        """Every file a write of validated ``bars`` would produce, as (path, bytes); writes nothing."""
        check_interval(interval)
        meta = self._meta(interval)
        if meta is not None and meta.extended_hours != extended_hours:
            held = "extended-hours" if meta.extended_hours else "regular-hours"
            raise DataError(
                f"the store's interval={interval} holds {held} bars; import with the same --extended-hours setting"
            )
        report = WriteReport(interval=interval)
        planned: list[tuple[Path, bytes]] = []
        _check_spelling(bars, source)
        for ticker, group in bars.groupby("ticker", sort=True):
            aligned = align_ticker(group, interval, extended_hours=extended_hours, source=source)
            report.dropped_outside_hours += aligned.bars_dropped_outside_hours
            if aligned.frame.empty:
                log.warning("%s: %s has no bars inside trading hours; nothing stored", source, ticker)
                continue
            new = aligned.frame
            months = _session_month(new["timestamp"])
            real_count = 0
            gaps = 0
            for month in np.unique(months):
                new_month = new.loc[months == month]
                path = self.ticker_dir(interval, str(ticker)) / f"{month}.parquet"
                merged = self._merge(path, new_month, interval, extended_hours, str(ticker), source)
                payload = _to_bytes(merged)
                real_count += int((~merged["filled"]).sum())
                gaps += int(merged["filled"].sum())
                if path.is_file() and path.read_bytes() == payload:
                    report.files_unchanged += 1
                    continue
                planned.append((path, payload))
            report.bars[str(ticker)] = real_count
            report.gaps_filled[str(ticker)] = gaps
        return planned, report

    def _merge(
        self, path: Path, new: pd.DataFrame, interval: str, extended_hours: bool, ticker: str, source: str
    ) -> pd.DataFrame:
        if not path.is_file():
            return new[STORE_COLUMNS].reset_index(drop=True)
        old = _read_file(path)
        real_old = old.loc[~old["filled"]]
        real_new = new.loc[~new["filled"].to_numpy(dtype=bool)]
        union = pd.concat([real_old.assign(ticker=ticker), real_new], ignore_index=True)
        union = union.drop_duplicates("timestamp", keep="last").sort_values("timestamp", kind="stable")
        realigned = align_ticker(union, interval, extended_hours=extended_hours, source=source).frame
        return realigned[STORE_COLUMNS].reset_index(drop=True)

    def write(
        self, bars: pd.DataFrame, interval: str, *, extended_hours: bool = False, source: str = "input"
    ) -> WriteReport:
        """Align and store validated bars (all files computed first, then written atomically), under
        the store's writer lock."""
        _check_spelling(bars, source)  # before the lock: a bad ticker leaves the home untouched
        with self.writing():
            planned, report = self.plan(bars, interval, extended_hours=extended_hours, source=source)
            self.commit(planned, report, extended_hours=extended_hours)
        return report

    @contextlib.contextmanager
    def writing(self, command: str = "podracer data") -> Iterator[BarStore]:
        """Hold the store's writer lock (``data.lock.store_lock``: re-entrant, waits for another
        writer with a progress line) around a read-merge-write and whatever records it."""
        with store_lock(self.home, command=command):
            yield self

    def commit(
        self, planned: Iterable[tuple[Path, bytes]], report: WriteReport, *, extended_hours: bool
    ) -> None:
        """Write planned files atomically (each one temp file + rename)."""
        planned = list(planned)
        if planned and self._meta(report.interval) is None:
            IntervalMeta(extended_hours=extended_hours).write(
                self.interval_dir(report.interval) / IntervalMeta.FILE
            )
        for path, payload in planned:
            atomic_write_bytes(path, payload)
            report.files_written.append(str(path))

    # --- reading -----------------------------------------------------------------------------
    def read(
        self,
        interval: str,
        tickers: Iterable[str] | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> dict[str, pd.DataFrame]:
        """Stored bars per ticker (session dates in ``[start, end]`` when given)."""
        available = self.tickers(interval)
        if not available:
            raise DataError(
                f"no {interval} bars in the store {self.root} (run `podracer data import` or `fetch`)"
            )
        wanted = [normalize_ticker(t, source="store") for t in tickers] if tickers else available
        missing = [t for t in wanted if t not in available]
        if missing:
            raise DataError(
                f"no {interval} bars stored for {', '.join(missing)} (have {', '.join(available)})"
            )
        out: dict[str, pd.DataFrame] = {}
        for ticker in wanted:
            files = sorted(self.ticker_dir(interval, ticker).glob("*.parquet"))
            frames = [_read_file(f) for f in files if _month_in_range(f.stem, start, end)]
            if not frames:
                continue
            frame = self._adjusted(interval, ticker, pd.concat(frames, ignore_index=True))
            dates = exchange_dates(frame["timestamp"])
            keep = np.ones(len(frame), dtype=bool)
            if start is not None:
                keep &= dates >= pd.Timestamp(start)
            if end is not None:
                keep &= dates <= pd.Timestamp(end)
            frame = frame.loc[keep].reset_index(drop=True)
            if not frame.empty:
                frame.insert(1, "ticker", ticker)
                out[ticker] = frame
        if not out:
            raise DataError(f"no stored {interval} bars between {start} and {end}")
        return out

    def _adjusted(self, interval: str, ticker: str, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` back-adjusted with the ticker's corporate actions when its bars are stored raw
        (``data.actions``); as stored when it has no actions table (an older store's adjusted bars,
        or imported bars), with a one-time note."""
        actions = self.actions.read(interval, ticker)
        if actions is None:
            if (str(self.root), interval) not in _NOTED_AS_STORED:
                _NOTED_AS_STORED.add((str(self.root), interval))
                log.info(
                    "store %s interval=%s: tickers without a corporate-actions table are read as stored "
                    "(bars imported, or fetched adjusted by an older podracer)",
                    self.root,
                    interval,
                )
            return frame
        real = frame.loc[~frame["filled"].to_numpy(dtype=bool)]
        days = session_dates(real["timestamp"])

        def close_before(ex_date: pd.Timestamp) -> float | None:
            ex = ex_date.as_unit("ns").to_datetime64()
            if len(days) and days[-1] >= ex:
                # ``frame`` is whole contiguous month files reaching past the ex-date: the last real
                # close before it is in memory (none there: no bar before it to adjust).
                before = np.flatnonzero(days < ex)
                return float(real["close"].iloc[before[-1]]) if len(before) else None
            return self.close_before(interval, ticker, ex_date)

        return adjust_raw(frame, actions, close_before)

    def close_before(self, interval: str, ticker: str, ex_date: pd.Timestamp) -> float | None:
        """Last real raw close of ``ticker`` on a session before ``ex_date`` (the ex-date's month
        file and the one before it; None when neither holds one)."""
        month = ex_date.to_period("M")
        folder = self.ticker_dir(interval, ticker)
        for stem in (str(month), str(month - 1)):
            path = folder / f"{stem}.parquet"
            if not path.is_file():
                continue
            frame = _read_file(path)
            real = frame.loc[~frame["filled"].to_numpy(dtype=bool)]
            before = real.loc[session_dates(real["timestamp"]) < ex_date.as_unit("ns").to_datetime64()]
            if len(before):
                return float(before["close"].iloc[-1])
        return None

    def load_panel(
        self,
        interval: str = "1m",
        tickers: Iterable[str] | None = None,
        start: str | None = None,
        end: str | None = None,
        min_coverage: float = 0.5,
        coverage_frac: float = 1.0,
        carry_leading: bool = False,
    ) -> Panel:
        """Stored bars as one dense panel (see ``data.align.align_panel`` for the fill policy;
        ``coverage_frac``: the leading fraction of sessions ``min_coverage`` is judged on)."""
        frames = self.read(interval, tickers, start, end)
        extended = self._extended_hours(interval)
        return align_panel(
            frames,
            interval,
            min_coverage=min_coverage,
            extended_hours=extended,
            coverage_frac=coverage_frac,
            carry_leading=carry_leading,
        )

    def info(self) -> dict[str, Any]:
        """Summary of the store: per interval and ticker, rows, sessions, date range, gaps filled."""
        result: dict[str, Any] = {"root": str(self.root), "intervals": {}}
        for interval in self.intervals():
            per_ticker: dict[str, Any] = {}
            all_dates: set[str] = set()
            for ticker in self.tickers(interval):
                files = sorted(self.ticker_dir(interval, ticker).glob("*.parquet"))
                frame = pd.concat([_read_file(f)[["timestamp", "filled"]] for f in files], ignore_index=True)
                unique_dates = _distinct_dates(frame["timestamp"])
                all_dates.update(unique_dates)
                filled = int(frame["filled"].sum())
                per_ticker[ticker] = {
                    "rows": len(frame),
                    "bars": len(frame) - filled,
                    "gaps_filled": filled,
                    "sessions": len(unique_dates),
                    "start": unique_dates[0],
                    "end": unique_dates[-1],
                }
            if not per_ticker:
                continue
            dates_sorted = sorted(all_dates)
            result["intervals"][interval] = {
                "tickers": sorted(per_ticker),
                "sessions": len(dates_sorted),
                "start": dates_sorted[0],
                "end": dates_sorted[-1],
                "rows": sum(v["rows"] for v in per_ticker.values()),
                "gaps_filled": sum(v["gaps_filled"] for v in per_ticker.values()),
                "extended_hours": self._extended_hours(interval),
                "by_ticker": per_ticker,
            }
        return result


def _distinct_dates(timestamps: pd.Series) -> list[str]:
    """Sorted distinct exchange-time dates of ``timestamps`` (formats only the distinct days: fast)."""
    days = np.unique(exchange_dates(timestamps).as_unit("ns").values.astype("datetime64[D]"))
    return [str(d) for d in days]


def _month_in_range(month: str, start: str | None, end: str | None) -> bool:
    if start is not None and month < str(pd.Timestamp(start).strftime("%Y-%m")):
        return False
    return not (end is not None and month > str(pd.Timestamp(end).strftime("%Y-%m")))
