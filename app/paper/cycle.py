"""Paper trading: one decision per cycle, from the latest bars to journaled, reconciled orders.

A cycle (``run_cycle``):

1. Broker clock: market closed -> journal it, no orders. The broker's per-cycle retry budget resets.
2. Earlier cycles' open orders are reconciled *first* (fills recorded, the rest canceled; a
   ``submitted`` row the broker does not know after ``submit_window`` s is closed ``not_submitted``),
   and only then are the account and positions read: a late fill is counted once, in the positions.
   Kill-switch file present -> journal it, no new orders (open orders are still reconciled).
3. Latest bars -> the XNAS bar grid (``data.calendar``, as in training) -> the decision bar is the
   last *completed* bar -> features of that bar with ``data.features.latest_features`` and the
   bundle's train-window spec (the very code training used) -> the observation in the env's layout:
   cash fraction, time of day, then per ticker the position weight (marked at the decision bar's
   close, like the env) and the features. A ticker without a real bar in the decision bar's session
   is skipped: it keeps its position (no order) and the journal says so, unless it is held and gone
   for good (``app.paper.gone``: the broker no longer trades it -> a warning each cycle; no real
   bar for ``gone_after`` sessions -> the whole position is sold). A ``1d`` bundle decides
   only on completed sessions (today's bar is still forming until the close).
4. onnxruntime (``Bundle.act``) -> target weights -> risk limits (``max_weight``; daily loss limit
   halts new orders) -> orders (``app.paper.orders``): sells first, then buys scaled to the cash
   the sells free up, fractional shares unless ``fractional=False``, each capped at
   ``max_order_notional`` and dropped under ``min_order_notional``.
5. Market day orders with ``client_order_id = client_order_id(bundle, decision bar, ticker)``: a
   re-run of the same decision can never place a second order (the broker layer resolves it).
   Sells go first; the cycle waits for them to fill (at most ``fill_timeout`` s), reads the account
   again and budgets the buys on the cash actually there (``Account.spendable``: cash and
   non-marginable buying power, never margin), scaling them down when sells are late; what is
   scaled or dropped is journaled with the reason.
   A broker failure while sending (retries spent, the cycle's retry budget spent) stops the cycle at
   an order boundary: the cycle is ``partial``, the orders not sent are journaled ``not_sent`` and
   the next cycle finishes the rebalance from the book as it then is.
6. Journal every decision, order, fill, reconciliation (positions vs what our fills imply), P&L
   snapshot and error in ``<home>/paper/journal.sqlite``.

The policy runs in onnxruntime; torch is used only by the shared feature code (``data.features``
is written in torch, and computing features with the same code as training matters more).
``--dry-run`` does everything except submitting or cancelling (orders are journaled as ``dry_run``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from app.bundle import Bundle
from app.paper.broker import Account, Broker, BrokerError, Order, OrderRejected, OrderRequest, Position
from app.paper.gone import check_gone
from app.paper.journal import Journal
from app.paper.orders import Decision, PlannedOrder, RiskLimits, apply_limits, plan_orders
from data.calendar import INTERVAL_MINUTES, align_panel, align_ticker, session_bounds, sessions_in_range
from data.errors import DataError, PodracerError
from data.features import latest_features
from envs.observation import CASH, FEATURES, TIME_OF_DAY, TRADABLE, WEIGHT, split_obs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PaperOptions:
    """How a cycle trades."""

    limits: RiskLimits = RiskLimits()
    dry_run: bool = False
    kill_switch: Path | None = None
    fractional: bool = True
    fill_timeout: float = 30.0  # seconds to wait for market orders to fill (sells before buys)
    fill_poll: float = 0.5  # seconds between order look-ups while waiting
    max_bar_age: float | None = None  # seconds; None: one decision interval (at least 5 minutes)
    submit_window: float = 60.0  # seconds after which a journaled order unknown to the broker never arrived
    cash_buffer: float = 0.995  # buys spend at most this fraction of the cash available (slippage)
    # Completed sessions without a real bar after which a held ticker the broker still trades is sold
    # (app.paper.gone): a week, longer than halts and quiet IEX days, short enough not to sit for months.
    gone_after: int = 5

    def __post_init__(self) -> None:
        if self.gone_after < 1:
            raise PodracerError(f"--gone-after must be at least 1 session, got {self.gone_after}")


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


# --- observation ---------------------------------------------------------------------------------
def _bars_per_session(interval: str) -> int:
    minutes = INTERVAL_MINUTES[interval]
    return 1 if minutes == 0 else math.ceil(390 / minutes)


def fetch_start(now: datetime, interval: str, lookback: int) -> datetime:
    """Start of the bar history that covers ``lookback`` bars before ``now`` (one spare session)."""
    sessions_needed = math.ceil(lookback / _bars_per_session(interval)) + 1
    today = pd.Timestamp(now).tz_convert("America/New_York").tz_localize(None).normalize()
    span = timedelta(days=int(sessions_needed * 7 / 5) + 10)
    sessions = sessions_in_range(today - span, today)
    sessions = sessions[sessions <= today][-sessions_needed:]
    if len(sessions) == 0:
        return now - span
    opens, _ = session_bounds(sessions[:1])
    return pd.Timestamp(opens[0], tz="UTC").to_pydatetime()


def _session_dates(timestamps: pd.DatetimeIndex) -> pd.DatetimeIndex:
    """Daily bars as date-only stamps (midnight UTC of the session date, what ``data.calendar`` takes).

    Alpaca stamps a daily bar at midnight New York time (04:00/05:00 UTC), which the calendar would
    read as an intraday bar outside the session; date-only input is kept as it is."""
    ts = timestamps.tz_localize("UTC") if timestamps.tz is None else timestamps.tz_convert("UTC")
    if len(ts) == 0 or ((ts.hour == 0) & (ts.minute == 0)).all():
        return ts
    return ts.tz_convert("America/New_York").tz_localize(None).normalize().tz_localize("UTC")


def _session_closed(timestamps: pd.DatetimeIndex, now: pd.Timestamp) -> np.ndarray:
    """Whether the XNAS session of each daily bar has closed by ``now`` (False off-calendar).

    ``timestamps``: date-only stamps (midnight UTC) or session opens, both on the session's UTC date."""
    if len(timestamps) == 0:
        return np.zeros(0, dtype=bool)
    ts = timestamps.tz_localize("UTC") if timestamps.tz is None else timestamps.tz_convert("UTC")
    days = ts.tz_localize(None).normalize()
    sessions = sessions_in_range(days.min(), days.max())
    _, closes = session_bounds(sessions)
    close_of = dict(zip(sessions, closes, strict=True))
    now_ns = now.value
    return np.array([d in close_of and close_of[d] <= now_ns for d in days], dtype=bool)


