"""After a paper session: the simulator replays its decisions on the bars that arrived, and the record
(``app.paper.sim_record``) sets the broker's fills beside the model's.

For each decision bar ``t`` of a session (the journal's decisions sent for real) and each order of it
that reached the broker, the model's fill is the env's (``app.paper.fill_model.model_fill``, which calls
``envs.execution``): the fill inputs (impact scale, half-spread, volume cap) from the bars at or before
``t``, exactly as the cycle computed them, the order's impact memory from the journal's earlier fills
(``worked_orders``), and the price at bar ``t+1``'s open, which the cycle could not know. The fees are
the env's (``envs.execution.asset_fees``) with the bundle's fee settings. Each session's simulated book
starts from the broker's book at its first decision and takes the model's fills in the order the
cycles sent them (sells, then buys); see ``app.paper.sim_record`` for the day's figures.

The bars come from the broker's market data (``Broker.latest_bars``), one request per interval over
the sessions replayed and the liquidity windows before them (``observation.fetch_start``), put on the
grid as the cycle does (``observation.completed_bars`` / ``ticker_frames``, ``data.align``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from app.paper.broker import Broker
from app.paper.fill_model import ExecutionCosts, execution_costs, fill_inputs, model_fill, worked_orders
from app.paper.journal import Journal
from app.paper.observation import completed_bars, fetch_start, fill_session, ticker_frames
from app.paper.sim_record import DayCheck, OrderCheck, SimRecord, merged, read_record, record_path
from data.align import align_panel
from data.calendar import bars_per_session, session_bounds, session_dates
from data.errors import DataError
from envs.execution import asset_fees
from envs.fee_schedule import rates_on_date
from envs.params import EnvParams

log = logging.getLogger(__name__)

#: Orders that never reached the broker, or that it refused: nothing to compare.
NOT_AT_BROKER = ("dry_run", "blocked", "not_sent", "not_submitted", "error", "planned", "rejected")


@dataclasses.dataclass(frozen=True)
class BundleCosts:
    """What the replay needs of the bundle that decided a session."""

    interval: str
    costs: ExecutionCosts
    fees: EnvParams


def bundle_costs(bundle_path: str | None) -> BundleCosts:
    """The execution and fee settings of the bundle at ``bundle_path`` (its ``manifest.json``); the
    env's defaults, on a 1-minute grid, when it cannot be read (a benchmark book)."""
    manifest: dict[str, Any] = {}
    if bundle_path:
        try:
            manifest = json.loads((Path(bundle_path) / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = {}
    env = dict(manifest.get("env_params") or {})
    names = {f.name for f in dataclasses.fields(EnvParams)}
    try:
        fees = EnvParams(**{k: v for k, v in env.items() if k in names})
    except (TypeError, ValueError):
        fees = EnvParams()
    return BundleCosts(str(manifest.get("interval") or "1m"), execution_costs(manifest), fees)


def _fee(params: EnvParams, side: str, qty: float, price: float, session: str) -> float:
    """The env's fees of one fill of ``qty`` shares at ``price`` in ``session`` (its date's rates:
    ``envs.execution.asset_fees``)."""
    if not qty > 0 or not np.isfinite(price):
        return 0.0
    traded = torch.tensor([[qty if side == "buy" else -qty]], dtype=torch.float64)
    rates = torch.tensor([rates_on_date(params, str(session)[:10])], dtype=torch.float64)
    return float(asset_fees(params, traded, torch.tensor([[price]], dtype=torch.float64), rates)[0, 0])


@dataclasses.dataclass
class _Bars:
    """The session's bars on the bundle's grid: ``(T, A)`` arrays, the grid's stamps and session dates."""

    panel: Any
    ts: pd.DatetimeIndex
    dates: np.ndarray  # (T,) YYYY-MM-DD of each grid row
    col: dict[str, int]

    def close_at(self, row: int) -> dict[str, float]:
        return {t: float(self.panel.close[row, j]) for t, j in self.col.items()}

    def last_row(self, session: str, before: bool = False) -> int | None:
        rows = np.flatnonzero(self.dates < session if before else self.dates == session)
        return int(rows[-1]) if len(rows) else None


def _fetch(broker: Broker, tickers: list[str], sessions: list[str], interval: str) -> _Bars:
    """The bars of ``tickers`` over ``sessions`` and the liquidity windows before them."""
    first = pd.Timestamp(sessions[0])
    opens, closes = session_bounds(pd.DatetimeIndex([first, pd.Timestamp(sessions[-1])]))
    start = fetch_start(pd.Timestamp(int(opens[0]), tz="UTC").to_pydatetime(), interval, 1)
    end = pd.Timestamp(int(closes[-1]), tz="UTC")
    raw = broker.latest_bars(tickers, start, end.to_pydatetime(), "1d" if interval == "1d" else "1m")
    frames = ticker_frames(completed_bars(raw, interval, end), tuple(tickers), interval)
    if not frames:
        raise DataError(f"no bars for {', '.join(tickers)} from {start:%Y-%m-%d} to {sessions[-1]}")
    panel = align_panel(frames, interval, min_coverage=0.0)
    ts = pd.DatetimeIndex(panel.grid.timestamps, tz="UTC")
    dates = np.asarray(session_dates(ts).strftime("%Y-%m-%d"))
    return _Bars(panel, ts, dates, {t: j for j, t in enumerate(panel.tickers)})


def _book(row: pd.Series) -> tuple[float, dict[str, float]]:
    """(cash, {symbol: qty}) of a decision or P&L row's broker book."""
    held = json.loads(row["holdings"]) if isinstance(row.get("holdings"), str) else {}
    return float(row["cash"]), {s: float(q[0]) for s, q in held.items()}


def _marked(cash: float, qty: dict[str, float], close: dict[str, float]) -> float:
    return cash + sum(q * close.get(s, np.nan) for s, q in qty.items() if q)


class _Replay:
    """One replay over a journal's tables (see the module docstring)."""

    def __init__(self, journal: Journal, broker: Broker) -> None:
        self.journal = journal
        self.broker = broker
        self.decisions = journal.table("decisions")
        self.decisions = self.decisions[(self.decisions["dry_run"] == 0) & self.decisions["session"].notna()]
        self.orders = journal.table("orders")
        self.pnl = journal.table("pnl")
        self.owners = journal.table("sessions").set_index("session")
        self.notes: list[str] = []

    def sessions(self, after: str | None) -> list[str]:
        """The sessions with decisions from ``after`` on (all when None)."""
        days = sorted(set(self.decisions["session"]))
        return [d for d in days if after is None or d >= after]

    def run(self, sessions: list[str]) -> tuple[list[OrderCheck], list[DayCheck]]:
        orders: list[OrderCheck] = []
        days: list[DayCheck] = []
        groups: dict[str, list[str]] = {}
        costs = {s: bundle_costs(self._owner_path(s)) for s in sessions}
        for s in sessions:
            groups.setdefault(costs[s].interval, []).append(s)
        for interval, group in groups.items():
            tickers = self._tickers(group)
            bars = _fetch(self.broker, tickers, group, interval)
            for session in group:
                checks, day = self.session(session, bars, costs[session])
                orders += checks
                if day is not None:
                    days.append(day)
        return orders, days

    def _owner_path(self, session: str) -> str | None:
        if session in self.owners.index:
            path = self.owners.loc[session, "bundle_path"]
            return str(path) if isinstance(path, str) else None
        return None

    def _tickers(self, sessions: list[str]) -> list[str]:
        names: set[str] = set()
        rows = self.decisions[self.decisions["session"].isin(sessions)]
        for text in rows["tickers"]:
            names |= set(json.loads(text))
        for text in rows["holdings"].dropna():
            names |= set(json.loads(text))
        return sorted(names)

    def session(self, session: str, bars: _Bars, bc: BundleCosts) -> tuple[list[OrderCheck], DayCheck | None]:
        """The orders of ``session`` and its day, or no day when its closes are not in the bars."""
        rows = self.decisions[self.decisions["session"] == session].sort_values("decision_ts", kind="stable")
        first = rows.iloc[0]
        cash0, qty0 = _book(first)
        checks = [
            c
            for _, d in rows.drop_duplicates(["decision_ts", "bundle_id"]).iterrows()
            for c in self.decision(session, d, bars, bc)
        ]
        end_row, prev_row = bars.last_row(session), bars.last_row(session, before=True)
        end_book = self._end_book(session)
        if end_row is None or prev_row is None or end_book is None:
            self.notes.append(f"{session}: its closes, the previous session's, or its end book are missing")
            return checks, None
        cash1, qty1 = end_book
        close, before = bars.close_at(end_row), bars.close_at(prev_row)
        start = _marked(cash0, qty0, before)
        sim_cash, sim_qty, fees_sim = cash0, dict(qty0), 0.0
        bought = sold = fees_model = 0.0
        for c in checks:
            sign = 1.0 if c.side == "buy" else -1.0
            if c.filled_qty > 0 and c.fill_price is not None:
                bought += c.filled_qty * c.fill_price if sign > 0 else 0.0
                sold += c.filled_qty * c.fill_price if sign < 0 else 0.0
                fees_model += c.fee_model
            if c.model_price is not None and c.model_qty > 0:
                fee = _fee(bc.fees, c.side, c.model_qty, c.model_price, session)
                sim_cash -= sign * c.model_qty * c.model_price + fee
                sim_qty[c.ticker] = sim_qty.get(c.ticker, 0.0) + sign * c.model_qty
                fees_sim += fee
        return checks, DayCheck(
            session=session,
            bundle_id=str(first["bundle_id"]),
            orders=len(checks),
            start_equity=start,
            paper_pnl=_marked(cash1, qty1, close) - start,
            sim_pnl=_marked(sim_cash, sim_qty, close) - start,
            fees_charged=cash0 - cash1 - bought + sold,
            fees_model=fees_model,
            fees_sim=fees_sim,
        )

    def _end_book(self, session: str) -> tuple[float, dict[str, float]] | None:
        """The broker's book after ``session``: at the next session's first decision, else the
        session's last P&L row (None without one)."""
        later = self.decisions[self.decisions["session"] > session].sort_values("decision_ts", kind="stable")
        if len(later):
            return _book(later.iloc[0])
        stamps = set(self.decisions.loc[self.decisions["session"] == session, "decision_ts"])
        rows = self.pnl[self.pnl["decision_ts"].isin(stamps)]
        return _book(rows.iloc[-1]) if len(rows) else None

    def decision(self, session: str, d: pd.Series, bars: _Bars, bc: BundleCosts) -> list[OrderCheck]:
        """The orders of one decision, each beside the model's fill of it."""
        sent = self.orders[
            (self.orders["decision_ts"] == d["decision_ts"])
            & (self.orders["bundle_id"] == d["bundle_id"])
            & ~self.orders["status"].isin(NOT_AT_BROKER)
        ]
        if sent.empty:
            return []
        ts = pd.Timestamp(d["decision_ts"])
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
        row = int(bars.ts.searchsorted(ts))
        if row >= len(bars.ts) or bars.ts[row] != ts or row + 1 >= len(bars.ts):
            self.notes.append(f"{d['decision_ts']}: the decision bar or the one after it is not in the bars")
            inputs = None
        else:
            p = bars.panel  # every column: the inputs are per panel column (bars.col)
            inputs = fill_inputs(
                bc.costs,
                {n: getattr(p, n)[: row + 1] for n in ("close", "high", "low", "volume")},
                p.grid.session_id[: row + 1],
                fill_session(p, row, bc.interval),
                bars_per_session(bc.interval),
            )
        decisions, fills = self.journal.filled_by_decision(str(d["bundle_id"]), str(d["decision_ts"]))
        memory = worked_orders(decisions, fills, bc.costs.impact_memory)
        order = {"sell": 0, "buy": 1}
        out = []
        for _, o in sorted(sent.iterrows(), key=lambda r: order.get(r[1]["side"], 2)):
            out.append(self._check(session, o, bars, row, inputs, memory, bc))
        return out

    def _check(self, session, o, bars: _Bars, row: int, inputs, memory, bc: BundleCosts) -> OrderCheck:
        filled = float(o["filled_qty"] or 0.0)
        price = float(o["filled_avg_price"]) if filled > 0 and pd.notna(o["filled_avg_price"]) else None
        base = {
            "session": session,
            "decision_ts": str(o["decision_ts"]),
            "client_order_id": str(o["client_order_id"]),
            "ticker": str(o["ticker"]),
            "side": str(o["side"]),
            "qty": float(o["qty"]),
            "filled_qty": filled,
            "fill_price": price,
            "fee_model": _fee(bc.fees, str(o["side"]), filled, price, session) if price else 0.0,
        }
        col = bars.col.get(str(o["ticker"]))
        if inputs is None or col is None:
            return OrderCheck(**base)
        fill_open = float(bars.panel.open[row + 1, col])
        qty, model = model_fill(
            bc.costs,
            inputs,
            col,
            fill_open,
            str(o["side"]),
            float(o["qty"]),
            memory.get(str(o["ticker"]), 0.0),
        )
        cap = float(inputs.cap[col])
        return OrderCheck(
            **base,
            fill_open=fill_open,
            cap=cap if np.isfinite(cap) else None,
            model_qty=qty,
            model_price=model,
        )


def reconcile_due(home: str | Path, journal: Journal) -> bool:
    """Whether a session was traded that the record has not replayed since it closed."""
    decided = journal.table("decisions")
    decided = decided.loc[(decided["dry_run"] == 0) & decided["session"].notna(), "session"]
    if decided.empty:
        return False
    newest = str(decided.max())
    record = read_record(home)
    if record is None or not record.days or record.days[-1].session < newest:
        return True
    _, closes = session_bounds(pd.DatetimeIndex([pd.Timestamp(newest)]))
    return pd.Timestamp(record.written_at) < pd.Timestamp(int(closes[0]), tz="UTC")


def reconcile_sessions(
    home: str | Path, journal: Journal, broker: Broker, *, bound_bps: float, redo: bool = False
) -> SimRecord:
    """Replay the sessions not in the record yet and its newest one (``redo``: every session the
    journal holds in full), merge them into ``<home>/paper/sim_reconcile.json`` (written atomically;
    sessions compacted out of the journal keep their rows) and return the record."""
    old = read_record(home)
    replay = _Replay(journal, broker)
    after = old.days[-1].session if old is not None and old.days and not redo else None
    sessions = replay.sessions(after)
    orders, days = replay.run(sessions) if sessions else ([], [])
    new = SimRecord(
        written_at=datetime.now(UTC).isoformat(timespec="seconds"),
        bound_bps=float(bound_bps),
        orders=orders,
        days=days,
        notes=replay.notes,
    )
    record = merged(old, new)
    record.write(record_path(home))
    return record
