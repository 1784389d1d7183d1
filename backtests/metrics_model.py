"""``metrics.json``, the backtest report's figures, as a typed model: :class:`MetricsDocument`.

The one definition of the file's keys: ``backtests.report`` builds it, :func:`read_metrics` reads
it back (validated, one-line :class:`data.errors.ArtifactError` on a malformed file or an unknown
schema version), and every reader (``backtests.verdict``, the CLI, the dashboard, nightly,
walk-forward) takes the model, not a dict. The per-strategy metric keys (:data:`METRIC_KEYS`) and
docs/backtests.md's key tables (:func:`key_table`, checked by ``tests/test_docs_metrics_keys.py``)
come from the field definitions here. Sections are nested models; a new key is an optional field
with a description (files written before it existed still load).

Torch-free (pydantic only): the dashboard and the CLI import this without loading torch.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.artifact import Artifact, Figure

Outcome = Literal["significant", "not significant", "not measurable"]
Frequency = Literal["decision", "session"]


class MetricsSection(BaseModel):
    """A nested block of metrics.json: typed keys, unknown keys kept (a newer writer's additions)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class StrategyMetrics(MetricsSection):
    """One strategy's figures on the window (floats, or null where undefined)."""

    cum_returns_final: Figure = Field(None, description="cumulative (period) return over the window")
    annual_return: Figure = Field(
        None, description="compound annual growth rate (null under `annualized_min_sessions` sessions)"
    )
    annual_volatility: Figure = Field(None, description="annualized standard deviation of daily returns")
    sharpe_ratio: Figure = Field(None, description="annualized Sharpe ratio of daily returns (rf = 0)")
    sortino_ratio: Figure = Field(None, description="annualized Sortino ratio (downside deviation)")
    max_drawdown: Figure = Field(None, description="worst peak-to-trough loss (negative)")
    calmar_ratio: Figure = Field(
        None, description="annual return / |max drawdown| (null under `annualized_min_sessions` sessions)"
    )
    turnover: Figure = Field(None, description="traded notional / portfolio value, per day")
    costs_paid: Figure = Field(None, description="commission + slippage paid, a fraction of the initial cash")
    exposure: Figure = Field(None, description="mean summed absolute asset weight (1.0 = fully invested)")
    hit_rate: Figure = Field(None, description="winning days / days with a non-zero return")
    probabilistic_sharpe_ratio: Figure = Field(
        None, description="probability the Sharpe ratio is above zero, this window alone"
    )
    beta: Figure = Field(None, description="beta of its daily returns to buy-and-hold's (null without it)")
    alpha: Figure = Field(
        None, description="Jensen's alpha to buy-and-hold, annualized (null under `annualized_min_sessions`)"
    )
    information_ratio: Figure = Field(
        None, description="annualized information ratio of its daily excess returns over buy-and-hold"
    )

    def get(self, key: str) -> float | None:
        """The metric named ``key`` (a :data:`METRIC_KEYS` name; None for another)."""
        value = getattr(self, key, None) if key in METRIC_KEYS else None
        return value if isinstance(value, float) else None


#: Every per-strategy key of metrics.json, in display order (the one list: backtests.metrics, the
#: dashboard and the tests read it from here).
METRIC_KEYS: tuple[str, ...] = tuple(StrategyMetrics.model_fields)
#: The keys relative to buy-and-hold (null without it in the backtest).
RELATIVE_METRICS: tuple[str, ...] = ("beta", "alpha", "information_ratio")
#: The keys not computed by ``backtests.metrics.summary`` (the report adds them).
EXTRA_METRICS: tuple[str, ...] = ("probabilistic_sharpe_ratio", *RELATIVE_METRICS)
#: The keys ``backtests.metrics.summary`` returns, in display order.
SUMMARY_METRICS: tuple[str, ...] = tuple(k for k in METRIC_KEYS if k not in EXTRA_METRICS)


class ExcessFigures(MetricsSection):
    """The test of the selected strategy's mean daily excess return over one benchmark."""

    mean_per_day: Figure = Field(None, description="mean daily excess return")
    p_value: Figure = Field(None, description="one-sided p-value of this look alone")
    p_value_bound: bool | None = Field(
        None, description="the p-value is an upper bound at the bootstrap's resolution limit"
    )
    p_value_method: str | None = Field(None, description="how the p-value was computed")
    t_stat: Figure = Field(None, description="the excess mean's HAC t-statistic")
    replications: int | None = Field(None, description="bootstrap replications the adaptive test used")
    p_value_after_looks: Figure = Field(None, description="the p-value after the looks (Sidak)")
    block_length: Figure = Field(None, description="the stationary bootstrap's expected block length")
    beta: Figure = Field(None, description="OLS beta of the strategy's daily returns on the benchmark's")
    alpha_per_day: Figure = Field(
        None, description="mean daily alpha: the mean of the returns less beta times the benchmark's"
    )
    alpha_p_value: Figure = Field(
        None, description="one-sided p-value of the alpha (wild and m-out-of-n bootstraps) of this look alone"
    )
    alpha_p_value_bound: bool | None = Field(None, description="the alpha's p-value is an upper bound")
    alpha_p_value_method: str | None = Field(
        None,
        description="how the alpha's p-value was computed (the bootstraps, or a tail beyond their reach)",
    )
    alpha_t_stat: Figure = Field(None, description="the alpha's HAC t-statistic")
    alpha_p_value_after_looks: Figure = Field(None, description="the alpha's p-value after the looks (Sidak)")
    alpha_standard_error: Figure = Field(
        None, description="HAC standard error of the mean daily alpha (the minimum detectable edge's scale)"
    )
    residual_volatility: Figure = Field(
        None, description="daily standard deviation of the alpha series (the information ratio's scale)"
    )


class LookKey(MetricsSection):
    """``oos_test.look``: the look this test was recorded as in the looks ledger (``backtests.looks``),
    the key a reader finds its count by now."""

    run_id: str = Field(description="the run")
    strategy: str = Field(description="the strategy looked at")
    policy: str = Field("", description="digest of the judged policy's weights")
    market: str = Field(description="the market's identity")
    tickers: list[str] = Field(default_factory=list, description="the symbols traded, sorted")
    start: str = Field(description="the window's first session")
    end: str = Field(description="its last session")
    num_sessions: int = Field(0, description="its sessions")
    ledger: str = Field("", description="the identity of the looks ledger it was counted in")


class OosTest(MetricsSection):
    """``oos_test``: the selected strategy's out-of-sample test on the held-out window
    (``backtests.significance``); Sharpe ratios per day."""

    strategy: str | None = Field(None, description="the strategy tested (the selected one)")
    held_out: bool | None = Field(None, description="the window is the test window")
    num_sessions: int | None = Field(None, description="sessions of daily returns tested")
    sharpe_per_day: Figure = Field(None, description="its per-day Sharpe ratio")
    skewness: Figure = Field(
        None, description="skewness of its daily returns (the PSR restated for the looks counted when read)"
    )
    kurtosis: Figure = Field(None, description="(non-excess) kurtosis of its daily returns")
    psr: Figure = Field(None, description="PSR against 0, this look alone")
    looks: int | None = Field(None, description="K: the looks counted at this window of this market")
    looks_first: int | None = Field(
        None, description="K when first judged (set when the verdict is restated for the looks counted now)"
    )
    looks_sharpe_variance: Figure = Field(
        None, description="variance of the K looks' Sharpe ratios (null for one)"
    )
    looks_note: str | None = Field(None, description="why the null variance was used, when it was")
    looks_unknown: bool | None = Field(
        None,
        description="true when a looks ledger that counted some of its looks is gone (deleted, rebuilt, "
        "another home's): `looks` is then a lower bound",
    )
    sharpe_hurdle: Figure = Field(None, description="E[max SR] of K looks, per day")
    psr_after_looks: Figure = Field(None, description="the PSR against that hurdle (the DSR over K looks)")
    benchmark: str | None = Field(None, description="the benchmark the verdict requires")
    excess: dict[str, ExcessFigures] = Field(
        default_factory=dict,
        description="per benchmark (`buy_and_hold`, `equal_weight`, `linear`, `boosted`): its excess test",
    )
    test: str | None = Field(None, description="the test and the p-value formula, in words")
    max_replications: int | None = Field(None, description="the adaptive bootstrap's most replications")
    seed: int | None = Field(None, description="the bootstraps' seed")
    market: str | None = Field(None, description="the market's identity in the looks ledger")
    look: LookKey | None = Field(None, description="the look recorded for this test (null: none recorded)")
    reason: str | None = Field(None, description="why a figure is undefined; null otherwise")
    prefers_no_asset: bool | None = Field(
        None,
        description="true when the strategy prefers no asset whatever it observes (the zero model: an "
        "equal-weight book); its excess is then not stated as an edge (null: not recorded)",
    )


class SelectionDiagnostics(MetricsSection):
    """``selection``: the diagnostics of the tournament's choice on the validation window
    (``backtests.snooping``); Sharpe ratios per day."""

    window: str | None = Field(None, description='the window the pods were compared on ("valid")')
    num_trials: int | None = Field(None, description="columns of the validation returns")
    spa_p_value: Figure = Field(None, description="Hansen's SPA consistent p-value against the benchmark")
    spa_p_value_kind: str | None = Field(None, description='which SPA p-value ("consistent")')
    spa_benchmark: str | None = Field(None, description="the SPA's benchmark")
    spa_block_length: Figure = Field(None, description="the SPA bootstrap's block length")
    spa_replications: int | None = Field(None, description="SPA replications (1000)")
    effective_trials: int | None = Field(None, description="clusters of the validation returns")
    cluster_distance: Figure = Field(None, description="the clustering's cut (0.5)")
    trials_flat: int | None = Field(None, description="pods left out of the clustering (no dispersion)")
    valid_sharpe_per_day: Figure = Field(None, description="the champion's validation Sharpe ratio")
    valid_sharpe_hurdle: Figure = Field(None, description="E[max SR] over the effective trials")
    cluster_sharpe_variance: Figure = Field(None, description="variance of the clusters' Sharpe ratios")
    valid_dsr: Figure = Field(None, description="the champion's validation DSR over the effective trials")
    note: str | None = Field(None, description="null variance used, when it was")
    seed: int | None = Field(None, description="the bootstrap's seed")
    reason: str | None = Field(None, description="why there are no diagnostics")


class CapacityRow(MetricsSection):
    """``capacity[]``: the selected strategy replayed at one account size (``backtests.capacity``)."""

    capital: float = Field(description="the account size ($)")
    strategy: str | None = Field(None, description="the strategy replayed")
    sharpe_ratio: Figure = Field(None, description="its Sharpe ratio at that size, costs on")
    cum_returns_final: Figure = Field(None, description="its period return")
    alpha_per_day: Figure = Field(
        None, description="its mean daily alpha over the verdict's benchmark at that size (`oos_test.excess`)"
    )
    alpha_p_value: Figure = Field(None, description="that alpha's one-sided p-value (this look alone)")
    costs_paid: Figure = Field(None, description="its costs, a fraction of the initial cash")
    mean_participation: Figure = Field(None, description="its fills' mean share of the bar's volume")
    capped_share: Figure = Field(None, description="the share of its fills the volume cap limited")
    verdict_outcome: Outcome | None = Field(None, description="the verdict at that size")
    baselines: dict[str, Figure] = Field(default_factory=dict, description="the baselines' period returns")


CapacityRule = Literal["significant", "half_sharpe", "no_edge"]


class CostLevelFigures(MetricsSection):
    """``cost_sensitivity[].strategies.<name>``: one strategy's figures at one cost level."""

    sharpe_ratio: Figure = Field(None, description="its Sharpe ratio, net of the scaled costs")
    cum_returns_final: Figure = Field(None, description="its period return")


class CostLevelRow(MetricsSection):
    """``cost_sensitivity[]``: every strategy replayed at one multiple of the cost model
    (``backtests.capacity``)."""

    level: float = Field(description="the multiple of every cost term: fees, slippage, half-spread, impact")
    strategy: str | None = Field(None, description="the selected strategy")
    verdict_outcome: Outcome | None = Field(None, description="the verdict at that level")
    strategies: dict[str, CostLevelFigures] = Field(
        default_factory=dict, description="each strategy's figures, the baselines included"
    )


class ChampionSpan(MetricsSection):
    """One stretch of a walk-forward's account traded by one policy."""

    champion: str = Field(description="the fold run in charge, or `cash`")
    first: str = Field(description="its first session")
    last: str = Field(description="its last session")
    sessions: int = Field(0, description="sessions in charge")
    folds: list[int] = Field(default_factory=list, description="the folds it traded")


class WalkForwardSummary(MetricsSection):
    """``walkforward``: a walk-forward's stitched account (``app.walkforward``)."""

    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="the `[walkforward]` settings, with `[gate]`'s `rule` as `gate` and its `before_champion`",
    )
    num_folds: int = Field(0, description="folds completed")
    folds: list[dict[str, Any]] = Field(default_factory=list, description="one row per fold")
    champions: list[ChampionSpan] = Field(default_factory=list, description="who traded which sessions")


