"""What a backtest's figures may claim: the plain-words verdict on the selected strategy's edge, and
the shortest window whose annualized figures are reported.

The one home of these rules. ``backtests.report`` judges once and writes the verdict into
metrics.json (:func:`verdict_fields`); the CLI summary and the dashboard show what the document
says (:func:`stated_verdict`), judging only a document written before the verdict was stored.
Standard library only: the dashboard and the CLI import this without loading torch.

The rule (:func:`judge`): the selected strategy's deflated Sharpe ratio (DSR) at or above
:data:`DSR_SIGNIFICANT`, with the probability of backtest overfitting (PBO) below :data:`PBO_MAX` or
not measured, reads "edge significant"; any other DSR "edge not significant"; no DSR "edge not
measurable", with why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

#: A DSR at or above this reads as a significant edge: a 5% chance the Sharpe ratio is luck once the
#: trials are counted (Bailey and Lopez de Prado, 2014).
DSR_SIGNIFICANT = 0.95
#: A PBO at or above this denies significance: the in-sample best pod ranks at or below the median
#: out of sample at least as often as not (Bailey, Borwein, Lopez de Prado and Zhu, 2015).
PBO_MAX = 0.5
#: Annualized compounding figures are only reported for windows of at least this many sessions (a
#: quarter): (1 + r)^(252 / n) over 12 sessions turns +33% into +40,000%/yr, a number that reads as a
#: broken product. Below it ``annual_return`` and ``calmar_ratio`` are null and the period return stands.
ANNUALIZED_MIN_SESSIONS = 63
#: Metrics nulled below ANNUALIZED_MIN_SESSIONS. Sharpe, Sortino and volatility scale by sqrt(252) and
#: do not compound, so they stay (the PSR/DSR say how much a short window's Sharpe is worth).
ANNUALIZED_KEYS: tuple[str, ...] = ("annual_return", "calmar_ratio")

Outcome = Literal["significant", "not significant", "not measurable"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)


@dataclass(frozen=True)
class Verdict:
    """The verdict on one strategy: its outcome, the figures it rests on and caveats, as shown."""

    outcome: Outcome
    figures: tuple[str, ...]  # e.g. ("DSR 0.003", "PBO 0.62")
    reasons: tuple[str, ...] = ()  # caveats after the figures, e.g. "Sharpe 0.50 below buy_and_hold's 0.93"

    @property
    def headline(self) -> str:
        """``"edge significant"``, ``"edge not significant"`` or ``"edge not measurable"``."""
        return f"edge {self.outcome}"

    @property
    def text(self) -> str:
        """The one line: ``"edge not significant: DSR 0.003, PBO 0.62"`` (then ``"; <reason>"`` each)."""
        return f"{self.headline}: {', '.join(self.figures)}" + "".join(f"; {r}" for r in self.reasons)

    @property
    def significant(self) -> bool | None:
        """True / False, or None when the edge is not measurable."""
        return None if self.outcome == "not measurable" else self.outcome == "significant"

    @classmethod
    def from_fields(cls, doc: Mapping[str, Any]) -> Verdict | None:
        """The verdict a metrics.json document states (:func:`verdict_fields`); None when it states none."""
        outcome, figures, reasons = (
            doc.get(k) for k in ("verdict_outcome", "verdict_figures", "verdict_reasons")
        )
        if outcome not in OUTCOMES or not _strings(figures) or not _strings(reasons):
            return None
        return cls(outcome, tuple(figures), tuple(reasons))


def verdict_fields(verdict: Verdict | None) -> dict[str, Any]:
    """The metrics.json keys of a verdict: ``verdict`` (the line), ``verdict_outcome``,
    ``verdict_figures`` and ``verdict_reasons`` (null and empty without a verdict)."""
    if verdict is None:
        return {"verdict": None, "verdict_outcome": None, "verdict_figures": [], "verdict_reasons": []}
    return {
        "verdict": verdict.text,
        "verdict_outcome": verdict.outcome,
        "verdict_figures": list(verdict.figures),
        "verdict_reasons": list(verdict.reasons),
    }


def _strings(value: Any) -> bool:
    return (
        isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value)
    )


def judge(doc: Mapping[str, Any], strategy: str = "champion") -> Verdict | None:
    """The verdict on ``strategy`` of a metrics document, from its DSR and the run's PBO; None when
    ``strategy`` is not in the document.

    The DSR tests a Sharpe ratio above zero skill; a long-only pod can clear it in a rising market
    while doing worse than simply holding the market, so a Sharpe ratio below the benchmark's is a
    reason shown after the figures.
    """
    strategies = doc.get("strategies") or {}
    row = strategies.get(strategy)
    if row is None:
        return None
    dsr, pbo = row.get("deflated_sharpe_ratio"), doc.get("pbo")
    pbo_text = f"PBO {pbo:.2f}" if pbo is not None else "PBO n/a"
    if dsr is None:
        why = doc.get("dsr_reason") or "the Sharpe ratio is undefined"
        return Verdict("not measurable", (f"DSR n/a ({why})", pbo_text))
    dsr_text = f"DSR {dsr:.3f}" if dsr >= 0.001 else f"DSR {dsr:.1e}"
    bench = strategies.get(doc.get("benchmark") or "") or {}
    mine, theirs = row.get("sharpe_ratio"), bench.get("sharpe_ratio")
    reasons = (
        (f"Sharpe {mine:.2f} below {doc['benchmark']}'s {theirs:.2f}",)
        if (mine is not None and theirs is not None and mine < theirs)
        else ()
    )
    significant = dsr >= DSR_SIGNIFICANT and (pbo is None or pbo < PBO_MAX)
    return Verdict("significant" if significant else "not significant", (dsr_text, pbo_text), reasons)


def stated_verdict(doc: Mapping[str, Any]) -> Verdict | None:
    """The verdict a metrics document states; for a document written before the verdict was
    stored, :func:`judge` of its selected strategy (the first of ``deflated``, else ``champion``),
    or None when that strategy has no DSR at all (a run from before the DSR)."""
    stated = Verdict.from_fields(doc)
    if stated is not None or "verdict_outcome" in doc:
        return stated
    selected = doc.get("deflated") or ["champion"]
    row = (doc.get("strategies") or {}).get(selected[0])
    if not isinstance(row, Mapping) or "deflated_sharpe_ratio" not in row:
        return None
    return judge(doc, selected[0])
