"""How the dashboard writes numbers and names: short values for cards, exact ones for tooltips.

No Streamlit here: the tests compare exactly the strings a user sees with the values in metrics.json.
"""

from __future__ import annotations

import math
from typing import Any, Literal

Kind = Literal["pct", "ratio", "prob", "money"]


# Cards hold about eight characters at a 1400-px window; beyond four digits a value is shown with a
# thousands suffix (35,252.88 -> 35.3k, 3,525,288% -> 3.5M%) and the card's tooltip has it in full.
_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def _compact(number: float, signed: bool = False) -> str:
    """Two decimals below 1,000 in magnitude, else three significant digits and a k/M/B/T suffix."""
    sign = "+" if signed else ""
    magnitude = abs(number)
    if magnitude < 1000:
        return f"{number:{sign}.2f}"
    for scale, suffix in _SUFFIXES:
        if magnitude >= scale:
            scaled = number / scale
            if abs(scaled) >= 1000:  # beyond the largest suffix
                return f"{number:{sign}.1e}"
            digits = 0 if abs(scaled) >= 100 else 1
            return f"{scaled:{sign}.{digits}f}{suffix}"
    raise AssertionError("unreachable")


def format_metric(value: float | None, kind: Kind) -> str:
    """The one display format of a metric value (short enough for a card); ``n/a`` for null/NaN."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    value = float(value)
    if kind == "pct":
        return f"{_compact(value * 100)}%"
    if kind == "money":
        return f"${value:,.2f}"
    if kind == "prob":
        return format_prob(value)  # a DSR of 0.003 is not "0.00"
    return _compact(value)


def format_full(value: float | None, kind: Kind) -> str:
    """The exact value for a tooltip: every significant digit, thousands separators."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    value = float(value)
    if kind == "pct":
        return f"{value * 100:,.6g}%" if abs(value) < 1e4 else f"{value * 100:,.2f}%"
    if kind == "money":
        return f"${value:,.2f}"
    return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.2f}"


def format_delta(delta: float | None, kind: Kind) -> str | None:
    """A card's delta: signed, percentage points for percent metrics; None when undefined."""
    if delta is None or not math.isfinite(delta):
        return None
    if kind == "pct":
        return f"{_compact(delta * 100, signed=True)} pp"
    if kind == "money":
        return f"{delta:+,.2f}"
    return _compact(delta, signed=True)


def strategy_label(name: str) -> str:
    """A strategy's display name (``buy_and_hold`` -> Buy & hold)."""
    return {
        "buy_and_hold": "Buy & hold",
        "champion": "Champion",
        "cash": "Cash",
        "equal_weight": "Equal weight",
        "linear": "Linear (ridge)",
        "boosted": "Boosted (LightGBM)",
    }.get(name, name.replace("_", " "))


def format_prob(value: float) -> str:
    """A probability with the digits that matter: 0.003, 0.62, <0.001."""
    if 0 < value < 0.001:
        return "<0.001"
    return f"{value:.3f}" if 0 < value < 0.01 else f"{value:.2f}"


def finite_or_none(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
