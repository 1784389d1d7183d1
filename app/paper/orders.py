"""Order planning: from the policy's target weights to the orders of one decision.

- :class:`RiskLimits`: the pre-trade limits (order notional cap and floor, per-ticker weight cap,
  daily loss limit);
- :func:`apply_limits`: the policy's weights after the env's rule (negatives to 0, rows above 1
  scaled to 1), skipped tickers held at their current weight, and the ``max_weight`` cap;
- :func:`plan_orders`: sells first, then buys scaled to the cash the sells free up, fractional
  shares unless ``fractional=False``, each capped at ``max_order_notional`` and dropped under
  ``min_order_notional`` by the env's rule (:func:`too_small`);
- :func:`retired_sells`: closing sells of held tickers an earlier bundle traded and this one does not
  (a new champion on another universe);
- :func:`client_order_id`: the deterministic id that makes a re-run of the same decision unable to
  place a second order.

``app.paper.observation`` builds the :class:`DecisionSnapshot`; ``app.paper.execution`` sends the orders.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from app.paper.fill_model import ExecutionCosts, model_price
from data.errors import PodracerError
from envs.params import EnvParams


@dataclass(frozen=True)
class RiskLimits:
    """Pre-trade limits. Weights and losses are fractions (0.05 = 5%)."""

    max_order_notional: float = 10_000.0  # $ per order; larger orders are cut down to it
    max_weight: float = 1.0  # per-ticker target weight cap; the excess stays in cash
    daily_loss_limit: float | None = 0.05  # halt new orders when equity < (1 - L) * last_equity
    # Alpaca's minimum for fractional orders; a bundle's own env minimum, if higher, applies instead
    # (PaperOptions.for_bundle).
    min_order_notional: float = 1.0

    def __post_init__(self) -> None:
        if not self.max_order_notional > 0:
            raise PodracerError(f"--max-order-notional must be > 0, got {self.max_order_notional}")
        if not 0 < self.max_weight <= 1:
            raise PodracerError(f"--max-weight must be in (0, 1], got {self.max_weight}")
        if self.daily_loss_limit is not None and not 0 < self.daily_loss_limit < 1:
            raise PodracerError(f"--daily-loss-limit must be in (0, 1), got {self.daily_loss_limit}")
        if self.min_order_notional < 0:
            raise PodracerError(f"min_order_notional must be >= 0, got {self.min_order_notional}")


def bundle_max_weight(manifest: dict) -> float:
    """The weight cap the bundle's policy was trained and backtested under (its ``env_params``
    ``max_weight``; 1.0 for bundles exported before the cap existed): ``podracer paper``'s default,
    so paper trading holds the champion to the limit its figures were measured with."""
    value = (manifest.get("env_params") or {}).get("max_weight", 1.0)
    return float(value) if value is not None else 1.0


def bundle_min_order_notional(manifest: dict) -> float:
    """The minimum order the bundle's policy was trained and backtested under (its ``env_params``
    ``min_order_notional``; the env's default for bundles exported before the setting existed)."""
    value = (manifest.get("env_params") or {}).get("min_order_notional")
    return float(value) if value is not None else EnvParams.min_order_notional


@dataclass(frozen=True)
class PlannedOrder:
    ticker: str
    side: str  # "buy" | "sell"
    qty: float  # shares > 0
    price: float  # decision bar close (estimate)
    client_order_id: str
    reason: str = ""  # journaled with the order when it is not the policy's (e.g. "gone: ...")

    @property
    def notional(self) -> float:
        return self.qty * self.price


@dataclass(frozen=True)
class DecisionSnapshot:
    """What the policy saw and wanted at one decision bar."""

    decision_ts: pd.Timestamp  # UTC start of the decision bar
    obs: np.ndarray  # (1, obs_dim) float32
    prices: np.ndarray  # (A,) close of the decision bar (nan where unknown)
    qty: np.ndarray  # (A,) shares held
    value: float  # cash + positions marked at the decision bar's close
    cash: float
    current_weights: np.ndarray  # (A,)
    skipped: tuple[str, ...]  # tickers without a bar in the decision bar's session
    # The execution model's inputs (app.paper.fill_model.fill_inputs) per ticker at the decision bar:
    # the square-root impact scale, the size-free part of the price (slippage + half-spread; absent:
    # the bundle's fixed one), the volume cap in shares; the bundle's settings, and the order worked
    # so far (signed shares, decayed: fill_model.worked_orders). No model price without impact/costs.
    impact: dict[str, float] = field(default_factory=dict)
    costs: ExecutionCosts | None = None
    half: dict[str, float] = field(default_factory=dict)
    cap: dict[str, float] = field(default_factory=dict)
    remembered: dict[str, float] = field(default_factory=dict)