class MetricsDocument(Artifact):
    """``<run>/backtest/metrics.json`` (also what ``podracer backtest --json`` prints)."""

    FILE = "the metrics document"  # in messages without a path (the file is named by its writer)
    SCHEMA_VERSION = 1
    WRITE_SET_ONLY = True

    window: str | None = Field(
        None, description='the window backtested: "test", "valid", "full", "walkforward"'
    )
    start: str | None = Field(None, description="its first session (YYYY-MM-DD)")
    end: str | None = Field(None, description="its last session (YYYY-MM-DD)")
    annualization: int | float | None = Field(None, description="periods per year of the daily returns (252)")
    period: str | None = Field(None, description='the returns\' period ("daily")')
    benchmark: str | None = Field(None, description="the benchmark strategy (buy_and_hold)")
    num_trials: int | None = Field(None, description="pods tried")
    pbo: Figure = Field(None, description="probability of backtest overfitting (null with fewer than 2 pods)")
    pbo_logits: list[Figure] = Field(default_factory=list, description="one logit per CSCV combination")
    pbo_num_splits: int | None = Field(None, description="CSCV blocks")
    pbo_num_trials: int | None = Field(None, description="pods in the PBO")
    num_sessions: int | None = Field(None, description="sessions in the window")
    annualized_min_sessions: int | None = Field(
        None, description="fewest sessions with annualized compounding figures (63)"
    )
    data_feed: str | None = Field(
        None,
        description='the bars\' feed: "iex" (Alpaca\'s free feed), "sip", "yfinance", "synthetic", "embedded sample"',
    )
    volume_scale: Figure = Field(
        None,
        description="the factor on the bars' volume the volume cap and the impact read ([data] volume_scale)",
    )
    broker: str | None = Field(None, description='the fee profile: "alpaca" or "flat" (cost_rate)')
    spread: str | None = Field(
        None,
        description='the half-spread: "estimate" (per name and time of day, spread_bps its floor) or "fixed"',
    )
    cost_rate: Figure = Field(None, description="commission rate used (0 at Alpaca)")
    sec_fee_schedule: list[list[str | float]] | None = Field(
        None,
        description='Alpaca: the SEC fee per $ of sale proceeds from each date, rows ["YYYY-MM-DD", rate]',
    )
    taf_schedule: list[list[str | float]] | None = Field(
        None,
        description='Alpaca: the FINRA TAF from each date, rows ["YYYY-MM-DD", $ per share sold, cap per trade $]',
    )
    round_fees: bool | None = Field(
        None, description="Alpaca: each regulatory fee of each order rounded up to the cent"
    )
    slippage_bps: Figure = Field(None, description="slippage used, in basis points")
    spread_bps: Figure = Field(None, description="half-spread paid per fill, in basis points")
    impact_coef: Figure = Field(None, description="square-root impact coefficient")
    max_participation: Figure = Field(None, description="most of a bar's volume one fill takes (0: no cap)")
    min_order_notional: Figure = Field(None, description="smallest order placed ($)")
    significance_level: Figure = Field(None, description="the out-of-sample test's significance level")
    min_oos_sessions: int | None = Field(
        None, description="fewest held-out sessions the test is read on (40)"
    )
    decision_interval: int | None = Field(None, description="bars between two decisions")
    interval: str | None = Field(None, description="the bar interval")
    num_decisions: int | None = Field(None, description="decisions in the window")
    num_days: int | None = Field(None, description="days of daily returns")
    initial_value: Figure = Field(None, description="initial cash of every strategy ($)")
    strategies: dict[str, StrategyMetrics] = Field(
        min_length=1,
        description="per strategy (champion, buy_and_hold, equal_weight, cash, linear, boosted, index_*): its figures",
    )
    oos_test: OosTest | None = Field(
        None, description="the selected strategy's out-of-sample test (null without one)"
    )
    selection: SelectionDiagnostics | None = Field(
        None, description="the selection diagnostics (validation window)"
    )
    verdict: str | None = Field(None, description="the verdict line")
    verdict_outcome: Outcome | None = Field(
        None, description="the verdict's outcome (null without a selected strategy)"
    )
    verdict_figures: list[str] = Field(default_factory=list, description="the figures the line rests on")
    verdict_reasons: list[str] = Field(default_factory=list, description="the line's caveats")
    verdict_diagnostics: str | None = Field(None, description="the selection diagnostics line")
    positions_frequency: Frequency | None = Field(
        None, description="positions.parquet rows: per decision or session"
    )
    trades_frequency: Frequency | None = Field(
        None, description="trades.parquet rows: per decision or session"
    )
    tearsheet: Literal["pyfolio", "fallback"] | None = Field(None, description="what tearsheet.png holds")
    capacity: list[CapacityRow] | None = Field(
        None, description="the selected strategy at several account sizes (null when not run)"
    )
    estimated_capacity: Figure = Field(None, description="the largest account size its rule keeps ($)")
    estimated_capacity_rule: CapacityRule | None = Field(
        None,
        description='"significant" (the largest size with a significant edge), "half_sharpe" (keeping half '
        'the smallest size\'s net Sharpe) or "no_edge"',
    )
    cost_sensitivity: list[CostLevelRow] | None = Field(
        None,
        description="the strategies at 0x, 1x and 2x the cost model, at the report's account size (null when not run)",
    )
    role: str | None = Field(None, description='"selection" when a gate decided on this window (nightly)')
    role_note: str | None = Field(None, description="why the window's figures are selection figures")
    final: bool | None = Field(None, description="a walk-forward account's report after its last fold")
    walkforward: WalkForwardSummary | None = Field(None, description="a walk-forward's folds and champions")

    @model_validator(mode="before")
    @classmethod
    def _earlier_names(cls, raw: Any) -> Any:
        """Keys under the names files written earlier used: ``significance`` (the level)."""
        if isinstance(raw, dict) and "significance" in raw and "significance_level" not in raw:
            raw = {k: v for k, v in raw.items() if k != "significance"} | {
                "significance_level": raw["significance"]
            }
        return raw

    def updated(self, **fields: Any) -> MetricsDocument:
        """The document with ``fields`` (JSON values) set, validated like a file read (``model_copy``
        does not validate what it is given)."""
        return type(self).parse({**self.model_dump(exclude_unset=True), **fields})

    def states(self, key: str) -> bool:
        """The file wrote ``key`` (also as null): tells a document from before a key existed."""
        return key in self.model_fields_set

    def execution_text(self) -> str:
        """``", half-spread 1 bp, impact 0.5, fills <= 2.5% of a bar's volume, iex bars, volume x1"``: the
        execution model the document was computed with and what it priced (the bars' feed and the
        volume scale), for captions after the costs ("" for documents from before it)."""
        parts = []
        if self.broker == "alpaca":
            rounded = ", each rounded up to the cent" if self.round_fees else ""
            parts.append(f"Alpaca's fees (no commission; SEC fee and TAF on sells by date{rounded})")
        if self.spread == "estimate":
            parts.append(
                f"half-spread estimated per name and time of day (at least {self.spread_bps or 0:g} bp)"
            )
        elif self.spread_bps:
            parts.append(f"half-spread {self.spread_bps:g} bp")
        if self.impact_coef:
            parts.append(f"impact {self.impact_coef:g}")
        if self.max_participation:
            parts.append(f"fills <= {100 * self.max_participation:g}% of a bar's volume")
        if self.data_feed is not None:
            parts.append(f"{self.data_feed} bars")
        if self.volume_scale is not None:
            parts.append(f"volume x{self.volume_scale:g}")
        return "".join(f", {p}" for p in parts)

    def figures_of(self, strategy: str | None) -> StrategyMetrics | None:
        """The figures of ``strategy``, or None when the document has none."""
        return self.strategies.get(strategy) if strategy is not None else None


