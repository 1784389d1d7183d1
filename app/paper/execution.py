"""One decision's orders -> the broker, every step journaled; then the book reconciled.

- :func:`reconcile_open_orders` (first in a cycle, before the book is read): earlier cycles' open
  orders get their fills recorded and the rest canceled (a new decision replaces them); a
  ``submitted`` row the broker does not know after ``submit_window`` s never reached it and is
  closed ``not_submitted``.
- :func:`execute_orders`: market day orders with ``client_order_id = client_order_id(bundle,
  decision bar, ticker)``, so a re-run of the same decision can never place a second order (the
  broker layer resolves it). Sells go first; the cycle waits for them to fill (at most
  ``fill_timeout`` s), reads the account again and budgets the buys on the cash actually there
  (``BrokerAccount.spendable``: cash and non-marginable buying power, never margin), scaling them down
  when sells are late; what is scaled or dropped is journaled with the reason. A broker failure while
  sending (retries spent, the cycle's retry budget spent) stops at an order boundary: the orders not
  sent are journaled ``not_sent`` and the next cycle finishes the rebalance from the book as it is.
- :func:`block_orders`: a halted cycle's orders, journaled ``blocked`` with the reason.
- :func:`snapshot`: the broker's positions vs what our fills imply, and a P&L row (with the holdings
  behind it: the marks of the per-champion record).

In a dry run nothing is submitted or canceled; orders are journaled as ``dry_run``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from app.bundle import Bundle
from app.paper.broker import Broker, BrokerAccount, BrokerError, Order, OrderRejected, OrderRequest, Position
from app.paper.journal import Journal, journal_ts
from app.paper.options import PaperOptions
from app.paper.orders import DecisionSnapshot, PlannedOrder, predicted_price

log = logging.getLogger(__name__)


@dataclass
class Execution:
    """What sending one decision's orders did."""

    orders: list[PlannedOrder] = field(default_factory=list)  # the sells, then the buys fitted to the cash
    placed: dict[str, Order] = field(default_factory=dict)  # the broker's latest word, by client order id
    not_sent: list[PlannedOrder] = field(default_factory=list)  # dropped or deferred to the next cycle
    messages: list[str] = field(default_factory=list)
    status: str | None = None  # "kill_switch" or "partial" when not every order went out

    @property
    def submitted(self) -> list[Order]:
        """The orders the broker holds, in sending order."""
        return [self.placed[o.client_order_id] for o in self.orders if o.client_order_id in self.placed]

    @property
    def filled(self) -> dict[str, float]:
        """Shares filled per ticker (buys positive, sells negative)."""
        filled: dict[str, float] = {}
        for o in self.orders:
            if o.client_order_id in self.placed:
                sign = 1.0 if o.side == "buy" else -1.0
                filled[o.ticker] = (
                    filled.get(o.ticker, 0.0) + sign * self.placed[o.client_order_id].filled_qty
                )
        return filled


def _age_s(recorded_at: str, now: datetime) -> float:
    then = pd.Timestamp(recorded_at)
    then = then.tz_localize("UTC") if then.tzinfo is None else then
    return (pd.Timestamp(now) - then).total_seconds()


def reconcile_open_orders(broker: Broker, journal: Journal, options: PaperOptions) -> None:
    """Record fills of earlier cycles' orders; cancel what is still open (a new decision replaces it).

    A row still ``submitted`` (the journal wrote it, the broker's answer never came back) that the
    broker does not know once ``options.submit_window`` s have passed never reached it: it is closed
    as ``not_submitted`` so that it is not looked up every cycle forever.
    """
    wall_now = datetime.now(UTC)
    for row in journal.open_orders():
        cid = row["client_order_id"]
        order = broker.order_by_client_id(cid)
        if order is None:
            if row["status"] == "submitted" and _age_s(row["recorded_at"], wall_now) >= options.submit_window:
                msg = f"order {cid} ({row['ticker']}) never reached the broker (unknown after the submit window)"
                journal.mark_not_submitted(cid, msg)
                journal.event("reconcile", msg, "warning")
            else:
                journal.event("reconcile", f"order {cid} ({row['ticker']}) unknown to the broker", "warning")
            continue
        if order.filled_qty > 0:
            journal.fill(
                client_order_id=cid,
                ticker=order.symbol,
                side=order.side,
                filled_qty=order.filled_qty,
                filled_avg_price=order.filled_avg_price,
                status=order.status,
            )
        status = order.status
        if order.is_open and not options.dry_run:
            try:
                broker.cancel(order.id)
                status = "canceled"
                journal.event(
                    "cancel",
                    f"canceled stale order {cid} ({order.symbol}, filled {order.filled_qty:g}/{order.qty:g})",
                )
            except BrokerError as err:
                journal.event("error", f"cancel {cid}: {err}", "error")
        journal.update_order(
            cid,
            status=status,
            filled_qty=order.filled_qty,
            filled_avg_price=order.filled_avg_price,
            broker_order_id=order.id,
        )


