"""Paper trading: one decision per cycle, from the latest bars to journaled, reconciled orders.

A cycle (:func:`run_cycle`) orchestrates the other modules of ``app.paper``:

1. Broker clock: market closed -> journal it, no orders. The broker's per-cycle retry budget resets.
2. Earlier cycles' open orders are reconciled *first* (``execution.reconcile_open_orders``), and only
   then are the account and positions read: a late fill is counted once, in the positions.
   Kill-switch file present -> journal it, no new orders (open orders are still reconciled).
3. Latest bars -> the observation of the last completed bar, as the env builds it
   (``observation.build_decision``; a stale decision bar is refused). Tickers without a real bar in
   the decision bar's session are skipped: they keep their position (no order) and the journal says
   so, unless held and gone for good (``app.paper.gone``: the broker no longer trades it -> a warning
   each cycle; no real bar for ``gone_after`` sessions -> the whole position is sold).
4. onnxruntime (``Bundle.act``) -> target weights -> risk limits (``max_weight``; the daily loss limit,
   a blocked account or the kill switch halt new orders) -> orders (``app.paper.orders``).
5. The orders go out (``execution.execute_orders``): sells first, then the buys fitted to the cash
   actually there; a broker failure while sending stops the cycle at an order boundary (``partial``:
   the next cycle finishes the rebalance).
6. Journal every decision, order, fill, reconciliation (positions vs what our fills imply), P&L
   snapshot and error in ``<home>/paper/journal.sqlite``.

``--dry-run`` does everything except submitting or cancelling (orders are journaled as ``dry_run``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd

from app.bundle import Bundle
from app.paper.broker import Account, Broker, BrokerError, Order
from app.paper.execution import block_orders, execute_orders, reconcile_open_orders, snapshot
from app.paper.gone import check_gone
from app.paper.journal import Journal, journal_ts
from app.paper.observation import build_decision, check_fresh, fetch_start
from app.paper.options import PaperOptions
from app.paper.orders import PlannedOrder, apply_limits, plan_orders
from data.calendar import INTERVAL_MINUTES, MINUTES_PER_SESSION
from data.errors import DataError, PodracerError

log = logging.getLogger(__name__)


@dataclass
class CycleResult:
    status: str  # closed | kill_switch | halted | traded | partial | dry_run | no_data
    decision_ts: pd.Timestamp | None = None
    target_weights: dict[str, float] = field(default_factory=dict)
    policy_weights: dict[str, float] = field(default_factory=dict)
    orders: list[PlannedOrder] = field(default_factory=list)
    submitted: list[Order] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    not_sent: list[PlannedOrder] = field(default_factory=list)  # dropped or deferred to the next cycle
    gone: list[str] = field(default_factory=list)  # held tickers gone for good: whole position sold
    attention: list[str] = field(default_factory=list)  # gone tickers the broker will not trade


def _halt(kill: bool, account: Account, options: PaperOptions) -> tuple[str, str] | None:
    """(status, reason) when this cycle may send no new orders, else None."""
    if kill:
        return ("kill_switch", f"kill switch {options.kill_switch} present: no new orders")
    if account.trading_blocked:
        return ("halted", "the broker reports trading blocked for this account: no orders")
    if options.limits.daily_loss_limit is not None and account.last_equity > 0:
        loss = 1.0 - account.equity / account.last_equity
        if loss >= options.limits.daily_loss_limit:
            return (
                "halted",
                f"daily loss {loss:.2%} reached the limit {options.limits.daily_loss_limit:.2%}: no new orders",
            )
    return None


def run_cycle(
    bundle: Bundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions = PaperOptions(),
    now: datetime | None = None,
) -> CycleResult:
    """One decision: see the module docstring. Never submits when closed, halted or kill-switched."""
    begin = getattr(broker, "begin_cycle", None)
    if begin is not None:
        begin()
    clock = broker.clock()
    now = now or clock.timestamp
    if not clock.is_open:
        msg = f"market closed (next open {journal_ts(clock.next_open)}): no orders"
        journal.event("market_closed", msg)
        log.info(msg)
        return CycleResult(status="closed", messages=[msg])
    kill = options.kill_switch_on()
    if not options.dry_run:
        # Before the account and positions are read: a stale order that fills now is then counted
        # once (in the positions), and its cancel frees the cash it had reserved.
        reconcile_open_orders(broker, journal, options)
    account = broker.account()
    positions = broker.positions()
    start = fetch_start(now, bundle.interval, int(bundle.feature_spec["lookback"]))
    source = "1d" if bundle.interval == "1d" else "1m"
    bars = broker.latest_bars(list(bundle.tickers), start, now, source)
    try:
        decision = build_decision(bundle, bars, account, positions, now)
        check_fresh(decision.decision_ts, now, bundle, options.max_bar_age)
    except DataError as err:
        journal.event("missing_bars", str(err), "warning")
        log.warning("%s", err)
        return CycleResult(status="no_data", messages=[str(err)])
    result = CycleResult(status="dry_run" if options.dry_run else "traded", decision_ts=decision.decision_ts)
    if decision.skipped:
        msg = f"skipped {', '.join(decision.skipped)}: no bar in the decision bar's session (position held)"
        journal.event("missing_bars", msg, "warning")
        log.warning(msg)
        result.skipped = list(decision.skipped)
        result.messages.append(msg)
    # Held tickers with no bar this session: gone for good? (asks the broker only about those)
    gone = check_gone(broker, decision, positions, bundle.tickers, bundle.bundle_id, now, options.gone_after)
    for msg in gone.warnings:
        journal.event("gone", msg, "warning")
        log.warning(msg)
        result.messages.append(msg)
    result.gone = [o.ticker for o in gone.sells]
    result.attention = list(gone.attention)

    policy_weights = bundle.act(decision.obs)[0]
    if not np.all(np.isfinite(policy_weights)):
        raise PodracerError("the policy produced non-finite weights: no orders")
    target, notes = apply_limits(policy_weights, decision, bundle.tickers, options.limits)
    orders, plan_notes = plan_orders(
        decision, target, bundle.tickers, bundle.bundle_id, options.limits, options.fractional
    )
    notes += plan_notes
    orders = gone.sells + orders  # skipped tickers: the planner never orders them, no id is shared
    result.policy_weights = dict(zip(bundle.tickers, map(float, policy_weights), strict=True))
    result.target_weights = dict(zip(bundle.tickers, map(float, target), strict=True))
    result.orders = orders
    for note in notes:
        journal.event("risk", note)
        result.messages.append(note)

    halt = _halt(kill, account, options)
    journal.decision(
        decision_ts=journal_ts(decision.decision_ts),
        bundle_id=bundle.bundle_id,
        dry_run=options.dry_run,
        equity=decision.value,
        cash=decision.cash,
        tickers=list(bundle.tickers),
        current_weights=list(decision.current_weights),
        target_weights=list(target),
        policy_weights=list(policy_weights),
        skipped=list(decision.skipped),
        note=halt[1] if halt else "",
    )
    if halt is not None:
        result.status = halt[0] if not options.dry_run else "dry_run"
        journal.event(halt[0], halt[1], "warning")
        log.warning(halt[1])
        result.messages.append(halt[1])
        block_orders(orders, halt[1], journal, bundle.bundle_id, decision)
        snapshot(journal, broker, bundle.tickers, decision, account, {}, reconcile=not options.dry_run)
        return result

    sent = execute_orders(orders, broker, journal, options, bundle.bundle_id, decision)
    if sent.status is not None:
        result.status = sent.status
    result.messages.extend(sent.messages)
    result.not_sent.extend(sent.not_sent)
    result.orders = sent.orders  # buys as fitted to the cash; result.not_sent: what did not go out
    result.submitted = sent.submitted
    try:
        snapshot(
            journal, broker, bundle.tickers, decision, account, sent.filled, reconcile=not options.dry_run
        )
    except BrokerError as err:
        journal.event("error", f"snapshot after the orders: {err}", "warning")
    return result


def run_paper(
    bundle: Bundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    *,
    once: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    max_cycles: int | None = None,
) -> list[CycleResult]:
    """Cycle once per decision interval during market hours (``once``: a single cycle)."""
    bar_minutes = INTERVAL_MINUTES[bundle.interval] or MINUTES_PER_SESSION  # a daily bar: one session
    period = max(60.0, bundle.decision_interval * bar_minutes * 60.0)
    results: list[CycleResult] = []
    while True:
        started = time.monotonic()
        try:
            result = run_cycle(bundle, broker, journal, options)
        except PodracerError as err:
            journal.event("error", str(err), "error")
            if once:
                raise
            log.error("cycle failed: %s", err)
            result = CycleResult(status="error", messages=[str(err)])
        results.append(result)
        if once or (max_cycles is not None and len(results) >= max_cycles):
            return results
        wait = period - (time.monotonic() - started)
        if result.status == "closed":
            try:
                clock = broker.clock()
                wait = max(60.0, min(3600.0, (clock.next_open - clock.timestamp).total_seconds()))
            except BrokerError:
                wait = 300.0
        sleep(max(1.0, wait))
