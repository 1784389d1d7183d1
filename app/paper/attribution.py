"""Paper P&L per champion, from the journal's fills and marks: who earned what while in charge.

**Sessions, not moments.** A session belongs to the bundle in charge of it: the journal's
``sessions`` row, written at the session's first cycle (``app.paper.champion``; a switch only ever
happens there). A champion's record is the sum of its sessions, from its first decision to the
first decision of the session after its last.

**A session's P&L** runs from its first decision (before that cycle's orders) to the first decision
of the next session (the latest P&L snapshot for the last one):

    P&L(s) = MV(end) - MV(start) + cash flow of the fills of s's orders

- ``MV``: the book's market value at a mark, ``qty x price`` of the broker's positions that the
  journal recorded there (``decisions.holdings`` before the orders, ``pnl.holdings`` after), over the
  **book's tickers** (every ticker a bundle in the journal trades: anything else the account holds
  is not the champions');
- cash flow: each fill's notional (sells +, buys -), from the cumulative quantities and average
  prices the broker reported (``fills``), the fill counted in the session its order was decided in.
  Fill prices are what the broker charged, so costs are inside the P&L; ``costs`` says how much:
  the slippage against the decision bar's close (``orders.est_price``), buys and sells alike.

So the overnight move into a switch counts for the outgoing champion, whose positions they were,
and the records of all champions add up to the book's P&L over their sessions by construction of
the marks; the account's own P&L (the broker's equity, ``pnl.equity`` minus the first decision's
``account_equity``) is there to check the journal against: on a dedicated paper account they agree
to the cent unless a fill is missing or doubled (the test in tests/test_paper_champion.py).

Per champion: return (the sessions' returns compounded; a session's return is its P&L over the
account's equity at its start), Sharpe of the session returns once it has
:data:`MIN_SHARPE_SESSIONS` sessions, costs, orders by final status, and buy-and-hold over the same
span: equal weights of its tickers bought at its first decision's prices (the decision bar's
closes), valued at its last decision's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from app.paper.journal import order_counts

MIN_SHARPE_SESSIONS = 20  # fewer session returns than this: no Sharpe ratio (too noisy to show)
SESSIONS_PER_YEAR = 252  # the backtests' daily annualization (backtests.metrics, pinned by a test)


@dataclass(frozen=True)
class ChampionRecord:
    """One bundle's paper record over the sessions it was in charge of."""

    bundle_id: str
    run_id: str | None  # the registry champion's run (None for paper --bundle)
    source: str  # "champion" | "bundle"
    first_session: str  # YYYY-MM-DD
    last_session: str
    first_decision: str  # ISO UTC, when recorded
    last_decision: str
    sessions: int
    decisions: int
    orders: dict[str, int]  # by final status (app.paper.journal.order_counts)
    fills: int
    pnl: float  # $, costs included
    cum_return: float
    costs: float  # $ of slippage against the decision bar's close (inside pnl already)
    sharpe: float | None  # None below MIN_SHARPE_SESSIONS sessions or for flat returns
    buy_and_hold: float | None
    session_returns: list[float] = field(default_factory=list)

    @property
    def num_orders(self) -> int:
        return sum(self.orders.values())

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["num_orders"] = self.num_orders
        return out


@dataclass(frozen=True)
class Attribution:
    """Every session's P&L, the records per champion, and the account's P&L to check them against."""

    sessions: pd.DataFrame  # session, bundle_id, start_equity, pnl, return, cash_flow, costs
    records: list[ChampionRecord]  # oldest first
    account_pnl: float | None  # the broker's equity at the last mark - at the first
    note: str = ""

    @property
    def records_pnl(self) -> float:
        return float(sum(r.pnl for r in self.records))


