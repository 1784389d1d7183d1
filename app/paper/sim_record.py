"""The record of paper trading against the simulator: what the broker filled, order by order and day by
day, beside what the env's execution model would have filled (``app.paper.sim_replay`` replays the
sessions and writes it). This module reads and sums the record without torch (``podracer status``, the
dashboard, ``podracer reconcile``).

``<home>/paper/sim_reconcile.json`` (:class:`SimRecord`, written atomically next to the journal):

- ``orders``: one :class:`OrderCheck` per order that reached the broker: the quantity sent and filled,
  the broker's average fill price, the fill bar's open (bar ``t+1`` of the decision bar ``t``), the
  model's quantity (capped at the volume cap) and price (that open with its half-spread and impact),
  and the modelled fee of the broker's fill.
- ``days``: one :class:`DayCheck` per session: both books start from the broker's book at the
  session's first decision, marked at the previous session's closes (``start_equity``); the paper book
  ends as the broker's (at the next session's first decision, else the session's last P&L row), the
  simulated book after the model's fills and fees; both marked at the session's last closes.
  ``paper_pnl`` and ``sim_pnl`` are those ends less ``start_equity``. ``fees_charged`` is the cash the
  broker took beyond the fills' notional (cash at the start less cash at the end less buys plus sells);
  ``fees_model`` the execution model's fees of the broker's fills.

Slippage in bp, positive a cost (``app.paper.slippage.slippage_bps``), against the fill bar's open:
``slippage_bps`` the broker's, ``model_bps`` the model's, ``gap_bps`` the first less the second.
:func:`gap_problem` reports the mean gap over the last :data:`GAP_SESSIONS` sessions when it is past
the bound (``[paper] max_slippage_gap_bps``, kept in the record as ``bound_bps``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from app.paper.journal_read import journal_path
from app.paper.slippage import slippage_bps
from data.artifact import Artifact, Figure

RECORD_NAME = "sim_reconcile.json"
#: The sessions :func:`gap_problem` averages the slippage gap over (the newest in the record).
GAP_SESSIONS = 5


def record_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/paper/sim_reconcile.json``, in the paper journal's folder."""
    return journal_path(home).parent / RECORD_NAME


class OrderCheck(BaseModel):
    """One order the broker received, beside the model's fill of it."""

    model_config = ConfigDict(frozen=True, extra="allow")

    session: str
    decision_ts: str
    client_order_id: str
    ticker: str
    side: str  # buy | sell
    qty: float  # shares sent
    filled_qty: float  # shares the broker filled
    fill_price: Figure = None  # the broker's average fill price (None: nothing filled)
    fill_open: Figure = None  # the open of bar t+1 (None: no such bar in the bars fetched)
    cap: Figure = None  # the volume cap in shares (None: no cap)
    model_qty: float = 0.0  # min(qty, cap): what the env fills
    model_price: Figure = None  # the env's fill price at fill_open
    fee_model: float = 0.0  # the model's fees of the broker's fill (qty and price)


class DayCheck(BaseModel):
    """One session: the broker's book and the simulated one from the same start."""

    model_config = ConfigDict(frozen=True, extra="allow")

    session: str
    bundle_id: str
    orders: int
    start_equity: float
    paper_pnl: float
    sim_pnl: float
    fees_charged: float
    fees_model: float  # the model's fees of the broker's fills
    fees_sim: float  # the model's fees of the model's fills (in sim_pnl)


class SimRecord(Artifact):
    """``sim_reconcile.json`` (see the module docstring)."""

    FILE = RECORD_NAME
    SCHEMA_VERSION = 1

    written_at: str
    bound_bps: float = Field(description="[paper] max_slippage_gap_bps when it was written")
    orders: list[OrderCheck] = Field(default_factory=list)
    days: list[DayCheck] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # orders or sessions left out, and why


def read_record(home: str | os.PathLike[str]) -> SimRecord | None:
    """The record, or None before the first replay (an unreadable one: ``ArtifactError``)."""
    path = record_path(home)
    return SimRecord.read(path) if path.is_file() else None


def merged(old: SimRecord | None, new: SimRecord) -> SimRecord:
    """``new``'s sessions replace ``old``'s of the same date; the others are kept, in session order."""
    if old is None:
        return new
    redone = {d.session for d in new.days} | {o.session for o in new.orders}
    orders = [o for o in old.orders if o.session not in redone] + list(new.orders)
    days = [d for d in old.days if d.session not in redone] + list(new.days)
    return new.model_copy(
        update={
            "orders": sorted(orders, key=lambda o: (o.session, o.decision_ts, o.client_order_id)),
            "days": sorted(days, key=lambda d: d.session),
        }
    )


