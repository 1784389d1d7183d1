"""Corporate actions (splits, cash dividends) stored beside raw bars, and adjustment on load.

Why: bars fetched *adjusted* on different days are adjusted on different bases (a split between two
nightly updates would sit inside the stored history as a fake -75% bar). So a fetch that records
actions stores raw bars plus the actions, and ``BarStore.read`` back-adjusts on every load: the
whole history comes out on one basis (the latest known actions) whatever day each chunk arrived.

Table: ``<home>/data/actions/interval=<iv>/ticker=<T>.parquet`` with columns ``ex_date``
(datetime64, session date), ``kind`` (``split`` | ``dividend``), ``ratio`` (split: new shares per
old share; 1.0 for a dividend), ``cash`` (dividend per share; 0.0 for a split). Written atomically;
a new fetch merges into it (same (ex_date, kind) replaced). Its *presence* means the ticker's bars in
that interval are raw (even with zero rows: no action known yet); no table means bars stored by an
older podracer (already adjusted) or imported: they are read as stored.

Back-adjustment, for every bar whose session date is before an action's ex-date:
- split of ratio r: prices / r, volume * r (shares; notional unchanged);
- cash dividend d: prices * (1 - d / c), c = the last real close before the ex-date (the CRSP /
  Alpaca convention), volume unchanged.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from data.atomic import atomic_write_bytes
from data.calendar import check_interval, session_dates
from data.errors import DataError
from data.schema import normalize_ticker

ACTION_COLUMNS = ["ex_date", "kind", "ratio", "cash"]
KINDS = ("split", "dividend")
_SCHEMA = pa.schema(
    [("ex_date", pa.timestamp("ns")), ("kind", pa.string()), ("ratio", pa.float64()), ("cash", pa.float64())]
)


def empty_actions() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ex_date": pd.Series([], dtype="datetime64[ns]"),
            "kind": pd.Series([], dtype=object),
            "ratio": pd.Series([], dtype=float),
            "cash": pd.Series([], dtype=float),
        }
    )


def check_actions(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Checked copy of an actions frame (one-line DataError naming the row and the rule)."""
    missing = [c for c in ACTION_COLUMNS if c not in frame]
    if missing:
        raise DataError(f"{source}: corporate actions lack column(s) {', '.join(missing)}")
    out = pd.DataFrame(
        {
            "ex_date": pd.to_datetime(frame["ex_date"], errors="coerce").dt.normalize(),
            "kind": frame["kind"].astype(str),
            "ratio": pd.to_numeric(frame["ratio"], errors="coerce").astype(float),
            "cash": pd.to_numeric(frame["cash"], errors="coerce").astype(float),
        }
    )
    if getattr(out["ex_date"].dt, "tz", None) is not None:
        out["ex_date"] = out["ex_date"].dt.tz_localize(None)
    bad = out["ex_date"].isna() | ~out["kind"].isin(KINDS)
    bad |= ~np.isfinite(out["ratio"]) | (out["ratio"] <= 0) | ~np.isfinite(out["cash"]) | (out["cash"] < 0)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(f"{source}: corporate action row {row + 1}: bad ex_date, kind, ratio or cash")
    return out.sort_values(["ex_date", "kind"], kind="stable").reset_index(drop=True)


class ActionStore:
    """The corporate-actions tables under ``<home>/data/actions``."""

    def __init__(self, home: str | Path) -> None:
        self.root = Path(home) / "data" / "actions"

    def path(self, interval: str, ticker: str) -> Path:
        name = normalize_ticker(ticker, source="store")  # never a path from an unchecked string
        return self.root / f"interval={check_interval(interval)}" / f"ticker={name}.parquet"

    def read(self, interval: str, ticker: str) -> pd.DataFrame | None:
        """The ticker's actions, or None when it has no table (bars read as stored)."""
        path = self.path(interval, ticker)
        if not path.is_file():
            return None
        try:
            frame = pq.read_table(path, schema=_SCHEMA).to_pandas()
        except Exception as err:  # pyarrow raises several types for corrupt files
            raise DataError(f"actions file {path} is unreadable ({type(err).__name__}); refetch") from None
        return frame[ACTION_COLUMNS]

    def merge(self, interval: str, ticker: str, new: pd.DataFrame, source: str = "actions") -> bool:
        """Union of the stored and ``new`` actions (new wins on the same ex-date and kind), written
        atomically; an empty ``new`` still creates the table (marks the bars raw). True if written."""
        new = check_actions(new, source)
        old = self.read(interval, ticker)
        union = new if old is None else pd.concat([old, new], ignore_index=True)
        union = union.drop_duplicates(["ex_date", "kind"], keep="last")
        union = union.sort_values(["ex_date", "kind"], kind="stable").reset_index(drop=True)
        table = pa.Table.from_pandas(union[ACTION_COLUMNS], schema=_SCHEMA, preserve_index=False)
        sink = io.BytesIO()
        pq.write_table(table.replace_schema_metadata(None), sink, write_statistics=False)
        path = self.path(interval, ticker)
        if old is not None and path.read_bytes() == sink.getvalue():
            return False
        atomic_write_bytes(path, sink.getvalue())
        return True


def adjust_raw(
    frame: pd.DataFrame, actions: pd.DataFrame, close_before: Callable[[pd.Timestamp], float | None]
) -> pd.DataFrame:
    """Back-adjusted copy of one ticker's raw stored bars (see the module docstring).
    ``close_before(ex_date)``: the last real raw close before an ex-date (None if no bar)."""
    if frame.empty or actions.empty:
        return frame
    days = session_dates(frame["timestamp"])
    price = np.ones(len(frame))
    shares = np.ones(len(frame))
    for ex_date, kind, ratio, cash in actions[ACTION_COLUMNS].itertuples(index=False):
        before = days < np.datetime64(pd.Timestamp(ex_date).as_unit("ns").to_datetime64())
        if not before.any():
            continue
        if kind == "split":
            price[before] /= ratio
            shares[before] *= ratio
        else:
            close = close_before(pd.Timestamp(ex_date))
            if close is None or not close > cash:
                continue  # no real bar before the ex-date (or a dividend above the price): nothing to scale
            price[before] *= 1.0 - cash / close
    out = frame.copy()
    for col in ("open", "high", "low", "close"):
        out[col] = out[col].to_numpy() * price
    out["volume"] = out["volume"].to_numpy() * shares
    return out
