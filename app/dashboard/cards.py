"""The Overview's reading of metrics.json: the strategies it shows, metric cards, the comparison
table and the captions.

No Streamlit here, so every function is unit-tested directly against the strings a user sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pandas as pd

from app.dashboard.formatting import (
    Kind,
    format_delta,
    format_full,
    format_metric,
    strategy_label,
)
from backtests.metrics_model import MetricsDocument
from backtests.verdict import ANNUALIZED_KEYS, ANNUALIZED_MIN_SESSIONS

BENCHMARK_DEFAULT = "buy_and_hold"
CHAMPION_DEFAULT = "champion"
# Strategies the backtest adds for comparison (backtests.baselines): never the champion.
BASELINES = frozenset({"buy_and_hold", "cash", "equal_weight", "index", "linear", "boosted"})


@dataclass(frozen=True)
class MetricSpec:
    """One metric of metrics.json: its key, card label, display kind and which direction is better."""

    key: str
    label: str
    kind: Kind
    higher_is_better: bool = True
    help: str = ""


# The eight cards of the Overview, in order.
CARD_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("cum_returns_final", "Cum. return", "pct", help="Cumulative (total) return over the window."),
    MetricSpec("annual_return", "Ann. return", "pct", help="Annual return: compound annual growth rate."),
    MetricSpec(
        "annual_volatility", "Volatility", "pct", higher_is_better=False, help="Annualized std of returns."
    ),
    MetricSpec("sharpe_ratio", "Sharpe", "ratio", help="Annualized Sharpe ratio of daily returns (rf = 0)."),
    MetricSpec("sortino_ratio", "Sortino", "ratio", help="Annualized Sortino ratio (downside deviation)."),
    MetricSpec("max_drawdown", "Max drawdown", "pct", help="Worst peak-to-trough loss (negative)."),
    MetricSpec("calmar_ratio", "Calmar", "ratio", help="Annual return / |max drawdown|."),
    MetricSpec(
        "probabilistic_sharpe_ratio",
        "PSR",
        "prob",
        help="Probabilistic Sharpe ratio: probability the true Sharpe is above zero, this window alone "
        "(the verdict above counts every look at the window).",
    ),
)

# The extra columns of the full comparison table.
TABLE_METRICS: tuple[MetricSpec, ...] = CARD_METRICS + (
    MetricSpec("turnover", "Turnover / day", "ratio", higher_is_better=False),
    # costs_paid is a fraction of the initial value (backtests.metrics.costs_paid).
    MetricSpec("costs_paid", "Costs (of initial)", "pct", higher_is_better=False),
    MetricSpec("exposure", "Exposure", "pct"),
    MetricSpec("hit_rate", "Hit rate", "pct"),
)


@dataclass(frozen=True)
class Card:
    """One ``st.metric`` card: what the page renders, already formatted."""

    strategy: str
    key: str
    label: str
    value: str
    delta: str | None
    delta_color: Literal["normal", "inverse", "off"]
    help: str
    delta_arrow: Literal["auto", "off"] = "auto"  # "off" for a delta that is a note, not a difference


def benchmark_name(metrics: MetricsDocument) -> str | None:
    """The benchmark strategy named by metrics.json (default buy_and_hold), if present."""
    name = metrics.benchmark or BENCHMARK_DEFAULT
    return name if name in metrics.strategies else None


def champion_name(metrics: MetricsDocument) -> str | None:
    """``champion`` if present, else the first strategy that is neither the benchmark nor a baseline."""
    strategies = list(metrics.strategies)
    if CHAMPION_DEFAULT in strategies:
        return CHAMPION_DEFAULT
    bench = benchmark_name(metrics)
    others = [s for s in strategies if s != bench and s not in BASELINES]
    return others[0] if others else None


# Annual figures from a short window extrapolate a few lucky days to a year (the default demo's
# 12-session test window printed 3,525,288%): the backtest writes them as null below
# ANNUALIZED_MIN_SESSIONS sessions (metrics.json ``annualized_min_sessions``), and the cards say why.


def short_window(metrics: MetricsDocument) -> tuple[int, int] | None:
    """``(sessions, minimum)`` when metrics.json says the window is too short to annualize, else None.

    Older runs carry neither key: they are taken at face value (their annual figures are shown).
    """
    sessions = metrics.num_sessions
    minimum = metrics.annualized_min_sessions or ANNUALIZED_MIN_SESSIONS
    if sessions is not None and sessions < minimum:
        return sessions, minimum
    return None


def metric_cards(metrics: MetricsDocument, strategy: str, versus: str | None = None) -> list[Card]:
    """Cards for ``strategy``; with ``versus``, each card's delta is strategy minus versus.

    Values are short (``format_metric``); the tooltip carries the exact value and the benchmark's.
    """
    values = metrics.strategies[strategy]
    other = metrics.figures_of(versus)
    short = short_window(metrics)
    cards = []
    for spec in CARD_METRICS:
        value = values.get(spec.key)
        delta = None
        notes = [spec.help, f"{strategy_label(strategy)}: {format_full(value, spec.kind)}."]
        if other is not None:
            base = other.get(spec.key)
            notes.append(f"{strategy_label(versus or '')}: {format_full(base, spec.kind)}.")
            if value is not None and base is not None:
                delta = format_delta(float(value) - float(base), spec.kind)
        color: Literal["normal", "inverse", "off"] = "normal" if spec.higher_is_better else "inverse"
        arrow: Literal["auto", "off"] = "auto"
        if value is None and spec.key in ANNUALIZED_KEYS and short is not None:
            period = format_metric(values.get("cum_returns_final"), "pct")
            notes = [
                f"{spec.help} n/a: window under {short[1]} sessions ({short[0]}); "
                f"the period return is {period} (Cum. return)."
            ]
            # The card says why in place of a delta: the period return, or the sessions rule.
            delta = f"period return {period}" if spec.key == "annual_return" else f"under {short[1]} sessions"
            color, arrow = "off", "off"
        cards.append(
            Card(
                strategy=strategy,
                key=spec.key,
                label=spec.label,
                value=format_metric(value, spec.kind),
                delta=delta,
                delta_color=color,
                help=" ".join(notes),
                delta_arrow=arrow,
            )
        )
    return cards


def short_window_note(metrics: MetricsDocument) -> str | None:
    """The caption under the cards when annual figures are withheld, else None."""
    short = short_window(metrics)
    if short is None:
        return None
    return (
        f"Ann. return and Calmar: n/a: window under {short[1]} sessions ({short[0]} in this window); "
        "the period return is the Cum. return card."
    )


def pbo_logits(metrics: MetricsDocument) -> list[float]:
    """The finite PBO logits of metrics.json (empty for older runs)."""
    return [v for v in metrics.pbo_logits if v is not None]


def card_notes(cards: list[Card] | None = None) -> str:
    """One caption explaining every card (what each number means)."""
    specs = CARD_METRICS if cards is None else [s for s in CARD_METRICS if s.key in {c.key for c in cards}]
    notes = " · ".join(f"**{s.label}**: {s.help}" for s in specs)
    return (
        notes
        + " · The small numbers under the champion's cards are champion minus benchmark (pp: percentage points)."
    )


def comparison_table(metrics: MetricsDocument) -> pd.DataFrame:
    """Every strategy (rows) by every metric (columns), formatted."""
    rows = {}
    for name, values in metrics.strategies.items():
        rows[strategy_label(name)] = {
            spec.label: format_metric(values.get(spec.key), spec.kind) for spec in TABLE_METRICS
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "strategy"
    return table


def window_caption(metrics: MetricsDocument) -> str:
    """One line saying which window and conventions the numbers use."""
    parts = []
    if metrics.window:
        parts.append(f"{metrics.window} window")
    if metrics.start and metrics.end:
        parts.append(f"{metrics.start} to {metrics.end}")
    if metrics.period:
        parts.append(f"{metrics.period} returns")
    if metrics.annualization:
        parts.append(f"annualization {metrics.annualization}")
    if metrics.num_sessions is not None:
        parts.append(f"{metrics.num_sessions} sessions")
    if metrics.num_trials is not None:
        parts.append(f"{metrics.num_trials} trial(s) tried")
    costs = costs_caption(metrics)
    if costs:
        parts.append(costs)
    return " · ".join(parts)


def costs_caption(metrics: MetricsDocument) -> str | None:
    """ "costs 0.20% + 1 bp" from metrics.json's cost_rate and slippage_bps (older runs: None)."""
    rate, slip = metrics.cost_rate, metrics.slippage_bps
    if rate is None and slip is None:
        return None
    parts = [f"{rate * 100:.2f}%" if rate is not None else None, f"{slip:g} bp" if slip is not None else None]
    return "costs " + " + ".join(p for p in parts if p) + metrics.execution_text()