def _model_price(decision: DecisionSnapshot, ticker: str, price: float, side: str, qty: float) -> float:
    """The env's fill price of ``qty`` shares of ``ticker`` at reference ``price`` (inputs present)."""
    sign = 1.0 if side == "buy" else -1.0
    carried = max(0.0, sign * decision.remembered.get(ticker, 0.0))
    impact = decision.impact[ticker]
    return model_price(decision.costs, price, side, qty, impact, decision.half.get(ticker), carried)


def predicted_price(order: PlannedOrder, decision: DecisionSnapshot) -> float | None:
    """The fill price the execution model predicts for ``order`` (None without its inputs)."""
    impact = decision.impact.get(order.ticker)
    if decision.costs is None or impact is None or not (math.isfinite(order.price) and order.price > 0):
        return None
    return _model_price(decision, order.ticker, order.price, order.side, order.qty)


def too_small(
    decision: DecisionSnapshot, ticker: str, side: str, qty: float, price: float, min_notional: float
) -> bool:
    """Whether an order is not placed, by the env's minimum-order rule (``envs.core._execute``): a
    sell whose proceeds at the execution model's predicted fill price, or a buy whose notional at the
    reference price, is under ``min_notional`` (or nothing to trade)."""
    if not qty > 0:
        return True
    impact = decision.impact.get(ticker)
    if side == "sell" and decision.costs is not None and impact is not None:
        price = _model_price(decision, ticker, price, "sell", qty)
    return qty * price < min_notional


def client_order_id(bundle_id: str, decision_ts: pd.Timestamp | str, ticker: str) -> str:
    """Deterministic id of the order for ``ticker`` decided at ``decision_ts`` by ``bundle_id``."""
    ts = pd.Timestamp(decision_ts)
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    digest = hashlib.sha256(f"{bundle_id}|{ts.isoformat()}|{ticker}".encode()).hexdigest()
    return f"pr-{digest[:40]}"


def retired_sells(
    positions: dict[str, Any],
    book: set[str],
    tickers: tuple[str, ...],
    bundle_id: str,
    decision_ts: pd.Timestamp,
) -> list[PlannedOrder]:
    """Sells of the whole position in each held ticker of ``book`` (the tickers earlier bundles in the
    journal traded) that ``tickers`` (this bundle's) leave out: no policy would ever trade it again.
    ``positions``: the broker's, ``app.paper.broker.Position`` by symbol."""
    sells = []
    for symbol in sorted(set(positions) & book - set(tickers)):
        pos = positions[symbol]
        if pos.qty > 0:
            reason = f"retired: {symbol} is not among this champion's tickers: selling the whole position"
            cid = client_order_id(bundle_id, decision_ts, symbol)
            sells.append(PlannedOrder(symbol, "sell", float(pos.qty), float(pos.current_price), cid, reason))
    return sells