def build_decision(
    bundle: Bundle,
    bars: pd.DataFrame,
    account: Account,
    positions: dict[str, Position],
    now: datetime,
) -> Decision:
    """The observation of the last completed bar, exactly as the env would build it."""
    tickers = bundle.tickers
    interval = bundle.interval
    spec = bundle.feature_spec
    step = pd.Timedelta(minutes=INTERVAL_MINUTES[interval] or 0)
    # Intraday bundles read 1-minute bars and aggregate them onto the interval's grid (align_ticker).
    source_step = pd.Timedelta(0) if interval == "1d" else pd.Timedelta(minutes=1)
    now_ts = pd.Timestamp(now)
    now_ts = now_ts.tz_localize("UTC") if now_ts.tzinfo is None else now_ts.tz_convert("UTC")
    # Only completed bars: a bar that started less than one interval ago is still forming; a daily
    # bar is complete only once its session has closed.
    if len(bars):
        if interval == "1d":
            bars = bars.assign(timestamp=_session_dates(pd.DatetimeIndex(bars["timestamp"])))
            bars = bars[_session_closed(pd.DatetimeIndex(bars["timestamp"]), now_ts)]
        else:
            bars = bars[bars["timestamp"] + source_step <= now_ts]
    frames: dict[str, pd.DataFrame] = {}
    for ticker in tickers:
        rows = bars[bars["ticker"] == ticker] if len(bars) else bars
        if len(rows):
            aligned = align_ticker(rows.reset_index(drop=True), interval).frame
            if len(aligned):
                frames[ticker] = aligned
    if not frames:
        raise DataError(f"no bars for any of {', '.join(tickers)} before {now_ts.isoformat()}")
    # The decision bar: the newest completed grid bar that some ticker actually traded in.
    last_real = max(f.loc[~f["filled"].astype(bool), "timestamp"].max() for f in frames.values())
    panel = align_panel(frames, interval, min_coverage=0.0)
    grid_ts = pd.DatetimeIndex(panel.grid.timestamps, tz="UTC")
    done = _session_closed(grid_ts, now_ts) if interval == "1d" else grid_ts + step <= now_ts
    complete = (grid_ts <= last_real) & done
    if not complete.any():
        raise DataError("no completed bar to decide on")
    row = int(np.flatnonzero(complete)[-1])
    decision_ts = grid_ts[row]
    session = panel.grid.session_id[row]
    lookback = int(spec["lookback"])
    lo = max(0, row + 1 - lookback)
    col_of = {t: j for j, t in enumerate(panel.tickers)}

    num_assets, num_features = len(tickers), bundle.num_features
    features = np.zeros((num_assets, num_features), dtype=np.float32)
    tradable = np.zeros(num_assets, dtype=np.float32)  # the decision bar is a real bar of the ticker
    prices = np.full(num_assets, np.nan)
    skipped: list[str] = []
    present = [t for t in tickers if t in col_of]
    if present:
        cols = [col_of[t] for t in present]
        # float64 close and float32 volume: exactly what data.loader.build_market feeds the features.
        close = torch.as_tensor(panel.close[lo : row + 1][:, cols], dtype=torch.float64)
        volume = torch.as_tensor(panel.volume[lo : row + 1][:, cols], dtype=torch.float32)
        latest = latest_features(close, volume, spec).cpu().numpy()
    for i, ticker in enumerate(tickers):
        if ticker not in col_of:
            skipped.append(ticker)
            continue
        frame = frames[ticker]
        real = frame.loc[~frame["filled"].astype(bool), "timestamp"]
        real = real[real <= decision_ts]
        same_session = len(real) and (
            panel.grid.session_id[int(grid_ts.searchsorted(real.max(), side="right")) - 1] == session
        )
        if not same_session:
            skipped.append(ticker)  # no trade yet in this session: its price would be stale
        tradable[i] = float(len(real) > 0 and real.max() == decision_ts)  # as MarketData.tradable
        # Features as training saw such bars (carried forward); only its orders are skipped.
        features[i] = latest[present.index(ticker)]
        prices[i] = panel.close[row, col_of[ticker]]
    qty = np.array([positions[t].qty if t in positions else 0.0 for t in tickers])
    for i, ticker in enumerate(tickers):
        if not np.isfinite(prices[i]) and ticker in positions and positions[ticker].current_price > 0:
            prices[i] = positions[ticker].current_price
    held_value = np.where(np.isfinite(prices), qty * np.nan_to_num(prices), 0.0)
    other = sum(p.market_value for s, p in positions.items() if s not in tickers)
    value = float(account.cash + held_value.sum() + other)
    if not value > 0:
        raise DataError(f"account value {value:.2f} is not positive")
    weights = held_value / value
    obs = np.empty((1, bundle.obs_dim), dtype=np.float32)
    glob, per_asset = split_obs(obs, num_assets, num_features)  # views of obs
    glob[0, CASH] = account.cash / value
    glob[0, TIME_OF_DAY] = panel.grid.time_of_day[row]
    per_asset[0, :, WEIGHT] = weights
    per_asset[0, :, TRADABLE] = tradable
    per_asset[0, :, FEATURES] = features
    return Decision(
        decision_ts=decision_ts,
        obs=obs,
        prices=prices,
        qty=qty,
        value=value,
        cash=float(account.cash),
        current_weights=weights,
        skipped=tuple(skipped),
    )