def _order_row(o: PlannedOrder, bundle_id: str, decision: DecisionSnapshot) -> dict[str, Any]:
    return {
        "client_order_id": o.client_order_id,
        "decision_ts": journal_ts(decision.decision_ts),
        "bundle_id": bundle_id,
        "ticker": o.ticker,
        "side": o.side,
        "qty": o.qty,
        "est_price": o.price,
        "model_price": predicted_price(o, decision),
    }


def block_orders(
    orders: list[PlannedOrder], reason: str, journal: Journal, bundle_id: str, decision: DecisionSnapshot
) -> None:
    """Journal a halted cycle's orders as ``blocked`` (with the order's own reason, if any)."""
    for o in orders:
        journal.order(
            **_order_row(o, bundle_id, decision),
            status="blocked",
            message=f"{o.reason}; {reason}" if o.reason else reason,
        )


def execute_orders(
    orders: list[PlannedOrder],
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    bundle_id: str,
    decision: DecisionSnapshot,
) -> Execution:
    """Send the sells, wait for their fills, fit the buys to the cash there, send them, wait (see the
    module docstring); a ``BrokerError`` stops at an order boundary (``Execution.status`` "partial")."""
    run = _Sender(broker, journal, options, bundle_id, decision)
    sells = [o for o in orders if o.side == "sell"]
    buys = [o for o in orders if o.side == "buy"]
    sent: list[PlannedOrder] = []
    try:
        for o in sells:
            if run.submit(o):
                sent.append(o)
        if not options.dry_run:
            # Sells first *and filled* before the buys: their proceeds are the buys' cash.
            run.await_fills(sells)
            buys = run.fit_buys(buys, sells, broker.account())
        for o in buys:
            if run.submit(o):
                sent.append(o)
        if not options.dry_run:
            run.await_fills(buys)
    except BrokerError as err:  # (rejections are journaled by submit and never get here)
        # Stop at this order boundary: what is sent stays sent, the rest waits for the next cycle.
        placed = run.execution.placed
        remaining = [o for o in sells + buys if o not in sent and o.client_order_id not in placed]
        run.defer(remaining, str(err))
    run.execution.orders = sells + buys  # buys as fitted to the cash; not_sent: what did not go out
    return run.execution


