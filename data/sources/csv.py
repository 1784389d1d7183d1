"""CSV bars in the bar schema, and the ``podracer data import`` pipeline.

A file holds ``timestamp,ticker,open,high,low,close,volume`` (ISO 8601 timestamps with an offset or
``Z``; bar start) or, for daily bars, ``date,ticker,...``. ``.csv.gz`` works too. The interval is
inferred from the most common spacing of consecutive bars of a ticker, or given.

``import_files`` reads and validates EVERY file, optionally applies split/dividend factors, aligns
and plans every store file before writing any: a bad row in the last file leaves the store
byte-for-byte unchanged.

Adjustment basis. A CSV's adjustment is unknown, so imported bars are read as stored (no actions
table, ``data.actions``). Beside bars a fetch stored *raw* with corporate actions they would mix two
bases, so that is refused unless ``raw=True`` (the user says the file holds raw bars: they join the
raw history and are adjusted on load; a ticker new to the store gets an empty actions table, which
marks it raw, so a later fetch's actions adjust it). ``raw=True`` is refused beside bars stored
without actions (imported or fetched adjusted by an older podracer), and with ``adjust``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from data.actions import empty_actions
from data.adjust import adjust_bars, read_factor_file
from data.calendar import INTERVAL_MINUTES, check_interval
from data.errors import DataError, one_line
from data.schema import validate
from data.store import BarStore, WriteReport

_NS_PER_MIN = 60 * 1_000_000_000


def read_csv(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read and validate one CSV file of bars (one-line DataError naming the file on any problem)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        # Everything as text: the schema parses numbers and times itself so it can name bad rows.
        raw = pd.read_csv(path, dtype=str, keep_default_na=True, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: no bars (empty input)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError, ValueError) as err:
        raise DataError(f"{path}: not a readable CSV file ({one_line(err, typed=False)})") from None
    return validate(raw, source=str(path))


def infer_interval(bars: pd.DataFrame, *, source: str = "input") -> str:
    """The most common spacing between consecutive bars of the same ticker, as an interval name."""
    ns = bars["timestamp"].astype("int64").to_numpy()
    same = bars["ticker"].to_numpy()
    order = np.lexsort((ns, same))
    ns, same = ns[order], same[order]
    diffs = np.diff(ns)[same[1:] == same[:-1]] // _NS_PER_MIN
    diffs = diffs[diffs > 0]
    if len(diffs) == 0:
        raise DataError(
            f"{source}: cannot infer the bar interval (fewer than 2 bars per ticker); pass --interval"
        )
    values, counts = np.unique(diffs, return_counts=True)
    step = int(values[np.argmax(counts)])
    if step >= 20 * 60:  # daily bars; weekends and holidays make longer gaps
        return "1d"
    for name, minutes in INTERVAL_MINUTES.items():
        if minutes == step:
            return name
    raise DataError(f"{source}: bars are {step} minutes apart, not a supported interval; pass --interval")


def import_files(
    paths: Sequence[str | os.PathLike[str]],
    home: str | os.PathLike[str],
    *,
    interval: str | None = None,
    adjust: str | os.PathLike[str] | None = None,
    extended_hours: bool = False,
    raw: bool = False,
) -> WriteReport:
    """Validate, (adjust,) align and store bars from CSV files; all-or-nothing on bad input.
    ``raw``: the files hold raw (unadjusted) bars (see the module docstring)."""
    if not paths:
        raise DataError("no files to import")
    if raw and adjust is not None:
        raise DataError("--raw and --adjust contradict each other (adjusted bars are not raw); give one")
    if interval is not None:
        check_interval(interval)
    frames: list[pd.DataFrame] = []
    target = interval
    for path in paths:
        bars = read_csv(path)
        has_date = "date" in pd.read_csv(path, nrows=0).columns.str.lower()
        source_interval = "1d" if has_date else infer_interval(bars, source=str(path))
        if target is None:
            target = source_interval
        elif interval is None and source_interval != target:
            raise DataError(
                f"{path}: {source_interval} bars but earlier files are {target}; import them separately or pass --interval"
            )
        coarser = (
            INTERVAL_MINUTES[source_interval] == 0
            or INTERVAL_MINUTES[source_interval] > INTERVAL_MINUTES[target]
        )
        if INTERVAL_MINUTES[target] != 0 and coarser:
            raise DataError(f"{path}: {source_interval} bars cannot be split into {target} bars")
        frames.append(bars)
    bars = pd.concat(frames, ignore_index=True)
    # The same bar in two files: the later file wins (a re-export with corrections).
    bars = bars.drop_duplicates(["ticker", "timestamp"], keep="last")
    bars = bars.sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
    if adjust is not None:
        bars = adjust_bars(bars, read_factor_file(adjust))
    store = BarStore(home)
    label = str(paths[0]) if len(paths) == 1 else f"{len(paths)} files"
    assert target is not None
    names = [str(t) for t in pd.unique(bars["ticker"])]
    with store.writing("podracer data import"):
        _check_basis(store, target, names, raw, label)
        planned, report = store.plan(bars, target, extended_hours=extended_hours, source=label)
        if raw:  # before the bars, as a fetch does: a kill in between leaves raw bars marked raw
            for name in names:
                store.actions.merge(target, name, empty_actions(), source=label)
        store.commit(planned, report, extended_hours=extended_hours)
    return report


def _check_basis(store: BarStore, interval: str, names: list[str], raw: bool, label: str) -> None:
    """One-line error when the imported bars would sit beside bars on another basis."""
    held = set(store.tickers(interval))
    marked = {t for t in names if store.actions.read(interval, t) is not None}
    clash = sorted((set(names) - marked) & held) if raw else sorted(marked)
    if not clash:
        return
    listed = f"{', '.join(clash[:5])}{' ...' if len(clash) > 5 else ''}"
    if raw:
        raise DataError(
            f"{label}: the store's interval={interval} holds {listed} without corporate actions (imported, "
            "or fetched adjusted by an older podracer): raw bars beside them would mix two price bases; "
            f"move {store.interval_dir(interval)}/ticker=<T> aside first, or import into another --home"
        )
    raise DataError(
        f"{label}: the store's interval={interval} holds raw bars with corporate actions for {listed} "
        "(fetched); bars of unknown adjustment beside them would mix two price bases: pass --raw if the "
        "file holds raw (unadjusted) bars, or import into another --home"
    )
