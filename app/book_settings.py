"""The shadow book's settings (:class:`ShadowSettings`), apart from its rule (``app.book_rule``) so
that the ``[gate]`` config section (``app.config_sections.GateConfig``) reads its defaults from here
without importing the rule. ``app.gate.shadow_settings`` builds them from a config: the one reading
the nightly retrain and a walk-forward share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backtests import anytime
from backtests.verdict import SIGNIFICANCE_LEVEL

#: The knobs ``[gate]`` sets under the same names (the level is ``[gate] level``, the block the caller's).
GATE_KNOBS = ("slots", "min_sessions", "max_sessions", "demotion_margin", "max_drawdown", "keep_retired")


@dataclass(frozen=True)
class ShadowSettings:
    """The shadow book's rule (``app.book_rule``'s docstring says what each knob does)."""

    slots: int = 4
    """challengers tested at once"""
    min_sessions: int = 20
    """sessions a challenger is tested before it can retire as non-promising"""
    max_sessions: int = 252
    """sessions a challenger is tested at most; then it retires"""
    level: float = SIGNIFICANCE_LEVEL
    """the level all challengers ever entered share (anytime.challenger_level)"""
    per_block: int = anytime.ENTRIES_PER_BLOCK
    """entries per block of the level's schedule"""
    demotion_level: float = SIGNIFICANCE_LEVEL
    """the demotion test's level"""
    demotion_margin: float = 0.0
    """daily excess over buy-and-hold the champion must keep (demotion's H0)"""
    max_drawdown: float = 0.25
    """the drawdown since promotion of the champion's wealth relative to buy-and-hold's that demotes it"""
    keep_retired: int = 50
    """retired challengers whose last figures the book keeps"""

    @classmethod
    def of_level(cls, level: float, **knobs: Any) -> ShadowSettings:
        """The book's rule at ``level``, demotion at the same level, other knobs as given."""
        return cls(level=level, demotion_level=level, **knobs)

    def __post_init__(self) -> None:
        if self.slots < 1 or self.min_sessions < 1 or self.max_sessions < self.min_sessions:
            raise ValueError("slots and min_sessions must be >= 1 and max_sessions >= min_sessions")
        if not (0 < self.level < 1 and 0 < self.demotion_level < 1 and 0 < self.max_drawdown <= 1):
            raise ValueError("levels must lie in (0, 1) and max_drawdown in (0, 1]")