def read_metrics(path: str | os.PathLike[str]) -> MetricsDocument:
    """``metrics.json`` at ``path``, validated (one-line ArtifactError naming the file otherwise)."""
    return MetricsDocument.read(path)


#: The sections of metrics.json as docs/backtests.md tabulates them: (heading, model), top level first.
DOC_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("top level", MetricsDocument),
    ("`strategies.<name>`", StrategyMetrics),
    ("`oos_test`", OosTest),
    ("`oos_test.excess.<benchmark>`", ExcessFigures),
    ("`oos_test.look`", LookKey),
    ("`selection`", SelectionDiagnostics),
    ("`capacity[]`", CapacityRow),
    ("`cost_sensitivity[]`", CostLevelRow),
    ("`cost_sensitivity[].strategies.<name>`", CostLevelFigures),
    ("`walkforward`", WalkForwardSummary),
    ("`walkforward.champions[]`", ChampionSpan),
)


def key_table(model: type[BaseModel]) -> str:
    """The Markdown table of ``model``'s keys and their descriptions."""
    rows = ["| key | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {info.description or ''} |" for name, info in model.model_fields.items()]
    return "\n".join(rows)


def key_tables() -> str:
    """docs/backtests.md's tables of metrics.json's keys, generated from the models' field descriptions
    (``python -m backtests.metrics_model`` prints them; ``tests/test_docs_metrics_keys.py`` checks them)."""
    return "\n\n".join(f"**{heading}**\n\n{key_table(model)}" for heading, model in DOC_SECTIONS)


if __name__ == "__main__":
    print(key_tables())
