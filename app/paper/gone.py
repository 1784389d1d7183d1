"""Held bundle tickers that stopped trading for good (delisted, halted for days, acquired).

The env and the backtests sell a held asset that is never tradable again at its last real price;
they know the future, paper trading does not. So "gone" is decided from what the broker says:

- only for tickers the account **holds** that had **no real bar in the decision bar's session** (the
  cycle's ``skipped``): every other ticker costs no extra request;
- ``GET /v2/assets/{symbol}`` per such ticker (through the broker's retry layer). Inactive, not
  tradable, or unknown to the broker (HTTP 404): no order can go out, so the cycle journals a
  ``gone`` warning each cycle naming the ticker ("needs manual attention") and keeps counting the
  position at its last known price;
- active and tradable: one daily-bar request for all of them together. No real bar in the last
  ``gone_after`` completed sessions (nor in the current one) -> a market sell of the whole position,
  journaled with the reason ``gone: ...``. A bar in that window -> nothing happens (a halt or a quiet
  feed; the position is held as for any skipped ticker).

A failed look-up (retries or the cycle's retry budget spent) holds the ticker this cycle and is
journaled; the next cycle asks again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

from app.paper.broker import Broker, BrokerError, Position
from app.paper.orders import DecisionSnapshot, PlannedOrder, client_order_id
from data.calendar import exchange_midnight, session_date, sessions_in_range


@dataclass
class GoneReport:
    sells: list[PlannedOrder] = field(default_factory=list)  # closing sells of gone, still-tradable tickers
    attention: list[str] = field(default_factory=list)  # gone tickers the broker will not trade
    warnings: list[str] = field(default_factory=list)  # one line each, journaled as ``gone`` events


def window_start(decision_ts: pd.Timestamp, gone_after: int) -> datetime:
    """Midnight in exchange time of the first of the ``gone_after`` sessions before the decision bar's
    session (Alpaca stamps a daily bar at midnight New York of its session)."""
    day = session_date(decision_ts)
    prior = sessions_in_range(day - pd.Timedelta(days=gone_after * 2 + 14), day)
    prior = prior[prior < day][-gone_after:]
    first = prior[0] if len(prior) else day
    return exchange_midnight(first).to_pydatetime()


def _price(decision: DecisionSnapshot, i: int, pos: Position) -> float:
    price = float(decision.prices[i])
    if math.isfinite(price) and price > 0:
        return price
    return pos.current_price if pos.current_price > 0 else 0.0


def check_gone(
    broker: Broker,
    decision: DecisionSnapshot,
    positions: dict[str, Position],
    tickers: tuple[str, ...],
    bundle_id: str,
    now: datetime,
    gone_after: int,
) -> GoneReport:
    """Sells for held tickers gone for good; warnings for those the broker will not trade."""
    report = GoneReport()
    held = [t for t in decision.skipped if t in positions and positions[t].qty > 0]
    orderable: list[str] = []
    for ticker in held:
        pos = positions[ticker]
        try:
            asset = broker.asset(ticker)
        except BrokerError as err:
            report.warnings.append(f"{ticker}: asset look-up failed ({err}); position held this cycle")
            continue
        if asset is not None and asset.orderable:
            orderable.append(ticker)
            continue
        why = (
            "unknown to the broker (HTTP 404)"
            if asset is None
            else "inactive at the broker"
            if not asset.active
            else "not tradable at the broker"
        )
        price = _price(decision, tickers.index(ticker), pos)
        report.attention.append(ticker)
        report.warnings.append(
            f"{ticker} gone: {why}, no order possible; the position of {pos.qty:g} shares needs manual "
            f"attention (counted at its last known price ${price:,.2f})"
        )
    if not orderable:
        return report
    start = window_start(decision.decision_ts, gone_after)
    try:
        bars = broker.latest_bars(orderable, start, now, "1d")
    except BrokerError as err:
        report.warnings.append(
            f"{', '.join(orderable)}: daily-bar look-up failed ({err}); positions held this cycle"
        )
        return report
    seen = set(bars["ticker"]) if len(bars) else set()
    for ticker in orderable:
        if ticker in seen:
            continue  # traded within the window: a halt or a quiet feed, not gone
        pos = positions[ticker]
        i = tickers.index(ticker)
        reason = (
            f"gone: no real bar in the last {gone_after} sessions and the broker still trades it: "
            f"selling the whole position ({pos.qty:g} shares)"
        )
        cid = client_order_id(bundle_id, decision.decision_ts, ticker)
        report.sells.append(
            PlannedOrder(ticker, "sell", float(pos.qty), _price(decision, i, pos), cid, reason)
        )
        report.warnings.append(f"{ticker} {reason}")
    return report