def order_frame(record: SimRecord) -> pd.DataFrame:
    """The orders with their figures: ``slippage_bps``, ``model_bps``, ``gap_bps`` (filled orders with a
    fill bar; NaN otherwise) and ``fill_ratio`` (filled over the model's quantity)."""
    frame = pd.DataFrame([o.model_dump() for o in record.orders])
    if frame.empty:
        return pd.DataFrame(
            columns=[*OrderCheck.model_fields, "slippage_bps", "model_bps", "gap_bps", "fill_ratio"]
        )
    priced = frame["fill_open"].notna() & frame["fill_price"].notna() & (frame["filled_qty"] > 0)
    frame["slippage_bps"] = np.where(
        priced,
        slippage_bps(frame["side"], frame["fill_price"].fillna(1.0), frame["fill_open"].fillna(1.0)),
        np.nan,
    )
    modelled = frame["fill_open"].notna() & frame["model_price"].notna()
    frame["model_bps"] = np.where(
        modelled,
        slippage_bps(frame["side"], frame["model_price"].fillna(1.0), frame["fill_open"].fillna(1.0)),
        np.nan,
    )
    frame["gap_bps"] = frame["slippage_bps"] - frame["model_bps"]
    frame["fill_ratio"] = frame["filled_qty"] / frame["model_qty"].where(frame["model_qty"] > 0)
    return frame


def day_frame(record: SimRecord) -> pd.DataFrame:
    """The days with ``pnl_gap`` (paper less sim), ``fee_gap`` (charged less modelled), and the equity
    curves: ``paper_equity`` (the broker's book at each session's close) and ``sim_equity`` (that less
    the execution gap summed so far: the equity had every fill been the model's)."""
    frame = pd.DataFrame([d.model_dump() for d in record.days])
    if frame.empty:
        return pd.DataFrame(
            columns=[*DayCheck.model_fields, "pnl_gap", "fee_gap", "paper_equity", "sim_equity"]
        )
    frame = frame.sort_values("session", kind="stable").reset_index(drop=True)
    frame["pnl_gap"] = frame["paper_pnl"] - frame["sim_pnl"]
    frame["fee_gap"] = frame["fees_charged"] - frame["fees_model"]
    frame["paper_equity"] = frame["start_equity"] + frame["paper_pnl"]
    frame["sim_equity"] = frame["paper_equity"] - frame["pnl_gap"].cumsum()
    return frame


def summary(record: SimRecord) -> dict[str, float | int | None]:
    """The record in figures: counts, the slippage's mean / median / 10th and 90th percentile (bp),
    the model's mean and the mean gap, the fill ratio (the broker's filled notional over the model's,
    at the fill bar's open), the orders the broker filled past the model's volume cap, the fee gap
    ($), both P&L totals and their daily correlation."""
    orders, days = order_frame(record), day_frame(record)
    slip = orders["slippage_bps"].dropna()
    sized = orders[orders["fill_open"].notna() & (orders["model_qty"] > 0)]
    model_notional = float((sized["model_qty"] * sized["fill_open"]).sum())
    filled_notional = float((sized["filled_qty"] * sized["fill_open"]).sum())

    def stat(values: pd.Series, fn) -> float | None:
        return float(fn(values)) if len(values) else None

    capped = orders[orders["cap"].notna()]
    over_cap = int((capped["filled_qty"] > capped["cap"] * (1 + 1e-9) + 1e-9).sum())
    corr = None
    if len(days) >= 3 and days["paper_pnl"].std() > 0 and days["sim_pnl"].std() > 0:
        corr = float(np.corrcoef(days["paper_pnl"], days["sim_pnl"])[0, 1])
    return {
        "sessions": len(days),
        "orders": len(orders),
        "fills": len(slip),
        "slippage_bps": stat(slip, np.mean),
        "slippage_median_bps": stat(slip, np.median),
        "slippage_p10_bps": stat(slip, lambda x: np.percentile(x, 10)),
        "slippage_p90_bps": stat(slip, lambda x: np.percentile(x, 90)),
        "model_bps": stat(orders["model_bps"].dropna(), np.mean),
        "gap_bps": stat(orders["gap_bps"].dropna(), np.mean),
        "fill_ratio": filled_notional / model_notional if model_notional > 0 else None,
        "over_cap": over_cap,
        "fees_charged": float(days["fees_charged"].sum()) if len(days) else 0.0,
        "fees_model": float(days["fees_model"].sum()) if len(days) else 0.0,
        "fee_gap": float(days["fee_gap"].sum()) if len(days) else 0.0,
        "paper_pnl": float(days["paper_pnl"].sum()) if len(days) else 0.0,
        "sim_pnl": float(days["sim_pnl"].sum()) if len(days) else 0.0,
        "pnl_correlation": corr,
    }


def recent_gap_bps(record: SimRecord, sessions: int = GAP_SESSIONS) -> tuple[float | None, int]:
    """The mean slippage gap (bp) over the filled orders of the newest ``sessions`` sessions, and how
    many orders that is (None without any)."""
    orders = order_frame(record)
    if orders.empty:
        return None, 0
    newest = sorted(set(orders["session"]))[-sessions:]
    gaps = orders.loc[orders["session"].isin(newest), "gap_bps"].dropna()
    return (float(gaps.mean()) if len(gaps) else None), len(gaps)


def gap_problem(record: SimRecord | None) -> str | None:
    """A one-line message when the recent mean slippage gap is past the record's bound, else None."""
    if record is None:
        return None
    gap, fills = recent_gap_bps(record)
    if gap is None or not math.isfinite(gap) or abs(gap) <= record.bound_bps:
        return None
    last = record.days[-1].session if record.days else "?"
    return (
        f"paper fills {gap:+.1f} bp from the execution model over the last {fills} fills "
        f"(to {last}; bound {record.bound_bps:g} bp, [paper] max_slippage_gap_bps)"
    )
