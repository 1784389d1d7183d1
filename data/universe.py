"""NASDAQ-100 membership as of a date, from the shipped ``resources/nasdaq100_history.csv``.

A symbol is a member on day ``d`` when ``opt-in <= d`` and (no ``opt-out`` or ``d < opt-out``): the
opt-out date is the first day it is no longer in the index. Picking the universe as of the start of
a backtest (not today's members) avoids survivorship bias.
"""

from __future__ import annotations

import functools
from datetime import date
from importlib import resources

import pandas as pd

from data.errors import DataError

HISTORY_FILE = "nasdaq100_history.csv"


@functools.lru_cache(maxsize=1)
def membership_table() -> pd.DataFrame:
    """``symbol, name, opt_in, opt_out`` (dates; ``opt_out`` NaT while still a member)."""
    with resources.files("data").joinpath("resources", HISTORY_FILE).open("r", encoding="utf-8") as fh:
        table = pd.read_csv(fh, dtype=str)
    table = table.rename(columns={"opt-in": "opt_in", "opt-out": "opt_out"})
    table["opt_in"] = pd.to_datetime(table["opt_in"], format="%Y-%m-%d")
    table["opt_out"] = pd.to_datetime(table["opt_out"], format="%Y-%m-%d")
    return table


def members(as_of: str | date | pd.Timestamp) -> list[str]:
    """Sorted NASDAQ-100 symbols on ``as_of``."""
    try:
        day = pd.Timestamp(as_of).tz_localize(None).normalize()
    except (ValueError, TypeError):
        raise DataError(f"universe: {as_of!r} is not a date") from None
    table = membership_table()
    first = table["opt_in"].min()
    if day < first:
        raise DataError(f"universe: membership history starts {first.date()}; {day.date()} is earlier")
    inside = (table["opt_in"] <= day) & (table["opt_out"].isna() | (day < table["opt_out"]))
    return sorted(table.loc[inside, "symbol"].unique().tolist())
