"""The broker's regulatory fees on sells by date: the dated schedules, the rates in force on each
bar's session, and Alpaca's rounding of each fee up to the cent.

At ``[env] broker = "alpaca"`` a sell pays two regulatory fees, each passed through at cost:

- the SEC's Section 31 fee, a rate per $ of the sale's proceeds, set by SEC order (a fee rate
  advisory at each fiscal year's adjustment and at a mid-year one): :data:`SEC_FEE_SCHEDULE`;
- FINRA's Trading Activity Fee (TAF), per share sold, capped per trade (FINRA Schedule A to the
  By-Laws, Section 1): :data:`TAF_SCHEDULE`.

A schedule is a tuple of rows ``(effective date "YYYY-MM-DD", values...)`` in increasing date order;
a row holds from its date until the next row's. A date before the first row takes the first row's
values (the history before it is not encoded: docs/env.md "Fees"). Each fill is priced at the
rates of its fill bar's session date (``envs.fees.fee_table``: one row per bar, so the env's step reads
the rates of thousands of envs with one gather, no loop per env).

With ``[env] round_fees`` (Alpaca's practice) each fee of each order (one asset's sell at one fill)
is rounded up to the cent: a sale pays at least a cent of TAF, and of SEC fee where that rate is
above 0. :func:`round_up_cent` is that rounding (``envs.fees.round_up_cents`` on tensors, and
``envs.fees.sell_fees`` applies the fees to a batch of sells). This module loads without torch: the
settings (``envs.params``) read its schedules.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np

#: SEC Section 31 fee per $ of sale proceeds from each date (SEC fee rate advisories, sec.gov):
#: $27.80 per million from 2024-05-22 (fiscal 2024's adjustment), $0.00 per million from
#: 2025-05-14 (fiscal 2025's mid-year adjustment). Earlier rates are not encoded.
SEC_FEE_SCHEDULE: tuple[tuple[str, float], ...] = (("2024-05-22", 27.8e-6), ("2025-05-14", 0.0))

#: FINRA TAF per share sold and its cap per trade in $ from each date (FINRA Schedule A to the
#: By-Laws, Section 1): $0.000166 per share, at most $8.30 per trade, from 2024-01-01.
TAF_SCHEDULE: tuple[tuple[str, float, float], ...] = (("2024-01-01", 0.000166, 8.30),)

#: A millionth of a cent: what a fee may exceed a whole number of cents by and still round to
#: it, so that a rate's binary rounding (27.8e-6 is not exact) does not add a cent to an exact
#: amount ($1M at $27.80 per million pays $27.80, not $27.81).
CENT_SLACK = 1e-6


def round_up_cent(fee: float) -> float:
    """A fee in $ (>= 0) rounded up to the cent (``envs.fees.round_up_cents`` of one amount, for the
    slow reference ``envs.reference``)."""
    return max(math.ceil(fee * 100.0 - CENT_SLACK), 0) / 100.0


def check_schedule(name: str, rows: object, width: int) -> tuple[tuple, ...]:
    """``rows`` as a schedule of ``width`` numbers per row, as tuples (a config's lists read as such);
    raises ``ValueError`` naming ``name`` unless the dates are ISO dates in increasing order and the
    numbers finite and >= 0. An empty schedule charges nothing."""
    if not isinstance(rows, list | tuple):
        raise ValueError(f"{name}: must be a list of [date, ...] rows")
    out, last = [], None
    for row in rows:
        if not isinstance(row, list | tuple) or len(row) != width + 1:
            raise ValueError(f'{name}: each row must be ["YYYY-MM-DD", {width} number(s)] (got {row!r})')
        try:
            day = dt.date.fromisoformat(str(row[0]))
        except ValueError:
            raise ValueError(f"{name}: {row[0]!r} is not a YYYY-MM-DD date") from None
        if last is not None and day <= last:
            raise ValueError(f"{name}: dates must increase ({row[0]} after {last})")
        values = row[1:]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise ValueError(f"{name}: {row!r}: the values must be numbers")
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(f"{name}: {row!r}: the values must be finite and >= 0")
        out.append((day.isoformat(), *(float(v) for v in values)))
        last = day
    return tuple(out)


def _in_force(rows: tuple[tuple, ...], dates: np.ndarray, width: int) -> np.ndarray:
    """``(len(dates), width)``: each date's row of ``rows`` (the first row before it; zeros when
    ``rows`` is empty)."""
    if not rows:
        return np.zeros((len(dates), width))
    starts = np.array([row[0] for row in rows], dtype="datetime64[D]")
    values = np.array([row[1:] for row in rows], dtype=np.float64)
    index = np.searchsorted(starts, np.asarray(dates, dtype="datetime64[D]"), side="right") - 1
    return values[np.clip(index, 0, None)]


def rates_on(params: Any, dates: np.ndarray) -> np.ndarray:
    """``(len(dates), 3)`` float64, a sell's fee rates on each session date: per $ of proceeds, per
    share sold, and the per-share fee's cap per trade, times ``params.fee_scale``. At ``broker =
    "flat"`` the commission ``cost_rate`` and no per-share fee on every date."""
    dates = np.asarray(dates, dtype="datetime64[D]")
    if params.broker == "flat":
        out = np.zeros((len(dates), 3))
        out[:, 0] = params.cost_rate
        return out
    sec = _in_force(params.sec_fee_schedule, dates, 1)
    taf = _in_force(params.taf_schedule, dates, 2)
    return np.concatenate([sec, taf], axis=1) * params.fee_scale


def rates_on_date(params: Any, day: str | dt.date | np.datetime64) -> tuple[float, float, float]:
    """:func:`rates_on` of one date: ``(per $ of proceeds, per share, cap per trade)``."""
    sec, per_share, cap = rates_on(params, np.array([np.datetime64(day, "D")]))[0]
    return float(sec), float(per_share), float(cap)
