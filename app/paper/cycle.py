"""Paper trading: one decision per cycle, from the latest bars to journaled, reconciled orders.

A cycle (:func:`run_cycle`) orchestrates the other modules of ``app.paper``:

1. Broker clock: market closed -> journal it, no orders. The broker's per-cycle retry budget resets.
   Open: the bundle source names the session's bundle (``app.paper.champion``: fixed at the first
   cycle of each session; ``paper --champion`` reads the registry's pointer there).
2. Earlier cycles' open orders are reconciled *first* (``execution.reconcile_open_orders``), and only
   then are the account and positions read: a late fill is counted once, in the positions.
   The books are checked (``app.paper.books``: the journal's fill-implied positions and open orders
   against the broker's); a mismatch halts new orders until they match again (cycle status
   ``unreconciled``; the alert is the books' record, ``<home>/paper/reconcile.json``, which ``podracer
   status`` reports as the ``books`` problem: one problem, not a failing loop as well).
   Kill-switch file present -> journal it, no new orders (open orders are still reconciled).
3. Latest bars -> the observation of the last completed bar, as the env builds it
   (``observation.build_decision``; a stale decision bar is refused). Tickers without a real bar in
   the decision bar's session are skipped: they keep their position (no order) and the journal says
   so, unless held and gone for good (``app.paper.gone``: the broker no longer trades it -> a warning
   each cycle; no real bar for ``gone_after`` sessions -> the whole position is sold).
   Held tickers that an earlier bundle in the journal traded and this one does not (a champion on
   another universe) are sold whole (``orders.retired_sells``).
4. onnxruntime (``Bundle.act``) -> target weights -> risk limits (``max_weight``; the daily loss limit,
   a blocked account or the kill switch halt new orders) -> orders (``app.paper.orders``).
5. The orders go out (``execution.execute_orders``): sells first, then the buys fitted to the cash
   actually there; a broker failure while sending stops the cycle at an order boundary (``partial``:
   the next cycle finishes the rebalance).
6. Journal every decision, order, fill, reconciliation (positions vs what our fills imply), P&L
   snapshot and error in ``<home>/paper/journal.sqlite``, each row with the ``bundle_id`` deciding it;
   then the books are checked again (a mismatch is recorded now and halts the next cycle).

:func:`run_paper` loops the cycles and writes each one's heartbeat (``app.paper.heartbeat``).

``--dry-run`` does everything except submitting or cancelling (orders are journaled as ``dry_run``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from app.bundle import Bundle
from app.paper.benchmark import BenchmarkBundle, is_benchmark
from app.paper.books import BookRecord, check_books
from app.paper.broker import Broker, BrokerAccount, BrokerError, Order
from app.paper.champion import BundleSource, FixedBundle
from app.paper.disk import write_state
from app.paper.execution import block_orders, execute_orders, holdings, reconcile_open_orders, snapshot
from app.paper.fill_model import worked_orders
from app.paper.gone import check_gone
from app.paper.heartbeat import Heartbeat, write_heartbeat
from app.paper.journal import Journal, journal_ts
from app.paper.observation import build_decision, check_fresh, fetch_start
from app.paper.options import PaperOptions
from app.paper.orders import DecisionSnapshot, PlannedOrder, apply_limits, plan_orders, retired_sells
from app.paper.schedule import cycle_period, next_wait
from data.calendar import exchange_date
from data.errors import DataError, PodracerError

log = logging.getLogger(__name__)


@dataclass
class CycleResult:
    # closed | no_champion | benchmark | kill_switch | halted | unreconciled | traded | partial | dry_run | no_data | error
    status: str
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
    session: str | None = None  # exchange date of an open cycle (YYYY-MM-DD)
    bundle_id: str | None = None  # the bundle that decided
    run_id: str | None = None  # its registry champion's run (paper --champion)
    alert: str | None = None  # what the operator must see (a champion bundle refused, ...)
    broker_time: datetime | None = None  # the broker's clock at the cycle's start


def heartbeat_of(
    result: CycleResult, mode: str, interval_s: float, wait_s: float, options: PaperOptions
) -> Heartbeat:
    """The heartbeat of ``result``, written now; the next cycle ``wait_s`` seconds from now."""
    now = datetime.now(UTC)
    return Heartbeat(
        time=now.isoformat(timespec="seconds"),
        status=result.status,
        mode=mode,
        interval_s=float(interval_s),
        next_due=(now + timedelta(seconds=wait_s)).isoformat(timespec="seconds"),
        bundle_id=result.bundle_id,
        run_id=result.run_id,
        session=result.session,
        broker_time=None if result.broker_time is None else pd.Timestamp(result.broker_time).isoformat(),
        decision_ts=None if result.decision_ts is None else result.decision_ts.isoformat(),
        orders=len(result.orders),
        submitted=len(result.submitted),
        alert=result.alert,
        messages=list(result.messages),
        attention=list(result.attention),
        kill_switch=None if options.kill_switch is None else str(options.kill_switch),
        dry_run=options.dry_run,
        pid=os.getpid(),
    )


def _halt(
    kill: bool, account: BrokerAccount, options: PaperOptions, books: BookRecord | None = None
) -> tuple[str, str] | None:
    """(status, reason) when this cycle may send no new orders, else None."""
    if kill:
        return ("kill_switch", f"kill switch {options.kill_switch} present: no new orders")
    if books is not None and not books.matched:
        return (
            "unreconciled",
            f"the books do not reconcile with the broker ({books.message}): no new orders until they do "
            "(or `podracer reconcile --accept`)",
        )
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


def as_source(bundle: Bundle | BundleSource) -> BundleSource:
    """A bundle as the source of every session's bundle (``paper --bundle``); a source as it is."""
    return FixedBundle(bundle) if isinstance(bundle, Bundle) else bundle