class _Sender:
    """The steps of :func:`execute_orders`, sharing the broker, the journal and what was placed."""

    def __init__(
        self,
        broker: Broker,
        journal: Journal,
        options: PaperOptions,
        bundle_id: str,
        decision: DecisionSnapshot,
    ) -> None:
        self.broker = broker
        self.journal = journal
        self.options = options
        self.bundle_id = bundle_id
        self.decision = decision
        self.execution = Execution()

    def row(self, o: PlannedOrder) -> dict[str, Any]:
        return _order_row(o, self.bundle_id, self.decision)

    def submit(self, o: PlannedOrder) -> bool:
        """Submit (or, in a dry run, only journal) one order; rejected orders are journaled, not raised.

        True when the order was handed to the broker (or refused by it); a ``BrokerError`` other than
        a rejection propagates, with the row left ``submitted`` (the next cycle's reconcile resolves it).
        """
        journal, ex = self.journal, self.execution
        base = self.row(o)
        if self.options.dry_run:
            journal.order(**base, status="dry_run", message=o.reason)
            return False
        if self.options.kill_switch_on():
            journal.order(**base, status="blocked", message="kill switch")
            journal.event(
                "kill_switch", f"kill switch appeared mid-cycle: {o.client_order_id} not sent", "warning"
            )
            ex.status = "kill_switch"
            return False
        journal.order(**base, status="submitted", message=o.reason)
        try:
            placed = self.broker.submit(OrderRequest(o.ticker, o.side, o.qty, o.client_order_id))  # type: ignore[arg-type]
        except OrderRejected as err:
            journal.order(**base, status="rejected", message=str(err))
            journal.event("rejected", str(err), "warning")
            ex.messages.append(str(err))
            return True
        except BrokerError as err:
            # Maybe sent, maybe not: the row stays "submitted" and the next reconcile settles it.
            journal.order(**base, status="submitted", message=str(err))
            journal.event("error", str(err), "error")
            raise
        journal.order(
            **base,
            status=placed.status,
            broker_order_id=placed.id,
            filled_qty=placed.filled_qty,
            filled_avg_price=placed.filled_avg_price,
        )
        if placed.filled_qty > 0:
            journal.fill(
                client_order_id=o.client_order_id,
                ticker=o.ticker,
                side=o.side,
                filled_qty=placed.filled_qty,
                filled_avg_price=placed.filled_avg_price,
                status=placed.status,
            )
        ex.placed[o.client_order_id] = placed
        return True

    def await_fills(self, batch: list[PlannedOrder]) -> None:
        """Poll this batch's open orders until they are done or ``fill_timeout`` seconds pass."""
        placed = self.execution.placed
        deadline = time.monotonic() + self.options.fill_timeout
        pending = [o for o in batch if o.client_order_id in placed and placed[o.client_order_id].is_open]
        while pending and time.monotonic() < deadline:
            time.sleep(self.options.fill_poll)
            still = []
            for o in pending:
                before = placed[o.client_order_id]
                now = self.broker.order_by_client_id(o.client_order_id) or before
                placed[o.client_order_id] = now
                if now.filled_qty != before.filled_qty or now.status != before.status:
                    self.journal.update_order(
                        o.client_order_id,
                        status=now.status,
                        filled_qty=now.filled_qty,
                        filled_avg_price=now.filled_avg_price,
                        broker_order_id=now.id,
                    )
                    if now.filled_qty != before.filled_qty:
                        self.journal.fill(
                            client_order_id=o.client_order_id,
                            ticker=o.ticker,
                            side=o.side,
                            filled_qty=now.filled_qty,
                            filled_avg_price=now.filled_avg_price,
                            status=now.status,
                        )
                if now.is_open:
                    still.append(o)
            pending = still

    def fit_buys(
        self, buys: list[PlannedOrder], sells: list[PlannedOrder], account: BrokerAccount
    ) -> list[PlannedOrder]:
        """The buys scaled to the cash the account has now (never margin); dropped ones journaled."""
        if not buys:
            return buys
        options, ex = self.options, self.execution
        available = account.spendable * options.cash_buffer
        wanted = sum(o.notional for o in buys)
        if wanted <= available:
            return buys
        late = [
            o.ticker for o in sells if o.client_order_id in ex.placed and ex.placed[o.client_order_id].is_open
        ]
        why = (
            f"sells of {', '.join(late)} not filled after {options.fill_timeout:g}s"
            if late
            else "the sells brought in less than planned"
        )
        scale = available / wanted
        fitted: list[PlannedOrder] = []
        for o in buys:
            q = o.qty * scale
            qty = math.floor(q * 1e6) / 1e6 if options.fractional else math.floor(q + 1e-9)
            if qty > 0 and qty * o.price >= options.limits.min_order_notional:
                fitted.append(PlannedOrder(o.ticker, o.side, float(qty), o.price, o.client_order_id))
            else:
                msg = f"buy {o.ticker} not sent: ${available:,.2f} of cash available ({why})"
                self.journal.order(**self.row(o), status="not_sent", message=msg)
                ex.not_sent.append(o)
        msg = (
            f"buys scaled by {scale:.4f} to the ${available:,.2f} of cash available ({why}); "
            f"{len(buys) - len(fitted)} dropped"
        )
        self.journal.event("buys_scaled", msg, "warning")
        log.warning(msg)
        ex.messages.append(msg)
        return fitted

    def defer(self, remaining: list[PlannedOrder], reason: str) -> None:
        """The cycle is ``partial``: journal the orders not sent and why; the next cycle finishes."""
        ex = self.execution
        for o in remaining:
            self.journal.order(**self.row(o), status="not_sent", message=f"deferred: {reason}")
        names = ", ".join(f"{o.side} {o.ticker}" for o in remaining) or "none"
        msg = (
            f"cycle partial: stopped at an order boundary ({reason}); not sent: {names}; "
            "the next cycle finishes the rebalance"
        )
        self.journal.event("partial", msg, "warning")
        log.warning(msg)
        ex.status = "partial"
        ex.messages.append(msg)
        ex.not_sent.extend(remaining)


def holdings(positions: dict[str, Position]) -> dict[str, tuple[float, float]]:
    """The broker's positions as the journal keeps them: ``{symbol: (qty, price)}``."""
    return {p.symbol: (p.qty, p.current_price) for p in positions.values()}


def snapshot(
    journal: Journal,
    broker: Broker,
    bundle: Bundle,
    decision: DecisionSnapshot,
    account: BrokerAccount,
    filled: dict[str, float],
    before: dict[str, Position],
    *,
    reconcile: bool,
) -> None:
    """Positions after the cycle vs what our fills imply, and a P&L row with the holdings behind it
    (``reconcile=False``: only the P&L row, from ``account`` and the positions ``before``)."""
    ts = journal_ts(decision.decision_ts)
    if not reconcile:
        _pnl_row(journal, ts, account, before, bundle.bundle_id)
        return
    after = broker.positions()
    acct = broker.account()
    for i, ticker in enumerate(bundle.tickers):
        expected = float(decision.qty[i] + filled.get(ticker, 0.0))
        pos = after.get(ticker)
        qty = pos.qty if pos else 0.0
        journal.position(
            decision_ts=ts,
            ticker=ticker,
            qty=qty,
            market_value=pos.market_value if pos else 0.0,
            expected_qty=expected,
            bundle_id=bundle.bundle_id,
        )
        if abs(qty - expected) > 1e-6:
            journal.event(
                "reconcile", f"{ticker}: broker holds {qty:g}, our fills imply {expected:g}", "warning"
            )
    _pnl_row(journal, ts, acct, after, bundle.bundle_id)


def _pnl_row(journal: Any, ts: str, account: Any, positions: Any, bundle_id: str) -> None:
    """The cycle's P&L row: the account's equity and cash, and the holdings behind them."""
    journal.pnl(
        decision_ts=ts,
        equity=account.equity,
        cash=account.cash,
        last_equity=account.last_equity,
        bundle_id=bundle_id,
        holdings=holdings(positions),
    )
