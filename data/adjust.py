"""Split and dividend adjustment with Lean factor files.

A factor file has rows ``date,ticker,price_factor,split_factor[,reference_price]``. For a bar whose
session date is ``d``, take the ticker's first row (in date order) whose date is on or after ``d``:

    adjusted price = raw price * price_factor * split_factor
    adjusted volume = raw volume / split_factor   (shares, so notional is unchanged by a split)

Bars after a ticker's last row are left as they are (no later event is known). Tickers without
rows are left raw, with a warning. Checked against AAPL's 7:1 split of 2014-06-09 in the tests.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from data.calendar import session_dates
from data.errors import DataError
from data.schema import normalize_ticker

log = logging.getLogger(__name__)

FACTOR_COLUMNS = ("date", "ticker", "price_factor", "split_factor")


def read_factor_file(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read and check a Lean factor CSV; one-line DataError naming file, row and rule."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: factor file not found")
    try:
        table = pd.read_csv(path, dtype=str)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not a readable factor CSV ({type(err).__name__})") from None
    table.columns = [c.strip().lower() for c in table.columns]
    missing = [c for c in FACTOR_COLUMNS if c not in table]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)} (need {','.join(FACTOR_COLUMNS)})")
    # The bars' ticker rule, so that a factor row for BRK/B applies to the bars stored as BRK.B.
    spelled: dict[str, str] = {}
    for row, name in enumerate(table["ticker"].fillna("").astype(str)):
        if name not in spelled:
            spelled[name] = normalize_ticker(name, source=f"{path}: row {row + 1}")
    out = pd.DataFrame({"ticker": [spelled[name] for name in table["ticker"].fillna("").astype(str)]})
    out["date"] = pd.to_datetime(table["date"], format="%Y-%m-%d", errors="coerce")
    for col in ("price_factor", "split_factor"):
        out[col] = pd.to_numeric(table[col], errors="coerce")
    bad = out["date"].isna() | ~np.isfinite(out["price_factor"]) | ~np.isfinite(out["split_factor"])
    bad |= (out["price_factor"] <= 0) | (out["split_factor"] <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{path}: row {row + 1}, ticker {out['ticker'].iloc[row]}: bad date or non-positive/NaN factor"
        )
    return out.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True)


def factors_for(bars: pd.DataFrame, factors: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar ``(price_factor * split_factor, split_factor)``; 1.0 where no factor applies."""
    price_mult = np.ones(len(bars))
    split = np.ones(len(bars))
    day_ns = session_dates(bars["timestamp"]).as_unit("ns").asi8
    tickers = bars["ticker"].to_numpy()
    for ticker in pd.unique(tickers):
        rows = np.flatnonzero(tickers == ticker)
        table = factors.loc[factors["ticker"] == ticker]
        if table.empty:
            log.warning("no adjustment factors for %s; its prices stay raw", ticker)
            continue
        factor_days = table["date"].to_numpy(dtype="datetime64[ns]").astype(np.int64)
        pos = np.searchsorted(factor_days, day_ns[rows], side="left")  # first factor date >= bar date
        inside = pos < len(factor_days)
        pf = table["price_factor"].to_numpy()
        sf = table["split_factor"].to_numpy()
        price_mult[rows[inside]] = pf[pos[inside]] * sf[pos[inside]]
        split[rows[inside]] = sf[pos[inside]]
    return price_mult, split


def adjust_bars(bars: pd.DataFrame, factors: pd.DataFrame) -> pd.DataFrame:
    """Split/dividend-adjusted copy of validated bars."""
    if factors.empty:
        raise DataError("adjustment factor table is empty")
    price_mult, split = factors_for(bars, factors)
    out = bars.copy()
    for col in ("open", "high", "low", "close"):
        out[col] = out[col].to_numpy() * price_mult
    out["volume"] = out["volume"].to_numpy() / split
    return out