def run_cycle(
    bundle: Bundle | BundleSource,
    broker: Broker,
    journal: Journal,
    options: PaperOptions = PaperOptions(),
    now: datetime | None = None,
) -> CycleResult:
    """One decision: see the module docstring. Never submits when closed, halted or kill-switched."""
    source = as_source(bundle)
    journal.bundle_id = journal.session = None
    begin = getattr(broker, "begin_cycle", None)
    if begin is not None:
        begin()
    clock = broker.clock()
    now = now or clock.timestamp
    if not clock.is_open:
        msg = f"market closed (next open {journal_ts(clock.next_open)}): no orders"
        journal.event("market_closed", msg)
        log.info(msg)
        return CycleResult(status="closed", messages=[msg], broker_time=clock.timestamp)
    session = exchange_date(clock.timestamp).date().isoformat()
    journal.session = session  # the broker's session, not the wall clock's (they differ in a replay)
    picked = source.select(session, journal)
    # No champion to trade: a demoted one's account handed back once, else the benchmark's book.
    for plan, trade in ((picked.takeover, _take_back), (picked.benchmark, _benchmark)):
        if picked.bundle is None and plan is not None:
            result = trade(plan, broker, journal, options, now, session)
            result.session, result.bundle_id, result.broker_time = session, plan.bundle_id, clock.timestamp
            return result
    if picked.bundle is None:
        msg = picked.alert or "no bundle to trade"
        return CycleResult(
            status="no_champion",
            messages=[msg],
            session=session,
            alert=picked.alert,
            broker_time=clock.timestamp,
        )
    result = _trade(picked.bundle, broker, journal, options.for_bundle(picked.bundle.manifest), now, session)
    result.session, result.bundle_id, result.run_id = session, picked.bundle.bundle_id, picked.run_id
    result.alert, result.broker_time = picked.alert, clock.timestamp
    if picked.alert:
        result.messages.insert(0, picked.alert)
    return result


def _benchmark(
    bench: BenchmarkBundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    now: datetime,
    session: str,
) -> CycleResult:
    """No champion yet: buy the benchmark once, through the champions' order path, then hold it."""
    journal.bundle_id = bench.bundle_id
    # Bought already: the broker holds positions, or a benchmark order went out (its fills may be late;
    # the reconciliation counts them). A buy blocked whole (kill switch, halt) is decided again.
    if journal.has_sent(bench.bundle_id, options.dry_run) or (not options.dry_run and broker.positions()):
        if not options.dry_run:
            reconcile_open_orders(broker, journal, options)  # the buy's late fills, counted once
        msg = "holding the benchmark until a champion qualifies: no orders"
        journal.event("benchmark", msg, bundle_id=bench.bundle_id)
        log.info(msg)
        return CycleResult(status="benchmark", messages=[msg])
    msg = (
        f"no champion qualified yet: buying the benchmark, equal weight of {len(bench.tickers)} tickers, "
        "once; held until a champion qualifies"
    )
    journal.event("benchmark", msg, bundle_id=bench.bundle_id)
    log.info(msg)
    result = _trade(bench, broker, journal, options.for_bundle(bench.manifest), now, session)
    result.messages.insert(0, msg)
    return result


