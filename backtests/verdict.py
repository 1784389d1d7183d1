"""What a backtest's figures may claim: the plain-words verdict on the selected strategy's edge, the
line of selection diagnostics after it, and the shortest window whose annualized figures are reported.

The one home of these rules. ``backtests.report`` computes the figures (``backtests.significance``,
``backtests.snooping``), judges once and writes the verdict into metrics.json (:func:`verdict_fields`);
the CLI summary, ``podracer backtest --json``, the dashboard and the nightly gate use what the document
says (:func:`stated_verdict`) or this same rule (:func:`judge`). Every function reads the document as
its model (:class:`backtests.metrics_model.MetricsDocument`). No torch, arch or scipy: the dashboard
and the CLI import this without loading them.

The rule (:func:`judge`), on the out-of-sample test of the selected strategy on its held-out window
(metrics.json ``oos_test``), at the level ``alpha`` (``[backtest] significance``, metrics.json
``significance``):

- "edge significant out of sample": the probabilistic Sharpe ratio after the looks counted (the DSR
  over ``K`` looks; the PSR against 0 for a first look) at or above ``1 - alpha`` AND the benchmark
  test's p-value after the looks (Sidak) at or below ``alpha``: its Sharpe ratio is above zero and its
  mean daily return above buy-and-hold's;
- "edge not significant out of sample": either falls short;
- "edge not measurable": the window is not held out, has fewer than :data:`MIN_OOS_SESSIONS`
  sessions, or a figure is undefined (a strategy that stayed in cash), with why.

The selection diagnostics (SPA p-value, validation DSR with the effective trials, PBO; metrics.json
``selection`` and ``pbo``) describe the tournament's choice on the validation window: they follow the
verdict on a line of their own and do not change it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from backtests.metrics_model import MetricsDocument, Outcome

#: The default level of the out-of-sample test (``[backtest] significance``): a 5% chance of calling
#: a strategy with no edge significant.
SIGNIFICANCE = 0.05
#: Fewest held-out sessions the out-of-sample test is read on (about a month of trading days): the
#: PSR's normal approximation and the block bootstrap have too few returns below it.
MIN_OOS_SESSIONS = 20
#: Annualized compounding figures are only reported for windows of at least this many sessions (a
#: quarter): (1 + r)^(252 / n) over 12 sessions turns +33% into +40,000%/yr, a number that reads as a
#: broken product. Below it ``annual_return`` and ``calmar_ratio`` are null and the period return stands.
ANNUALIZED_MIN_SESSIONS = 63
#: Metrics nulled below ANNUALIZED_MIN_SESSIONS. Sharpe, Sortino and volatility scale by sqrt(252) and
#: do not compound, so they stay (the PSR says how much a short window's Sharpe is worth).
ANNUALIZED_KEYS: tuple[str, ...] = ("annual_return", "calmar_ratio")

OUTCOMES: tuple[str, ...] = get_args(Outcome)


@dataclass(frozen=True)
class EdgeVerdict:
    """The verdict on one strategy: its outcome, the figures it rests on, caveats, and the line of
    selection diagnostics shown after it."""

    outcome: Outcome
    figures: tuple[str, ...]  # e.g. ("PSR 0.998", "excess over buy_and_hold +0.41%/day (p 0.001)", ...)
    reasons: tuple[str, ...] = ()  # caveats after the figures, e.g. why it is not measurable
    diagnostics: str = ""  # "selection (validation window, 102 trials): SPA p 0.004, ..."

    @property
    def headline(self) -> str:
        """``"edge significant out of sample"``, ``"edge not significant out of sample"`` or
        ``"edge not measurable"``."""
        return (
            "edge not measurable"
            if self.outcome == "not measurable"
            else f"edge {self.outcome} out of sample"
        )

    @property
    def text(self) -> str:
        """The verdict line: ``"<headline>: <figures, comma-separated>"`` (then ``"; <reason>"`` each)."""
        return f"{self.headline}: {', '.join(self.figures)}" + "".join(f"; {r}" for r in self.reasons)

    @property
    def lines(self) -> tuple[str, ...]:
        """The verdict line, then the selection diagnostics line when there is one."""
        return (self.text, self.diagnostics) if self.diagnostics else (self.text,)

    @property
    def significant(self) -> bool | None:
        """True / False, or None when the edge is not measurable."""
        return None if self.outcome == "not measurable" else self.outcome == "significant"

    @classmethod
    def from_fields(cls, doc: MetricsDocument) -> EdgeVerdict | None:
        """The verdict a metrics.json document states (:func:`verdict_fields`); None when it states none."""
        if doc.verdict_outcome is None:
            return None
        return cls(
            doc.verdict_outcome,
            tuple(doc.verdict_figures),
            tuple(doc.verdict_reasons),
            doc.verdict_diagnostics or "",
        )


def verdict_fields(verdict: EdgeVerdict | None) -> dict[str, Any]:
    """The metrics.json keys of a verdict: ``verdict`` (the line), ``verdict_outcome``,
    ``verdict_figures``, ``verdict_reasons`` and ``verdict_diagnostics`` (null and empty without one)."""
    if verdict is None:
        return {
            "verdict": None,
            "verdict_outcome": None,
            "verdict_figures": [],
            "verdict_reasons": [],
            "verdict_diagnostics": None,
        }
    return {
        "verdict": verdict.text,
        "verdict_outcome": verdict.outcome,
        "verdict_figures": list(verdict.figures),
        "verdict_reasons": list(verdict.reasons),
        "verdict_diagnostics": verdict.diagnostics or None,
    }


def prob_text(value: float) -> str:
    """A probability as shown: 3 decimals, or scientific below 0.001 (a p-value of 5e-4 is not 0.000)."""
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def significance_of(doc: MetricsDocument) -> float:
    """The level ``alpha`` a document was judged at (:data:`SIGNIFICANCE` when it records none)."""
    alpha = doc.significance
    return alpha if alpha is not None and 0.0 < alpha < 1.0 else SIGNIFICANCE


def judge(doc: MetricsDocument, strategy: str = "champion") -> EdgeVerdict | None:
    """The verdict on ``strategy`` from the document's out-of-sample test (see the module docstring);
    None when the document tests another strategy or none."""
    oos = doc.oos_test
    if oos is None or oos.strategy != strategy:
        return None
    alpha = significance_of(doc)
    diagnostics = diagnostics_line(doc)
    looks = oos.looks or 1
    looks_text = f"{looks} look{'s' if looks != 1 else ''} counted"
    sessions = oos.num_sessions or 0
    if oos.held_out is False:
        why = (
            f"the {doc.window} window is not held out (the run trained or selected on it): "
            "the out-of-sample test needs the test window"
        )
    elif sessions < MIN_OOS_SESSIONS:
        why = f"the held-out window has {sessions} sessions, the test needs at least {MIN_OOS_SESSIONS}"
    else:
        why = oos.reason or None
    if why is not None:
        return EdgeVerdict("not measurable", (why,), (), diagnostics)
    bench = oos.benchmark
    excess = oos.excess.get(bench) if bench is not None else None
    psr = oos.psr_after_looks
    p, mean = (excess.p_value_after_looks, excess.mean_per_day) if excess is not None else (None, None)
    if psr is None or p is None or mean is None:
        missing = "the PSR" if psr is None else f"the test against {bench}"
        return EdgeVerdict("not measurable", (f"{missing} is undefined",), (), diagnostics)
    figures = (
        f"PSR {prob_text(psr)}",
        f"excess over {bench} {100 * mean:+.2f}%/day (p {prob_text(p)})",
        looks_text,
        f"level {alpha:g}",
    )
    reasons = (oos.looks_note,) if oos.looks_note else ()
    significant = psr >= 1.0 - alpha and p <= alpha
    return EdgeVerdict("significant" if significant else "not significant", figures, reasons, diagnostics)


def diagnostics_line(doc: MetricsDocument) -> str:
    """One line on the tournament's choice on the validation window: Hansen's SPA p-value against the
    benchmark, the champion's validation DSR with the effective trials, and the PBO."""
    sel = doc.selection
    pbo = doc.pbo
    pbo_text = f"PBO {pbo:.2f} (ranking among pods)" if pbo is not None else "PBO n/a"
    if sel is None or not sel.num_trials:
        return f"selection diagnostics n/a (no validation returns of the trials); {pbo_text}"
    tried = sel.num_trials
    spa, reps = sel.spa_p_value, sel.spa_replications
    # arch's SPA p-value is a share of replications: 0 means below one replication's weight.
    spa_p = f"< {1 / reps:g}" if spa == 0.0 and reps else prob_text(spa) if spa is not None else None
    spa_text = f"SPA p {spa_p} vs {sel.spa_benchmark}" if spa_p is not None else "SPA n/a"
    dsr, eff = sel.valid_dsr, sel.effective_trials
    dsr_text = f"validation DSR {prob_text(dsr)}" if dsr is not None else "validation DSR n/a"
    return (
        f"selection on the validation window: {spa_text}, {dsr_text} ({eff} effective of {tried} "
        f"trial{'s' if tried != 1 else ''}), {pbo_text}"
    )


def stated_verdict(doc: MetricsDocument) -> EdgeVerdict | None:
    """The verdict a metrics document states; for a document that carries an out-of-sample test but no
    stored verdict, :func:`judge` of its tested strategy; otherwise None.

    A document without an ``oos_test`` key was written before the verdict was the out-of-sample test:
    the verdict it stored rests on other statistics, so it is not shown as this one (backtesting the
    run again writes the current verdict)."""
    if not doc.states("oos_test"):
        return None
    stated = EdgeVerdict.from_fields(doc)
    if stated is not None or doc.states("verdict_outcome"):
        return stated
    oos = doc.oos_test
    if oos is None or oos.strategy is None:
        return None
    return judge(doc, oos.strategy)
