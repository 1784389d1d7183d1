"""How a paper-trading cycle trades: risk limits, dry run, kill switch, fill and freshness timings."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.paper.books import DEFAULT_TOLERANCE
from app.paper.orders import RiskLimits, bundle_max_weight, bundle_min_order_notional
from data.errors import PodracerError


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
    # The per-ticker cap is each bundle's own env max_weight (no --max-weight given): a new champion is
    # held to the cap its figures were measured with, every other limit stays the same.
    weight_cap_from_bundle: bool = False
    # Shares by which the broker's position may differ from the journal's fill-implied one before the
    # books are a mismatch and new orders stop (app.paper.books).
    book_tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        if self.gone_after < 1:
            raise PodracerError(f"--gone-after must be at least 1 session, got {self.gone_after}")

    def for_bundle(self, manifest: dict[str, Any]) -> PaperOptions:
        """These options for the bundle of ``manifest``: its minimum order (the env's
        ``min_order_notional`` it was backtested with, at least the limits' broker minimum), so that
        paper trading drops the orders its backtest dropped; its weight cap when
        ``weight_cap_from_bundle``."""
        floor = max(self.limits.min_order_notional, bundle_min_order_notional(manifest))
        limits = replace(self.limits, min_order_notional=floor)
        if self.weight_cap_from_bundle:
            limits = replace(limits, max_weight=bundle_max_weight(manifest))
        return replace(self, limits=limits)

    def kill_switch_on(self) -> bool:
        """The kill-switch file exists (checked afresh on each call: it may appear mid-cycle)."""
        return self.kill_switch is not None and Path(self.kill_switch).exists()
