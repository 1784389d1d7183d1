"""The gate: does a challenger replace the policy in charge? One home for the decision, which the
nightly retrain (``app.nightly.pipeline``) and a walk-forward's folds (``app.walkforward.judging``)
both call.

Inputs, typed: the rule (:class:`GateRule`, from the ``[gate]`` section, the one home of the promotion
rule's settings: which rule, fitness, margin, the level), the scores of challenger and incumbent on the gate
window (:class:`Evaluation`, what ``app.nightly.steps.score_step`` measures) and the incumbent
(:class:`app.champion.Champion`, or None before the first promotion). Output: :class:`GateResult`, a
frozen model holding the rule that decided, the fitnesses, the margin, the significance level, the
out-of-sample test, the strategy metrics, the promote flag and the reason in one line. The registry's decision row and a
walk-forward's ``fold.json`` store it as it is.

- :func:`decide`: the promotion rule. Promote only if the challenger's fitness beats the incumbent's
  by ``margin`` AND its out-of-sample verdict on the gate window is "edge significant out of sample"
  (``backtests.verdict``: the rule of ``podracer backtest``, at the gate's level, after every earlier
  look at an overlapping window of the same market); with no incumbent, the first challenger needs
  the same significant edge.
- :func:`judge_challenger`: the rule applied to the scores: the :class:`GateResult`.

``[gate] rule`` says which rule decides: ``"book"`` (the default) the shadow book's anytime-valid rule
(``app.book_rule``; its settings :func:`shadow_settings`), whose result carries these same
figures of tonight's challenger; ``"window"`` :func:`decide`; ``"always"`` every challenger takes over
(a walk-forward's folds).

Imports nothing above it in the app (``app.champion``, ``app.book_settings``, and the config's types
only for annotations): pydantic, the standard library and ``backtests``' torch-free verdict and
metrics models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.book_settings import GATE_KNOBS, ShadowSettings
from app.champion import Champion
from backtests.metrics_model import OosTest, StrategyMetrics
from backtests.verdict import EdgeVerdict

if TYPE_CHECKING:  # the sections' types only: the registry's readers (status) load no torch
    from app.config import Config
    from app.config_sections import BacktestConfig, GateConfig, TournamentConfig

#: Which rule decides (``[gate] rule``): the shadow book, the fixed window, or every challenger.
RuleName = Literal["book", "window", "always"]
#: The keys of a walk-forward fold record's ``gate.figures`` (fold.json files written before the gate
#: held them at its top level).
_OLD_FIGURES = (
    "challenger_fitness",
    "incumbent_fitness",
    "margin",
    "significance_level",
    "edge",
    "edge_outcome",
    "looks",
)


def finite(value: float | None) -> float | None:
    """``value`` as a float, or None when it is missing, NaN or infinite (an undefined score)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class GateRule(BaseModel):
    """The rule's settings: which rule decides, the fitness compared, the margin and the level."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: RuleName = "book"
    fitness: str = "sharpe"
    margin: float = 0.1
    significance_level: float = 0.05

    @classmethod
    def of(cls, gate: GateConfig, tournament: TournamentConfig, backtest: BacktestConfig) -> Self:
        """The rule of a config: ``[gate] rule``, ``fitness`` (else ``[tournament] fitness``),
        ``margin``, ``level`` (else ``[backtest] significance_level``)."""
        return cls(
            rule=gate.rule,
            fitness=gate.fitness or tournament.fitness,
            margin=gate.margin,
            significance_level=float(gate.level if gate.level is not None else backtest.significance_level),
        )

    @classmethod
    def of_config(cls, config: Config) -> Self:
        """:meth:`of` the sections of an ``app.config.Config``: the one reading of ``[gate]`` that the
        nightly retrain and a walk-forward share."""
        return cls.of(config.gate, config.tournament, config.backtest)


def shadow_settings(config: Config, **knobs: Any) -> ShadowSettings:
    """The shadow book's settings of a config, the one reading the nightly retrain and a walk-forward
    share: ``[gate]``'s knobs at the gate's level (:meth:`GateRule.of_config`: ``[gate] level``, else
    ``[backtest] significance_level``), demotion at the same level; ``knobs`` (a walk-forward's
    ``per_block``) as given."""
    read = {name: getattr(config.gate, name) for name in GATE_KNOBS}
    return ShadowSettings.of_level(GateRule.of_config(config).significance_level, **{**read, **knobs})


@dataclass(frozen=True)
class Evaluation:
    """Challenger and incumbent scored on the same gate window, and the challenger's out-of-sample
    test there (the gate's significance check)."""

    fitness: str  # "sharpe", "return" or "calmar"
    window: tuple[str, str]
    challenger: Mapping[str, Any]  # metrics (StrategyMetrics keys), incl. "fitness"
    champion: Mapping[str, Any] | None  # the incumbent's; None when there is none yet
    edge: EdgeVerdict | None  # the challenger's verdict (backtests.verdict), None without a test
    test: OosTest | None = None  # its metrics.json "oos_test" block (None without one)


@dataclass(frozen=True)
class PromotionDecision:
    """The decision rule's answer."""

    promote: bool
    reason: str


class GateResult(BaseModel):
    """The gate's answer and every figure it rests on (the registry row's ``scores``, fold.json's
    ``gate``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    promote: bool = Field(False, description="the challenger takes over")
    reason: str | None = Field(None, description="why, in one line")
    rule: RuleName | None = Field(None, description="the rule that decided (null: recorded before the tag)")
    fitness: str | None = Field(None, description="the fitness compared")
    window: tuple[str, str] | None = Field(None, description="the gate window's first and last date")
    challenger_fitness: float | None = Field(None, description="the challenger's fitness (null: undefined)")
    incumbent_fitness: float | None = Field(None, description="the incumbent's (null: undefined or none)")
    margin: float | None = Field(None, description="what the challenger must beat it by")
    significance_level: float | None = Field(None, description="the gate's significance level")
    edge: str | None = Field(None, description="the challenger's out-of-sample verdict line")
    edge_outcome: str | None = Field(None, description="significant, not significant or not measurable")
    looks: int | None = Field(None, description="the looks counted at the window (null: no test)")
    psr_after_looks: float | None = Field(None, description="the challenger's PSR after the looks (its DSR)")
    oos_test: OosTest | None = Field(None, description="the challenger's out-of-sample test there")
    challenger: StrategyMetrics = Field(default_factory=StrategyMetrics, description="its figures there")
    incumbent: StrategyMetrics | None = Field(None, description="the incumbent's (null: none yet)")

    @model_validator(mode="before")
    @classmethod
    def _lift_figures(cls, data: Any) -> Any:
        """A fold.json gate written with its figures in a ``figures`` block reads at the top level."""
        if isinstance(data, Mapping) and isinstance(data.get("figures"), Mapping):
            data = dict(data)
            figures = data.pop("figures")
            for key in _OLD_FIGURES:
                data.setdefault(key, figures.get(key))
        return data

    @property
    def num_trials(self) -> int:
        """The looks counted (the DSR's trials), at least 1."""
        return self.looks or 1


def decide(
    challenger_fitness: float | None,
    champion_fitness: float | None,
    challenger_edge: EdgeVerdict | None,
    *,
    has_champion: bool,
    margin: float,
    fitness: str = "sharpe",
) -> PromotionDecision:
    """Promote iff the challenger beats the champion by ``margin`` AND ``challenger_edge``, its
    out-of-sample verdict on the gate window, is "significant".

    Undefined numbers never promote: a challenger whose fitness is undefined (a flat equity curve, too
    few days) or whose edge is not measurable is rejected. A champion whose fitness is undefined
    counts as beaten. With no champion yet the challenger still needs a significant edge (until then
    nothing is in charge: paper trading and a walk-forward's account hold ``[gate] before_champion``).
    """
    ch, champ = finite(challenger_fitness), finite(champion_fitness)
    significant = challenger_edge is not None and challenger_edge.outcome == "significant"
    edge = challenger_edge.text if challenger_edge is not None else "no out-of-sample test"
    if not has_champion:
        if ch is None:
            return PromotionDecision(False, f"no champion yet, but the challenger's {fitness} is undefined")
        if not significant:
            return PromotionDecision(False, f"no champion yet, but the challenger's {edge}")
        return PromotionDecision(True, f"no champion yet: the challenger's {edge}")
    if ch is None:
        return PromotionDecision(False, f"challenger's {fitness} is undefined on the evaluation window")
    if champ is not None and ch < champ + margin:
        return PromotionDecision(
            False,
            f"challenger {fitness} {ch:.4f} does not beat champion {champ:.4f} by the margin {margin:g}",
        )
    if not significant:
        return PromotionDecision(False, f"challenger's {edge}")
    against = "an undefined champion score" if champ is None else f"champion {champ:.4f}"
    return PromotionDecision(
        True, f"challenger {fitness} {ch:.4f} beats {against} by >= {margin:g}; its {edge}"
    )


def overlap_note(champion: Champion | None, eval_start: str) -> str:
    """A note for the reason when the incumbent was selected on part of the gate window.

    Its score there is then optimistic. That only makes promotion harder, so the gate decides anyway
    and says so.
    """
    if champion is not None and champion.selection_end and champion.selection_end >= eval_start:
        return f" (note: the champion was selected on data up to {champion.selection_end})"
    return ""


def judge_challenger(
    rule: GateRule,
    scores: Evaluation,
    incumbent: Champion | None,
    *,
    window: tuple[str, str] | None = None,
) -> GateResult:
    """The gate's answer for ``scores`` (challenger and ``incumbent`` on the gate ``window``, default
    ``scores.window``): :func:`decide` by ``rule`` (tagged ``"window"``), or with ``rule.rule =
    "always"`` the challenger takes over whatever its figures. The book's decision is not taken here
    (``app.nightly.shadow``, ``app.walkforward.book``): its callers tag these figures with theirs."""
    window = tuple(window or scores.window)  # type: ignore[assignment]
    ch_fit = finite(scores.challenger.get("fitness"))
    inc_fit = finite(scores.champion.get("fitness")) if scores.champion is not None else None
    edge, test = scores.edge, scores.test
    decided_by: RuleName = "always" if rule.rule == "always" else "window"
    if decided_by == "always":
        promote, reason = True, "[gate] rule = always: the challenger takes over"
    else:
        promotion = decide(
            ch_fit,
            inc_fit,
            edge,
            has_champion=incumbent is not None,
            margin=rule.margin,
            fitness=rule.fitness,
        )
        promote, reason = promotion.promote, promotion.reason + overlap_note(incumbent, window[0])
    return GateResult(
        promote=promote,
        reason=reason,
        rule=decided_by,
        fitness=rule.fitness,
        window=window,
        challenger_fitness=ch_fit,
        incumbent_fitness=inc_fit,
        margin=rule.margin,
        significance_level=rule.significance_level,
        edge=edge.text if edge is not None else None,
        edge_outcome=edge.outcome if edge is not None else None,
        looks=test.looks if test is not None else None,
        psr_after_looks=test.psr_after_looks if test is not None else None,
        oos_test=test,
        challenger=StrategyMetrics.model_validate(dict(scores.challenger)),
        incumbent=StrategyMetrics.model_validate(dict(scores.champion))
        if scores.champion is not None
        else None,
    )