def _take_back(
    book: Bundle, broker: Broker, journal: Journal, options: PaperOptions, now: datetime, session: str
) -> CycleResult:
    """A demoted champion's book handed back, once (``app.paper.champion``): rebalanced to the
    benchmark's equal weights, or sold whole (the all-cash book), through the champions' order path."""
    what = "rebalancing to the benchmark" if is_benchmark(book.bundle_id) else "selling its book for cash"
    msg = f"the champion in charge was demoted: {what}, once"
    journal.event(
        "benchmark" if is_benchmark(book.bundle_id) else "no_champion", msg, bundle_id=book.bundle_id
    )
    log.info(msg)
    result = _trade(book, broker, journal, options.for_bundle(book.manifest), now, session)
    result.messages.insert(0, msg)
    return result


def _trade(
    bundle: Bundle, broker: Broker, journal: Journal, options: PaperOptions, now: datetime, session: str
) -> CycleResult:
    """The open market's part of :func:`run_cycle`, with the session's bundle."""
    journal.bundle_id = bundle.bundle_id
    kill = options.kill_switch_on()
    account, positions, books = _read_book(broker, journal, options)
    decision = _decide_bar(bundle, broker, journal, options, now, account, positions)
    if isinstance(decision, CycleResult):
        return decision
    result = CycleResult(status="dry_run" if options.dry_run else "traded", decision_ts=decision.decision_ts)
    exits = _exits(bundle, broker, journal, options, now, decision, positions, result)
    ts = journal_ts(decision.decision_ts)
    prior = journal.decision_at(ts, bundle.bundle_id, options.dry_run)
    policy_weights, target, notes = _targets(bundle, journal, options, decision, prior, ts)
    orders, plan_notes = plan_orders(
        decision, target, bundle.tickers, bundle.bundle_id, options.limits, options.fractional
    )
    notes += plan_notes
    # skipped and retired tickers: the planner never orders them, no id is shared
    orders = exits + orders
    result.policy_weights = dict(zip(bundle.tickers, map(float, policy_weights), strict=True))
    result.target_weights = dict(zip(bundle.tickers, map(float, target), strict=True))
    result.orders = orders
    for note in notes:
        journal.event("risk", note)
        result.messages.append(note)

    halt = _halt(kill, account, options, books)
    if prior is None:
        journal.decision(
            decision_ts=ts,
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
            session=session,
            account_equity=account.equity,
            holdings=holdings(positions),
            prices=list(decision.prices),
        )
    if halt is not None:
        result.status = halt[0] if not options.dry_run else "dry_run"
        journal.event(halt[0], halt[1], "warning")
        log.warning(halt[1])
        result.messages.append(halt[1])
        block_orders(orders, halt[1], journal, bundle.bundle_id, decision)
        snapshot(journal, broker, bundle, decision, account, {}, positions, reconcile=not options.dry_run)
        return result
    return _send(orders, bundle, broker, journal, options, decision, account, positions, result)


def _read_book(broker: Broker, journal: Journal, options: PaperOptions):
    """``(account, positions, books)`` at the cycle's start (books: the reconciliation, None in a dry
    run)."""
    if not options.dry_run:
        # Before the account and positions are read: a stale order that fills now is then counted
        # once (in the positions), and its cancel frees the cash it had reserved.
        reconcile_open_orders(broker, journal, options)
    account = broker.account()
    positions = broker.positions()
    books = None
    if not options.dry_run:
        books = check_books(
            broker, journal, when="cycle_start", tolerance=options.book_tolerance, positions=positions
        )
    return account, positions, books


def _decide_bar(
    bundle: Bundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    now: datetime,
    account,
    positions,
) -> DecisionSnapshot | CycleResult:
    """The decision bar's snapshot from freshly fetched bars, with the bundle's impact memory (its
    earlier decisions' fills, ``app.paper.fill_model.worked_orders``); a ``no_data`` result when the
    bars are missing or stale."""
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
    if decision.costs is not None and not options.dry_run:
        decisions, fills = journal.filled_by_decision(bundle.bundle_id, journal_ts(decision.decision_ts))
        memory = worked_orders(decisions, fills, decision.costs.impact_memory)
        decision = dataclasses.replace(decision, remembered=memory)
    return decision