def _json(value: Any, default: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return default


def _market_value(holdings: Any, book: set[str]) -> float:
    rows = _json(holdings, {})
    return float(sum(q * p for s, (q, p) in rows.items() if s in book and p is not None))


def _fills(fills: pd.DataFrame, orders: pd.DataFrame) -> pd.DataFrame:
    """Per order: the cash its fills moved (sells +) and the slippage against the decision price."""
    cols = ["client_order_id", "cash_flow", "costs", "fills"]
    if fills.empty:
        return pd.DataFrame(columns=cols)
    f = fills.sort_values("id")
    notional = f["filled_qty"] * f["filled_avg_price"].fillna(0.0)
    f = f.assign(step=notional - notional.groupby(f["client_order_id"]).shift(fill_value=0.0))
    sign = np.where(f["side"] == "sell", 1.0, -1.0)
    per = (
        f.assign(cash=f["step"] * sign)
        .groupby("client_order_id")
        .agg(
            cash_flow=("cash", "sum"),
            fills=("id", "size"),
            qty=("filled_qty", "last"),
            avg=("filled_avg_price", "last"),
        )
        .reset_index()
    )
    est = orders.set_index("client_order_id")[["est_price", "side"]]
    per = per.join(est, on="client_order_id")
    slip = (per["avg"] - per["est_price"]) * per["qty"]
    per["costs"] = np.where(per["side"] == "sell", -slip, slip)
    per["costs"] = per["costs"].fillna(0.0)
    return per[cols]


def _sharpe(returns: np.ndarray) -> float | None:
    if len(returns) < MIN_SHARPE_SESSIONS:
        return None
    sd = float(np.std(returns, ddof=1))
    return float(np.mean(returns) / sd * math.sqrt(SESSIONS_PER_YEAR)) if sd > 0 else None


def _buy_and_hold(decisions: pd.DataFrame) -> float | None:
    first, last = _json(decisions["prices"].iloc[0], None), _json(decisions["prices"].iloc[-1], None)
    if not first or not last or len(first) != len(last):
        return None
    ratios = [b / a for a, b in zip(first, last, strict=True) if a and b and a > 0]
    return float(np.mean(ratios) - 1.0) if ratios else None


def attribute(tables: dict[str, pd.DataFrame]) -> Attribution:
    """The per-session and per-champion records of a journal (``read_journal``'s tables)."""
    decisions = tables["decisions"]
    decisions = decisions[decisions["session"].notna() & decisions["holdings"].notna()].sort_values("id")
    empty = pd.DataFrame(
        columns=["session", "bundle_id", "start_equity", "pnl", "return", "cash_flow", "costs"]
    )
    if decisions.empty:
        return Attribution(empty, [], None, note="no paper decision with marks yet")
    orders, pnl = tables["orders"], tables["pnl"]
    owners = tables["sessions"].set_index("session")["bundle_id"].to_dict() if len(tables["sessions"]) else {}
    book = {t for ts in decisions["tickers"] for t in _json(ts, [])} | set(orders["ticker"])
    starts = decisions.groupby("session", sort=True).head(1).set_index("session")
    sessions = list(starts.index)
    # The session of each order: that of the decision (bar, bundle) it came from.
    session_of = decisions.drop_duplicates(["decision_ts", "bundle_id"]).set_index(
        ["decision_ts", "bundle_id"]
    )["session"]
    per_order = _fills(tables["fills"], orders)
    per_order = per_order.join(
        orders.set_index("client_order_id")[["decision_ts", "bundle_id"]], on="client_order_id"
    )
    keys = pd.MultiIndex.from_frame(per_order[["decision_ts", "bundle_id"]])
    per_order["session"] = session_of.reindex(keys).to_numpy() if len(per_order) else []
    by_session = per_order.groupby("session")[["cash_flow", "costs"]].sum()

    last = pnl[pnl["holdings"].notna()].sort_values("id").tail(1)
    end_mark = None
    if len(last) and last["recorded_at"].iloc[0] >= starts["recorded_at"].iloc[-1]:
        end_mark = (_market_value(last["holdings"].iloc[0], book), float(last["equity"].iloc[0]))
    rows = []
    for i, session in enumerate(sessions):
        start = starts.loc[session]
        if i + 1 < len(sessions):
            nxt = starts.loc[sessions[i + 1]]
            end_value = _market_value(nxt["holdings"], book)
        elif end_mark is not None:
            end_value = end_mark[0]
        else:
            break  # the last session has no mark after its first decision yet
        flows = (
            by_session.loc[session]
            if session in by_session.index
            else pd.Series({"cash_flow": 0.0, "costs": 0.0})
        )
        gain = end_value - _market_value(start["holdings"], book) + float(flows["cash_flow"])
        equity = float(start["account_equity"])
        rows.append(
            {
                "session": session,
                "bundle_id": owners.get(session, start["bundle_id"]),
                "start_equity": equity,
                "pnl": gain,
                "return": gain / equity if equity > 0 else float("nan"),
                "cash_flow": float(flows["cash_flow"]),
                "costs": float(flows["costs"]),
            }
        )
    frame = pd.DataFrame(rows, columns=empty.columns)
    records = [
        _record(bundle_id, part, decisions, orders, per_order, tables["sessions"])
        for bundle_id, part in _reigns(frame)
    ]
    account = None
    if end_mark is not None:
        account = end_mark[1] - float(starts["account_equity"].iloc[0])
    note = "" if end_mark is not None else "the latest session has no P&L snapshot yet: not counted"
    return Attribution(frame, records, account, note)


def _reigns(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The sessions grouped by bundle, in order of each bundle's first session."""
    order = list(dict.fromkeys(frame["bundle_id"]))
    return [(b, frame[frame["bundle_id"] == b]) for b in order]


def _record(
    bundle_id: str,
    part: pd.DataFrame,
    decisions: pd.DataFrame,
    orders: pd.DataFrame,
    per_order: pd.DataFrame,
    sessions: pd.DataFrame,
) -> ChampionRecord:
    mine = decisions[decisions["bundle_id"] == bundle_id]
    owner = sessions[sessions["bundle_id"] == bundle_id] if len(sessions) else sessions
    run_ids = owner["run_id"].dropna() if len(owner) else pd.Series(dtype=object)
    returns = part["return"].to_numpy(dtype=float)
    return ChampionRecord(
        bundle_id=bundle_id,
        run_id=str(run_ids.iloc[-1]) if len(run_ids) else None,
        source=str(owner["source"].iloc[-1]) if len(owner) else "bundle",
        first_session=str(part["session"].iloc[0]),
        last_session=str(part["session"].iloc[-1]),
        first_decision=mine["recorded_at"].iloc[0].isoformat() if len(mine) else "",
        last_decision=mine["recorded_at"].iloc[-1].isoformat() if len(mine) else "",
        sessions=len(part),
        decisions=len(mine),
        orders=order_counts(orders[orders["bundle_id"] == bundle_id]),
        fills=int(per_order.loc[per_order["bundle_id"] == bundle_id, "fills"].sum()),
        pnl=float(part["pnl"].sum()),
        cum_return=float(np.prod(1.0 + returns) - 1.0),
        costs=float(part["costs"].sum()),
        sharpe=_sharpe(returns),
        buy_and_hold=_buy_and_hold(mine) if len(mine) else None,
        session_returns=[float(r) for r in returns],
    )
