"""What a backtest's figures may claim: the plain-words verdict on the selected strategy's edge, the
line of selection diagnostics after it, and the shortest window whose annualized figures are reported.

The one home of these rules. ``backtests.report`` computes the figures (``backtests.oos_test``,
``backtests.snooping``), judges once and writes the verdict into metrics.json (:func:`verdict_fields`);
the CLI summary, ``podracer backtest --json``, the dashboard and the nightly gate use what the document
says (:func:`stated_verdict`) or this same rule (:func:`judge`). Every function reads the document as
its model (:class:`backtests.metrics_model.MetricsDocument`). No torch, arch or scipy (the standard
library and the model): the dashboard and the CLI import this without loading them.

The rule (:func:`judge`), on the out-of-sample test of the selected strategy on its held-out window
(metrics.json ``oos_test``), at the significance level ``a`` (``[backtest] significance_level``,
metrics.json ``significance_level``):

- "edge significant out of sample": the test of its **alpha** over the benchmark (its daily returns
  less beta times buy-and-hold's: ``backtests.oos_test.alpha_test``), p-value after the looks (Sidak)
  at or below ``a``. The PSR after the looks is shown, not required: a long-only strategy that loses
  less than a falling market has an edge although its Sharpe ratio is negative, and one levered to a
  rising market beats buy-and-hold's mean without one;
- "edge not significant out of sample": it falls short, or the strategy prefers no asset
  (metrics.json ``oos_test.prefers_no_asset``: the zero model, ``backtests.engine.prefers_no_asset``),
  whatever its alpha: its book is equal weight whatever it observes, so its excess is equal weight's,
  a baseline's, and the line says so after its figures. Every such line states what the window
  could have seen: the **minimum detectable edge**, the daily alpha the test finds with 80% power at
  the window's length, its alpha's HAC standard error and the per-look level
  (:func:`minimum_detectable_edge`), with its annualized information ratio;
- "edge not measurable": the window is not held out, has fewer than :data:`MIN_OOS_SESSIONS`
  sessions, or a figure is undefined (a strategy that stayed in cash), with why. A strategy whose
  daily returns equal the benchmark's on every session (an account that never left it) has no
  excess to test and reads "not significant", not "not measurable".

A document written before the alpha test (no ``alpha_p_value_after_looks``) is judged by the rule it
was written under: the PSR after the looks at or above ``1 - a`` AND the mean excess's p-value after
the looks at or below ``a``.

A report computed on the window a selection ranked on (metrics.json ``window`` ``"valid"``: a
walk-forward gate that reads its fold's validation window), or one a gate decided on (``role``
``"selection"``: the nightly gate's), says "on the selection window" instead of "out of sample".

**Looks counted when read.** The verdict is stated with the looks counted NOW: :func:`restate` takes
the looks the ledger holds today at an overlapping window of the same market (:class:`LooksNow`,
``backtests.looks.looks_now``) and recomputes the two figures the looks change (the DSR's hurdle over
every look's Sharpe ratio, Sidak over ``K``) from what the document keeps (the p-value and the
returns' moments), so a run judged first among many does not keep its first count forever. The
figures then say "N looks counted now (K when first judged)".

The selection diagnostics (SPA p-value, validation DSR with the effective trials, PBO; metrics.json
``selection`` and ``pbo``) describe the tournament's choice on the validation window: they follow the
verdict on a line of their own and do not change it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, get_args

from backtests.metrics_model import ExcessFigures, MetricsDocument, OosTest, Outcome

#: The default significance level of the out-of-sample test (``[backtest] significance_level``): a 5% chance of calling
#: a strategy with no edge significant.
SIGNIFICANCE_LEVEL = 0.05
#: Fewest held-out sessions the out-of-sample test is read on (two months of trading days): below it
#: the benchmark test's size under a true null leaves [2.5%, 7.5%] at the 5% level for skewed and
#: fat-tailed daily excess, at it the alpha test's stays in it (``benchmarks/verdict_size.py``).
MIN_OOS_SESSIONS = 40
#: Annualized compounding figures are only reported for windows of at least this many sessions (a
#: quarter): (1 + r)^(252 / n) over 12 sessions turns +33% into +40,000%/yr, a number that reads as a
#: broken product. Below it ``annual_return`` and ``calmar_ratio`` are null and the period return stands.
ANNUALIZED_MIN_SESSIONS = 63
#: Metrics nulled below ANNUALIZED_MIN_SESSIONS. Sharpe, Sortino and volatility scale by sqrt(252) and
#: do not compound, so they stay (the PSR says how much a short window's Sharpe is worth).
ANNUALIZED_KEYS: tuple[str, ...] = ("annual_return", "calmar_ratio", "alpha")

OUTCOMES: tuple[str, ...] = get_args(Outcome)


@dataclass(frozen=True)
class EdgeVerdict:
    """The verdict on one strategy: its outcome, the figures it rests on, caveats, and the line of
    selection diagnostics shown after it."""

    outcome: Outcome
    figures: tuple[str, ...]  # e.g. ("PSR 0.998", "excess over buy_and_hold +0.41%/day (p 0.001)", ...)
    reasons: tuple[str, ...] = ()  # caveats after the figures, e.g. why it is not measurable
    diagnostics: str = ""  # "selection (validation window, 102 trials): SPA p 0.004, ..."
    scope: str = "out of sample"  # or "on the selection window" (see the module docstring)

    @property
    def headline(self) -> str:
        """``"edge significant out of sample"``, ``"edge not significant out of sample"`` (or ``"... on
        the selection window"``) or ``"edge not measurable"``."""
        return (
            "edge not measurable" if self.outcome == "not measurable" else f"edge {self.outcome} {self.scope}"
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
            scope_of(doc),
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


def prob_text(value: float, bound: bool = False) -> str:
    """A probability as shown: 3 decimals, or scientific below 0.001 (a p-value of 5e-4 is not 0.000);
    ``bound``: an upper bound at a resolution limit, shown ``"< x"``."""
    text = f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"
    return f"< {text}" if bound else text


def scope_of(doc: MetricsDocument) -> str:
    """``"on the selection window"`` for a report on the window a selection ranked on or a gate
    decided on (``role`` ``"selection"``), else ``"out of sample"``."""
    selected = doc.window == SELECTION_WINDOW or doc.role == SELECTION_ROLE
    return "on the selection window" if selected else "out of sample"


#: The metrics.json ``role`` of a report whose window a gate decided on.
SELECTION_ROLE = "selection"
#: The power at which the minimum detectable edge is stated.
DETECTION_POWER = 0.8


def minimum_detectable_edge(
    standard_error: float, level: float, looks: int = 1, power: float = DETECTION_POWER
) -> float:
    """The true mean daily edge a one-sided test at the per-look level of ``looks`` looks at ``level``
    (``1 - (1 - level)^(1/K)``) rejects with probability ``power``, for an estimate with
    ``standard_error``: ``(z_(1 - level_K) + z_power) * standard_error`` (normal approximation)."""
    per_look = -math.expm1(math.log1p(-level) / max(1, int(looks)))
    ppf = NormalDist().inv_cdf
    return (ppf(1.0 - per_look) + ppf(power)) * standard_error


#: The metrics.json ``window`` of a report on the window the pods were ranked on.
SELECTION_WINDOW = "valid"
_EULER_GAMMA = 0.5772156649015329


def sidak(p_value: float | None, looks: int) -> float | None:
    """``1 - (1 - p)^K``: the chance that at least one of ``K`` independent looks gives a p-value at or
    below ``p`` under the null (None stays None). expm1/log1p: 1e-12 over 500 looks is 5e-10, not 0."""
    if p_value is None:
        return None
    return float(-math.expm1(max(1, int(looks)) * math.log1p(-min(float(p_value), 1.0 - 1e-16))))


def expected_max_sharpe(num_trials: int, sharpe_variance: float) -> float:
    """Expected maximum per-period Sharpe ratio of ``num_trials`` skill-less trials whose Sharpe ratios
    have variance ``sharpe_variance`` (Bailey and Lopez de Prado; 0 for one trial)."""
    if num_trials <= 1:
        return 0.0
    n, ppf = float(num_trials), NormalDist().inv_cdf
    z1, z2 = ppf(1.0 - 1.0 / n), ppf(1.0 - 1.0 / (n * math.e))
    return math.sqrt(sharpe_variance) * ((1.0 - _EULER_GAMMA) * z1 + _EULER_GAMMA * z2)


@dataclass(frozen=True)
class LooksHurdle:
    """What the looks make of the Sharpe test: ``K`` looks, their per-day Sharpe ratios' variance,
    the hurdle ``E[max SR]`` of ``K`` skill-less looks, and a note when the null variance stood in."""

    looks: int
    variance: float | None
    hurdle: float
    note: str | None = None


def looks_hurdle(sharpes: Sequence[float | None], num_sessions: int) -> LooksHurdle:
    """The hurdle for ``sharpes``: the per-day Sharpe ratios of every look counted at an overlapping
    window of the same market (``K = len(sharpes)``, at least 1).

    One look: no hurdle (the plain PSR). ``K >= 2``: the variance (ddof=1) of the defined Sharpe ratios;
    when fewer than two are defined or they do not spread (the same strategy re-trained identically),
    the sampling variance of a Sharpe estimate under the null, ``1 / (T - 1)``, stands in.
    """
    looks = max(1, len(sharpes))
    if looks == 1:
        return LooksHurdle(1, None, 0.0)
    defined = [float(s) for s in sharpes if s is not None and math.isfinite(float(s))]
    variance = _variance(defined) if len(defined) >= 2 else None
    note = None
    if variance is None or variance <= 0.0:
        variance = 1.0 / (num_sessions - 1) if num_sessions > 1 else None
        note = f"{looks} looks without a spread of Sharpe ratios: null variance 1/(T-1) used"
    if variance is None:
        return LooksHurdle(looks, None, math.nan, note)
    return LooksHurdle(looks, variance, expected_max_sharpe(looks, variance), note)


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def psr_from_moments(
    sharpe: float, num_obs: int, skew: float, kurtosis: float, hurdle: float = 0.0
) -> float | None:
    """P(true per-day Sharpe > ``hurdle``) from the per-day Sharpe ratio, the number of returns and
    their skewness and (non-excess) kurtosis (Bailey and Lopez de Prado's PSR); None when undefined."""
    denom = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe**2
    if num_obs < 2 or denom <= 0 or not all(map(math.isfinite, (sharpe, skew, kurtosis, hurdle))):
        return None
    return NormalDist().cdf((sharpe - hurdle) * math.sqrt(num_obs - 1.0) / math.sqrt(denom))


@dataclass(frozen=True)
class LooksNow:
    """The looks the ledger counts today at a look's window (``backtests.looks.looks_now``): every
    overlapping look's per-day Sharpe ratio (this one's included), and how many were counted when this
    look was first judged."""

    sharpes: tuple[float | None, ...]
    first: int
    lost: bool = False  # a lower bound, "looks unknown (at least N ...)": backtests.looks_memory

    @property
    def count(self) -> int:
        """``K`` now."""
        return max(1, len(self.sharpes))


def restate(doc: MetricsDocument, now: LooksNow | None) -> MetricsDocument:
    """``doc`` with its ``oos_test`` restated for the looks counted ``now`` (the hurdle, the PSR after
    the looks and Sidak's p-values) and its verdict fields rejudged; ``doc`` itself when ``now`` is
    None or it has no out-of-sample test. Keeps ``looks_first`` (the count when first judged)."""
    oos = doc.oos_test
    if now is None or oos is None or oos.strategy is None:
        return doc
    sessions = oos.num_sessions or 0
    hurdle = looks_hurdle(list(now.sharpes), sessions)
    sharpe, skew, kurt = oos.sharpe_per_day, oos.skewness, oos.kurtosis
    psr = None
    if sharpe is not None and skew is not None and kurt is not None and math.isfinite(hurdle.hurdle):
        psr = psr_from_moments(sharpe, sessions, skew, kurt, hurdle.hurdle)
    elif hurdle.looks == (oos.looks or 1):
        psr = oos.psr_after_looks  # an older document: its own count stands
    excess = {
        name: block.model_copy(
            update={
                "p_value_after_looks": sidak(block.p_value, hurdle.looks),
                "alpha_p_value_after_looks": sidak(block.alpha_p_value, hurdle.looks),
            }
        )
        for name, block in oos.excess.items()
    }
    restated = oos.model_copy(
        update={
            "looks": hurdle.looks,
            "looks_first": int(now.first),
            "looks_unknown": True if now.lost else oos.looks_unknown,
            "looks_sharpe_variance": hurdle.variance if hurdle.looks > 1 else None,
            "looks_note": hurdle.note,
            "sharpe_hurdle": hurdle.hurdle if math.isfinite(hurdle.hurdle) else None,
            "psr_after_looks": psr,
            "excess": excess,
        }
    )
    out = doc.model_copy(update={"oos_test": restated})
    return out.model_copy(update=verdict_fields(judge(out, oos.strategy)))


def looks_unknown(doc: MetricsDocument) -> MetricsDocument:
    """``doc`` with its ``oos_test`` marked ``looks_unknown`` and its verdict rejudged: the ledger that
    counted its look is gone, so the looks since cannot be counted (the count shown, the one when it
    was judged, is a lower bound: "at least N")."""
    oos = doc.oos_test
    if oos is None or oos.strategy is None:
        return doc
    out = doc.model_copy(update={"oos_test": oos.model_copy(update={"looks_unknown": True})})
    return out.model_copy(update=verdict_fields(judge(out, oos.strategy)))


def significance_level_of(doc: MetricsDocument) -> float:
    """The significance level a document was judged at (:data:`SIGNIFICANCE_LEVEL` when it records
    none; files written before the key was ``significance_level`` are read by the model)."""
    level = doc.significance_level
    return level if level is not None and 0.0 < level < 1.0 else SIGNIFICANCE_LEVEL


def judge(doc: MetricsDocument, strategy: str = "champion") -> EdgeVerdict | None:
    """The verdict on ``strategy`` from the document's out-of-sample test (see the module docstring);
    None when the document tests another strategy or none."""
    oos = doc.oos_test
    if oos is None or oos.strategy != strategy:
        return None
    level = significance_level_of(doc)
    diagnostics = diagnostics_line(doc)
    looks = oos.looks or 1
    first = oos.looks_first
    looks_text = f"{looks} look{'s' if looks != 1 else ''} counted"
    if oos.looks_unknown:
        looks_text = f"looks unknown (at least {looks}: a looks ledger that counted them is gone)"
    elif first is not None:
        looks_text += " now" + (f" ({first} when first judged)" if first != looks else "")
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
    scope = scope_of(doc)
    held = _held_the_benchmark(oos) if why is not None and oos.held_out is not False else None
    if held is not None and sessions >= MIN_OOS_SESSIONS:  # no excess: "no edge", not "cannot tell"
        return EdgeVerdict("not significant", (held, looks_text), (), diagnostics, scope)
    if why is not None:
        figures = (why, looks_text) if first is not None or oos.looks_unknown else (why,)
        return EdgeVerdict("not measurable", figures, (), diagnostics, scope)
    bench = oos.benchmark
    excess = (oos.excess.get(bench) if bench is not None else None) or ExcessFigures()
    if excess.alpha_p_value is not None or excess.beta is not None:
        return _no_preference_check(
            oos,
            _one_path_check(
                doc,
                strategy,
                _judge_alpha(
                    oos.psr_after_looks, excess, bench, looks, looks_text, level, oos, diagnostics, scope
                ),
            ),
        )
    psr, p, mean = oos.psr_after_looks, excess.p_value_after_looks, excess.mean_per_day
    if psr is None or p is None or mean is None:
        missing = "the PSR" if psr is None else f"the test against {bench}"
        return EdgeVerdict("not measurable", (f"{missing} is undefined",), (), diagnostics, scope)
    bound = excess.p_value_bound is True
    figures = (
        f"PSR {prob_text(psr)}",
        f"excess over {bench} {100 * mean:+.2f}%/day (p {prob_text(p, bound)})",
        looks_text,
        f"level {level:g}",
    )
    reasons = (oos.looks_note,) if oos.looks_note else ()
    significant = psr >= 1.0 - level and p <= level
    outcome: Outcome = "significant" if significant else "not significant"
    return _no_preference_check(
        oos, _one_path_check(doc, strategy, EdgeVerdict(outcome, figures, reasons, diagnostics, scope))
    )


#: Account sizes within this factor of the report's own are "nearby" on the capacity curve: one step
#: of ``backtests.capacity.CAPITAL_LEVELS`` either side.
NEARBY_CAPITAL_FACTOR = 10.0


def sign_changes(doc: MetricsDocument, strategy: str) -> str | None:
    """Why the result hangs on one path, or None: the strategy's period return at the report's account
    size and at a nearby size of its capacity curve (within :data:`NEARBY_CAPITAL_FACTOR`) have
    opposite signs. A policy that re-decides from its own positions can follow another path at a size
    the market would not notice; a verdict read off one such path is not called significant."""
    rows = [r for r in doc.capacity or [] if r.cum_returns_final is not None]
    own = doc.strategies.get(strategy)
    base, ret = doc.initial_value, own.cum_returns_final if own is not None else None
    if not rows or base is None or base <= 0 or ret is None or ret == 0:
        return None
    near = [r for r in rows if base / NEARBY_CAPITAL_FACTOR <= r.capital <= base * NEARBY_CAPITAL_FACTOR]
    flipped = [r for r in near if r.cum_returns_final * ret < 0]
    if not flipped:
        return None
    sizes = ", ".join(f"${r.capital:,.0f}: {100 * r.cum_returns_final:+.1f}%" for r in flipped)
    return (
        f"its return ({100 * ret:+.1f}% at ${base:,.0f}) changes sign at nearby account sizes ({sizes}): "
        "a result of one path, not called significant"
    )


def _held_the_benchmark(oos: OosTest) -> str | None:
    """The figure of a strategy whose daily returns equal its benchmark's (zero excess), else None."""
    bench = oos.benchmark
    excess = oos.excess.get(bench) if bench is not None else None
    mean = excess.mean_per_day if excess is not None and excess.p_value is None else None
    if mean is None or abs(mean) > 1e-12:
        return None
    return f"no excess over {bench}: its daily returns equal {bench}'s on every session (it held {bench})"


def _no_preference_check(oos: OosTest, verdict: EdgeVerdict) -> EdgeVerdict:
    """``verdict``, with a "significant" one turned "not significant" when the strategy prefers no
    asset (``oos_test.prefers_no_asset``): its book is equal weight whatever it observes, so its
    excess is equal weight's over the benchmark, a baseline's and not an edge it found."""
    if not oos.prefers_no_asset or verdict.outcome != "significant":
        return verdict
    why = (
        f"it prefers no asset whatever it observes (the zero model: an equal-weight book), so its excess "
        f"over {oos.benchmark} is equal weight's, a baseline's, not an edge it found"
    )
    return EdgeVerdict(
        "not significant", verdict.figures, (*verdict.reasons, why), verdict.diagnostics, verdict.scope
    )


def _one_path_check(doc: MetricsDocument, strategy: str, verdict: EdgeVerdict) -> EdgeVerdict:
    """``verdict``, with a "significant" one turned "not significant" when :func:`sign_changes` says so."""
    why = sign_changes(doc, strategy)
    if why is None:
        return verdict
    outcome: Outcome = "not significant" if verdict.outcome == "significant" else verdict.outcome
    return EdgeVerdict(outcome, verdict.figures, (*verdict.reasons, why), verdict.diagnostics, verdict.scope)


def _judge_alpha(
    psr: float | None,
    excess: ExcessFigures,
    bench: str | None,
    looks: int,
    looks_text: str,
    level: float,
    oos: Any,
    diagnostics: str,
    scope: str,
) -> EdgeVerdict:
    """The rule on the alpha (see the module docstring)."""
    p, alpha, beta = excess.alpha_p_value_after_looks, excess.alpha_per_day, excess.beta
    if p is None or alpha is None or beta is None:
        return EdgeVerdict(
            "not measurable", (f"the alpha over {bench} is undefined",), (), diagnostics, scope
        )
    bound = excess.alpha_p_value_bound is True
    figures = [f"alpha over {bench} {100 * alpha:+.2f}%/day (p {prob_text(p, bound)})", f"beta {beta:.2f}"]
    se, vol = excess.alpha_standard_error, excess.residual_volatility
    if se is not None and se > 0:
        mde = minimum_detectable_edge(se, level, looks)
        could = (
            f"could have seen {100 * mde:.2f}%/day"
            if mde >= 1e-4
            else f"could have seen {100 * mde:.1e}%/day"
        )
        if vol is not None and vol > 0:
            could += f" (IR {mde / vol * math.sqrt(252):.1f})"
        figures.append(f"{could} at {DETECTION_POWER:.0%} power")
    if psr is not None:
        figures.append(f"PSR {prob_text(psr)}")
    figures += [looks_text, f"level {level:g}"]
    reasons = (oos.looks_note,) if oos.looks_note else ()
    outcome: Outcome = "significant" if p <= level else "not significant"
    return EdgeVerdict(outcome, tuple(figures), reasons, diagnostics, scope)


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