def _exits(
    bundle: Bundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    now: datetime,
    decision: DecisionSnapshot,
    positions,
    result: CycleResult,
) -> list:
    """The sells outside the policy: held tickers gone for good, and those an earlier champion traded
    that this one does not (a new universe); skipped tickers are reported (their positions held)."""
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
    retired = retired_sells(
        positions, journal.book_tickers(), bundle.tickers, bundle.bundle_id, decision.decision_ts
    )
    for o in retired:
        journal.event("retired", f"{o.ticker} {o.reason} ({o.qty:g} shares)", "warning")
        result.messages.append(f"{o.ticker} {o.reason}")
    return gone.sells + retired


def _targets(
    bundle: Bundle,
    journal: Journal,
    options: PaperOptions,
    decision: DecisionSnapshot,
    prior: tuple[list[float], list[float]] | None,
    ts: str,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(policy weights, target weights, notes)`` of the decision bar."""
    if prior is not None:
        # This bar was decided already (a restart mid-cycle, a retried run): finish that decision
        # from the holdings as they are now, with the same client order ids, rather than decide
        # again on a book its own orders have half changed.
        journal.event("resume", f"decision at {ts} taken already: its remaining orders go out")
        return np.asarray(prior[0]), np.asarray(prior[1]), []
    policy_weights = bundle.act(decision.obs)[0]
    if not np.all(np.isfinite(policy_weights)):
        raise PodracerError("the policy produced non-finite weights: no orders")
    target, notes = apply_limits(policy_weights, decision, bundle.tickers, options.limits)
    return policy_weights, target, notes


def _send(
    orders: list,
    bundle: Bundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    decision: DecisionSnapshot,
    account,
    positions,
    result: CycleResult,
) -> CycleResult:
    """The orders to the broker, then the P&L snapshot and the books' check after them."""
    sent = execute_orders(orders, broker, journal, options, bundle.bundle_id, decision)
    if sent.status is not None:
        result.status = sent.status
    result.messages.extend(sent.messages)
    result.not_sent.extend(sent.not_sent)
    result.orders = sent.orders  # buys as fitted to the cash; result.not_sent: what did not go out
    result.submitted = sent.submitted
    try:
        snapshot(
            journal, broker, bundle, decision, account, sent.filled, positions, reconcile=not options.dry_run
        )
    except BrokerError as err:
        journal.event("error", f"snapshot after the orders: {err}", "warning")
    if not options.dry_run:
        after = check_books(broker, journal, when="after_cycle", tolerance=options.book_tolerance)
        if not after.matched:
            msg = f"the books do not reconcile with the broker after the orders ({after.message})"
            log.warning(msg)
            result.messages.append(msg)
    return result


def run_paper(
    bundle: Bundle | BundleSource,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    *,
    once: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    max_cycles: int | None = None,
    heartbeat: Path | None = None,
    on_close: Callable[[], None] | None = None,
) -> list[CycleResult]:
    """Cycle at each decision of the session-anchored grid during market hours (:func:`next_wait`;
    ``once``: a single cycle); after each
    cycle, its heartbeat goes to ``heartbeat`` (atomically) when given; ``on_close`` runs after each
    cycle that found the market closed (the replay of the sessions traded)."""
    source = as_source(bundle)
    results: list[CycleResult] = []
    while True:
        started = time.monotonic()
        failure: PodracerError | None = None
        try:
            result = run_cycle(source, broker, journal, options)
        except PodracerError as err:
            journal.event("error", str(err), "error")
            log.error("cycle failed: %s", err)
            failure = err
            current = source.current
            result = CycleResult(
                status="error",
                messages=[str(err)],
                bundle_id=current.bundle_id if current is not None else None,
                alert=str(err),
            )
        if result.bundle_id is None and source.current is not None:  # closed: the bundle in hand
            result.bundle_id = source.current.bundle_id
            result.run_id = getattr(source, "run_id", None)
        results.append(result)
        if on_close is not None and result.status == "closed":
            on_close()
        last = once or (max_cycles is not None and len(results) >= max_cycles)
        period = cycle_period(source.current)
        wait = period - (time.monotonic() - started)
        if not last:
            wait = next_wait(source.current, broker, closed=result.status == "closed", fallback=wait)
        wait = max(1.0, wait)
        if heartbeat is not None:  # a full disk: one problem, the last good heartbeat stays
            beat = heartbeat_of(result, source.mode, period, wait, options)
            write_state(heartbeat, partial(write_heartbeat, heartbeat, beat))
        if failure is not None and once:
            raise failure
        if last:
            return results
        sleep(wait)