# --- the cycle -----------------------------------------------------------------------------------
def _ts(ts: pd.Timestamp | datetime | None) -> str:
    return "" if ts is None else pd.Timestamp(ts).isoformat()


def _age_s(recorded_at: str, now: datetime) -> float:
    then = pd.Timestamp(recorded_at)
    then = then.tz_localize("UTC") if then.tzinfo is None else then
    return (pd.Timestamp(now) - then).total_seconds()


def _reconcile_open_orders(broker: Broker, journal: Journal, options: PaperOptions) -> None:
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


def _check_fresh(decision_ts: pd.Timestamp, now: datetime, bundle: Bundle, options: PaperOptions) -> None:
    """Refuse to trade on a decision bar older than one decision interval (or ``options.max_bar_age``)."""
    minutes = INTERVAL_MINUTES[bundle.interval]
    if minutes == 0:
        return  # daily bundles decide on the last session's bar by design
    limit = options.max_bar_age or max(5.0, bundle.decision_interval * minutes) * 60.0
    age = (pd.Timestamp(now) - (decision_ts + pd.Timedelta(minutes=minutes))).total_seconds()
    if age > limit:
        raise DataError(
            f"latest bar {decision_ts.isoformat()} is {age / 60:.0f} min old (limit {limit / 60:.0f}): "
            "no decision on stale data"
        )


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
        msg = f"market closed (next open {_ts(clock.next_open)}): no orders"
        journal.event("market_closed", msg)
        log.info(msg)
        return CycleResult(status="closed", messages=[msg])
    kill = options.kill_switch is not None and Path(options.kill_switch).exists()
    if not options.dry_run:
        # Before the account and positions are read: a stale order that fills now is then counted
        # once (in the positions), and its cancel frees the cash it had reserved.
        _reconcile_open_orders(broker, journal, options)
    account = broker.account()
    positions = broker.positions()
    start = fetch_start(now, bundle.interval, int(bundle.feature_spec["lookback"]))
    source = "1d" if bundle.interval == "1d" else "1m"
    bars = broker.latest_bars(list(bundle.tickers), start, now, source)
    try:
        decision = build_decision(bundle, bars, account, positions, now)
        _check_fresh(decision.decision_ts, now, bundle, options)
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

    halt = None
    if kill:
        halt = ("kill_switch", f"kill switch {options.kill_switch} present: no new orders")
    elif account.trading_blocked:
        halt = ("halted", "the broker reports trading blocked for this account: no orders")
    elif options.limits.daily_loss_limit is not None and account.last_equity > 0:
        loss = 1.0 - account.equity / account.last_equity
        if loss >= options.limits.daily_loss_limit:
            halt = (
                "halted",
                f"daily loss {loss:.2%} reached the limit {options.limits.daily_loss_limit:.2%}: no new orders",
            )
    journal.decision(
        decision_ts=_ts(decision.decision_ts),
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
        for o in orders:
            journal.order(
                client_order_id=o.client_order_id,
                decision_ts=_ts(decision.decision_ts),
                bundle_id=bundle.bundle_id,
                ticker=o.ticker,
                side=o.side,
                qty=o.qty,
                est_price=o.price,
                status="blocked",
                message=f"{o.reason}; {halt[1]}" if o.reason else halt[1],
            )
        _snapshot(journal, broker, bundle, decision, account, {}, reconcile=not options.dry_run)
        return result

    placed_by_cid: dict[str, Order] = {}
    sells = [o for o in orders if o.side == "sell"]
    buys = [o for o in orders if o.side == "buy"]
    sent: list[PlannedOrder] = []
    try:
        for o in sells:
            if _submit_one(o, bundle, broker, journal, options, decision, result, placed_by_cid):
                sent.append(o)
        if not options.dry_run:
            # Sells first *and filled* before the buys: their proceeds are the buys' cash.
            _await_fills(sells, placed_by_cid, broker, journal, options)
            buys = _fit_buys(
                buys, sells, placed_by_cid, broker.account(), journal, options, bundle, decision, result
            )
        for o in buys:
            if _submit_one(o, bundle, broker, journal, options, decision, result, placed_by_cid):
                sent.append(o)
        if not options.dry_run:
            _await_fills(buys, placed_by_cid, broker, journal, options)
    except BrokerError as err:  # (rejections are journaled by _submit_one and never get here)
        # Stop at this order boundary: what is sent stays sent, the rest waits for the next cycle.
        remaining = [o for o in sells + buys if o not in sent and o.client_order_id not in placed_by_cid]
        _defer(remaining, str(err), bundle, journal, decision, result)
    result.orders = sells + buys  # buys as fitted to the cash; result.not_sent: what did not go out
    result.submitted = [
        placed_by_cid[o.client_order_id] for o in sells + buys if o.client_order_id in placed_by_cid
    ]
    filled: dict[str, float] = {}
    for o in sells + buys:
        if o.client_order_id in placed_by_cid:
            sign = 1.0 if o.side == "buy" else -1.0
            filled[o.ticker] = filled.get(o.ticker, 0.0) + sign * placed_by_cid[o.client_order_id].filled_qty
    try:
        _snapshot(journal, broker, bundle, decision, account, filled, reconcile=not options.dry_run)
    except BrokerError as err:
        journal.event("error", f"snapshot after the orders: {err}", "warning")
    return result


def _defer(
    remaining: list[PlannedOrder],
    reason: str,
    bundle: Bundle,
    journal: Journal,
    decision: Decision,
    result: CycleResult,
) -> None:
    """Journal the cycle as ``partial``: the orders not sent and why; the next cycle finishes."""
    for o in remaining:
        journal.order(**_order_row(o, bundle, decision), status="not_sent", message=f"deferred: {reason}")
    names = ", ".join(f"{o.side} {o.ticker}" for o in remaining) or "none"
    msg = (
        f"cycle partial: stopped at an order boundary ({reason}); not sent: {names}; "
        "the next cycle finishes the rebalance"
    )
    journal.event("partial", msg, "warning")
    log.warning(msg)
    result.status = "partial"
    result.messages.append(msg)
    result.not_sent.extend(remaining)


def _fit_buys(
    buys: list[PlannedOrder],
    sells: list[PlannedOrder],
    placed_by_cid: dict[str, Order],
    account: Account,
    journal: Journal,
    options: PaperOptions,
    bundle: Bundle,
    decision: Decision,
    result: CycleResult,
) -> list[PlannedOrder]:
    """The buys scaled to the cash the account has now (never margin); dropped ones journaled."""
    if not buys:
        return buys
    available = account.spendable * options.cash_buffer
    wanted = sum(o.notional for o in buys)
    if wanted <= available:
        return buys
    late = [
        o.ticker
        for o in sells
        if o.client_order_id in placed_by_cid and placed_by_cid[o.client_order_id].is_open
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
            journal.order(**_order_row(o, bundle, decision), status="not_sent", message=msg)
            result.not_sent.append(o)
    msg = (
        f"buys scaled by {scale:.4f} to the ${available:,.2f} of cash available ({why}); "
        f"{len(buys) - len(fitted)} dropped"
    )
    journal.event("buys_scaled", msg, "warning")
    log.warning(msg)
    result.messages.append(msg)
    return fitted


def _order_row(o: PlannedOrder, bundle: Bundle, decision: Decision) -> dict[str, Any]:
    return {
        "client_order_id": o.client_order_id,
        "decision_ts": _ts(decision.decision_ts),
        "bundle_id": bundle.bundle_id,
        "ticker": o.ticker,
        "side": o.side,
        "qty": o.qty,
        "est_price": o.price,
    }


def _submit_one(
    o: PlannedOrder,
    bundle: Bundle,
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
    decision: Decision,
    result: CycleResult,
    placed_by_cid: dict[str, Order],
) -> bool:
    """Submit (or, in a dry run, only journal) one order; rejected orders are journaled, not raised.

    True when the order was handed to the broker (or refused by it); a ``BrokerError`` other than a
    rejection propagates, with the row left ``submitted`` (the next cycle's reconcile resolves it).
    """
    base = _order_row(o, bundle, decision)
    if options.dry_run:
        journal.order(**base, status="dry_run", message=o.reason)
        return False
    if options.kill_switch is not None and Path(options.kill_switch).exists():
        journal.order(**base, status="blocked", message="kill switch")
        journal.event(
            "kill_switch", f"kill switch appeared mid-cycle: {o.client_order_id} not sent", "warning"
        )
        result.status = "kill_switch"
        return False
    journal.order(**base, status="submitted", message=o.reason)
    try:
        placed = broker.submit(OrderRequest(o.ticker, o.side, o.qty, o.client_order_id))  # type: ignore[arg-type]
    except OrderRejected as err:
        journal.order(**base, status="rejected", message=str(err))
        journal.event("rejected", str(err), "warning")
        result.messages.append(str(err))
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
    placed_by_cid[o.client_order_id] = placed
    return True


def _await_fills(
    batch: list[PlannedOrder],
    placed_by_cid: dict[str, Order],
    broker: Broker,
    journal: Journal,
    options: PaperOptions,
) -> None:
    """Poll this batch's open orders until they are done or ``options.fill_timeout`` seconds pass."""
    deadline = time.monotonic() + options.fill_timeout
    pending = [
        o for o in batch if o.client_order_id in placed_by_cid and placed_by_cid[o.client_order_id].is_open
    ]
    while pending and time.monotonic() < deadline:
        time.sleep(options.fill_poll)
        still = []
        for o in pending:
            before = placed_by_cid[o.client_order_id]
            now = broker.order_by_client_id(o.client_order_id) or before
            placed_by_cid[o.client_order_id] = now
            if now.filled_qty != before.filled_qty or now.status != before.status:
                journal.update_order(
                    o.client_order_id,
                    status=now.status,
                    filled_qty=now.filled_qty,
                    filled_avg_price=now.filled_avg_price,
                    broker_order_id=now.id,
                )
                if now.filled_qty != before.filled_qty:
                    journal.fill(
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


def _snapshot(
    journal: Journal,
    broker: Broker,
    bundle: Bundle,
    decision: Decision,
    account: Account,
    filled: dict[str, float],
    *,
    reconcile: bool,
) -> None:
    """Positions after the cycle vs what our fills imply, and a P&L row."""
    ts = _ts(decision.decision_ts)
    if not reconcile:
        journal.pnl(decision_ts=ts, equity=account.equity, cash=account.cash, last_equity=account.last_equity)
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
        )
        if abs(qty - expected) > 1e-6:
            journal.event(
                "reconcile", f"{ticker}: broker holds {qty:g}, our fills imply {expected:g}", "warning"
            )
    journal.pnl(decision_ts=ts, equity=acct.equity, cash=acct.cash, last_equity=acct.last_equity)


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
    period = max(60.0, bundle.decision_interval * (INTERVAL_MINUTES[bundle.interval] or 390) * 60.0)
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


def now_utc() -> datetime:
    return datetime.now(UTC)
