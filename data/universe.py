"""NASDAQ-100 membership as of a date, from the shipped ``resources/nasdaq100_history.csv``.

A symbol is a member on day ``d`` when ``opt-in <= d`` and (no ``opt-out`` or ``d < opt-out``): the
opt-out date is the first day it is no longer in the index. Picking the universe as of the start of
a backtest (not today's members) avoids survivorship bias.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import date
from importlib import resources

import numpy as np
import pandas as pd

from data.errors import DataError
from data.schema import normalize_ticker

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


def members_between(
    start: str | date | pd.Timestamp, end: str | date | pd.Timestamp | None = None
) -> list[str]:
    """Sorted NASDAQ-100 symbols that are members on at least one day of ``[start, end]`` (``end``
    None: any day from ``start`` on): the candidates of a span whose tickers are chosen per window
    (a walk-forward's folds); ``membership_mask`` then says on which sessions each one is a member."""
    first = _day(start, "start")
    members(first)  # the one-line error when the history starts later
    table = membership_table()
    overlaps = table["opt_out"].isna() | (table["opt_out"] > first)
    if end is not None:
        overlaps &= table["opt_in"] <= _day(end, "end")
    return sorted(table.loc[overlaps, "symbol"].unique().tolist())


UNIVERSES = ("nasdaq100",)


def check_universe(name: str) -> str:
    """``name`` normalized ("" = none), or a one-line DataError listing the known universes."""
    text = (name or "").strip().lower()
    if text and text not in UNIVERSES:
        raise DataError(
            f"universe: unknown universe {name!r} (known: {', '.join(UNIVERSES)}, or '' for none)"
        )
    return text


def _day(value: str | date | pd.Timestamp, what: str) -> pd.Timestamp:
    try:
        return pd.Timestamp(value).tz_localize(None).normalize()
    except (ValueError, TypeError):
        raise DataError(f"universe: {what} {value!r} is not a date") from None


def changes(as_of: str | date | pd.Timestamp, since: str | date | pd.Timestamp | None = None) -> dict:
    """Members on ``as_of`` plus the joins and leaves in ``(since, as_of]``.

    ``since`` defaults to one year before ``as_of``. A join on day ``d`` is an ``opt-in`` with
    ``since < d <= as_of``; a leave is an ``opt-out`` (first day out) in the same interval. A symbol
    that left and came back in the interval is listed in both.
    """
    day = _day(as_of, "as-of")
    start = day - pd.DateOffset(years=1) if since is None else _day(since, "since")
    if start > day:
        raise DataError(f"universe: --since {start.date()} is after --as-of {day.date()}")
    table = membership_table()
    joined = table.loc[(table["opt_in"] > start) & (table["opt_in"] <= day)]
    left = table.loc[table["opt_out"].notna() & (table["opt_out"] > start) & (table["opt_out"] <= day)]
    return {
        "universe": "nasdaq100",
        "as_of": str(day.date()),
        "since": str(start.date()),
        "members": members(day),
        "joins": [
            {"symbol": r.symbol, "name": r.name, "date": str(r.opt_in.date())}
            for r in joined.sort_values(["opt_in", "symbol"]).itertuples()
        ],
        "leaves": [
            {"symbol": r.symbol, "name": r.name, "date": str(r.opt_out.date())}
            for r in left.sort_values(["opt_out", "symbol"]).itertuples()
        ],
    }


def resolve_tickers(
    universe: str, as_of: str | date | pd.Timestamp | None, tickers: list[str] | tuple[str, ...] = ()
) -> list[str]:
    """The universe's members on ``as_of`` (none when ``universe`` is "") followed by ``tickers``
    (deduplicated, order kept; each spelled by the ticker rule, so BRK/B and BRK.B are one)."""
    out: list[str] = []
    if check_universe(universe):
        if as_of in (None, ""):
            raise DataError(f"universe {universe}: needs an as-of date (--as-of or [data] as_of)")
        out.extend(members(as_of))
    out.extend(normalize_ticker(t, source="--tickers") for t in tickers)
    return list(dict.fromkeys(out))


def membership_mask(tickers: Sequence[str], sessions: pd.DatetimeIndex) -> np.ndarray:
    """``(S, A)`` bool: ticker ``a`` is an index member on session ``s`` (opt-in <= day < opt-out, over
    every stint it had). Point-in-time membership for the loader's ``Panel.member``: a ticker that
    leaves the index stops being tradable there (and is sold, see docs/env.md), one that joins becomes
    tradable from its opt-in. Tickers absent from the history (an ETF such as SPY) are members on
    every session."""
    days = pd.DatetimeIndex(sessions).tz_localize(None).normalize().values
    table = membership_table()
    mask = np.ones((len(days), len(tickers)), dtype=bool)
    for a, ticker in enumerate(tickers):
        stints = table.loc[table["symbol"] == ticker]
        if stints.empty:
            continue
        inside = np.zeros(len(days), dtype=bool)
        for opt_in, opt_out in zip(stints["opt_in"].values, stints["opt_out"].values, strict=True):
            inside |= (days >= opt_in) & (pd.isna(opt_out) | (days < opt_out))
        mask[:, a] = inside
    return mask