# --- targets and orders --------------------------------------------------------------------------
def apply_limits(
    policy_weights: np.ndarray, decision: DecisionSnapshot, tickers: tuple[str, ...], limits: RiskLimits
) -> tuple[np.ndarray, list[str]]:
    """Target weights after the env's rule, skipped tickers held, and the ``max_weight`` cap."""
    notes = []
    target = np.clip(np.nan_to_num(policy_weights.astype(np.float64), nan=0.0), 0.0, None)
    # The env's order (envs.trading): cap each weight first, then scale rows above 1 to 1, so a
    # capped weight's excess stays in cash rather than going to the other tickers.
    over = target > limits.max_weight + 1e-12
    if over.any():
        names = ", ".join(t for t, o in zip(tickers, over, strict=True) if o)
        notes.append(f"max weight {limits.max_weight:g}: capped {names} (the excess stays in cash)")
        target = np.minimum(target, limits.max_weight)
    if target.sum() > 1:
        target = target / target.sum()
    for i, ticker in enumerate(tickers):
        if ticker in decision.skipped:  # not traded this cycle: held as they are (may drift above the cap)
            target[i] = decision.current_weights[i]
    if target.sum() > 1:  # held weights of skipped tickers can push the total over 1
        free = [i for i, t in enumerate(tickers) if t not in decision.skipped]
        room = max(0.0, 1.0 - sum(target[i] for i, t in enumerate(tickers) if t in decision.skipped))
        total = target[free].sum()
        if total > room and total > 0:
            target[free] *= room / total
    return target, notes


def _volume_capped(
    decision: DecisionSnapshot, ticker: str, qty: float, fractional: bool, notes: list[str]
) -> float:
    """``qty`` cut to the env's volume cap (``max_participation`` of the fill bar's volume expected at
    the decision bar; whole shares without fractional orders): the rest is not sent, as the env
    drops it."""
    cap = decision.cap.get(ticker, math.inf)
    if qty <= cap:
        return qty
    cut = math.floor(cap) if not fractional else math.floor(cap * 1e6) / 1e6
    notes.append(f"{ticker}: order cut to the volume cap, {cut:g} of {qty:g} shares")
    return float(cut)


def plan_orders(
    decision: DecisionSnapshot,
    target: np.ndarray,
    tickers: tuple[str, ...],
    bundle_id: str,
    limits: RiskLimits,
    fractional: bool = True,
) -> tuple[list[PlannedOrder], list[str]]:
    """Orders that move the book to ``target`` weights: sells first, buys within the cash available."""
    notes: list[str] = []
    sells: list[PlannedOrder] = []
    buys: list[tuple[int, float]] = []  # (asset, notional wanted)

    def qty_of(notional: float, price: float) -> float:
        q = notional / price
        return math.floor(q + 1e-9) if not fractional else math.floor(q * 1e6) / 1e6

    for i, ticker in enumerate(tickers):
        price = decision.prices[i]
        if ticker in decision.skipped or not (np.isfinite(price) and price > 0):
            continue
        delta = target[i] * decision.value - decision.qty[i] * price
        if delta < 0:
            held = max(decision.qty[i], 0.0)
            qty = held if target[i] <= 0 else min(held, qty_of(-delta, price))
            if qty * price > limits.max_order_notional:
                notes.append(f"{ticker}: sell cut to max order notional ${limits.max_order_notional:,.0f}")
                qty = qty_of(limits.max_order_notional, price)
            qty = _volume_capped(decision, ticker, qty, fractional, notes)
            if not too_small(decision, ticker, "sell", qty, price, limits.min_order_notional):
                cid = client_order_id(bundle_id, decision.decision_ts, ticker)
                sells.append(PlannedOrder(ticker, "sell", float(qty), float(price), cid))
        elif delta > 0:
            buys.append((i, float(delta)))
    # Buys spend at most the cash on hand plus what the sells bring in (a small buffer for slippage).
    budget = max(0.0, decision.cash + sum(o.notional for o in sells)) * 0.995
    wanted = sum(n for _, n in buys)
    scale = min(1.0, budget / wanted) if wanted > 0 else 1.0
    if scale < 1.0:
        notes.append(f"buys scaled by {scale:.4f} to the cash available")
    planned_buys = []
    for i, notional in buys:
        ticker, price = tickers[i], float(decision.prices[i])
        notional *= scale
        if notional > limits.max_order_notional:
            notes.append(f"{ticker}: buy cut to max order notional ${limits.max_order_notional:,.0f}")
            notional = limits.max_order_notional
        qty = _volume_capped(decision, ticker, qty_of(notional, price), fractional, notes)
        if not too_small(decision, ticker, "buy", qty, price, limits.min_order_notional):
            cid = client_order_id(bundle_id, decision.decision_ts, ticker)
            planned_buys.append(PlannedOrder(ticker, "buy", float(qty), price, cid))
    return sells + planned_buys, notes
