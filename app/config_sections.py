"""The sections of the TOML config (``app.config``): one frozen pydantic model per section, holding
its keys, their bounds and descriptions, and the defaults read from the dataclass each configures.

``app.config`` assembles them into ``Config`` and owns the file: reading (keys of older files
included), writing, and the mapping from the sections to the dataclasses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.args import DirectArgs, PPOArgs, SACArgs
from agents.tournament.settings import TournamentArgs
from app.alerts import HOOK_TIMEOUT_S, AlertSettings, check_settings
from app.book_settings import ShadowSettings
from app.retrain_limits import MAX_MINUTES
from app.settings_docs import field_doc
from backtests.verdict import SIGNIFICANCE_LEVEL
from data.load_defaults import LOAD_DEFAULTS
from envs.fee_schedule import check_schedule
from envs.params import EnvParams

# TOML has no null: an optional field whose default is not None (``tournament.budget_steps``) is
# written as the string "none" when it is None, and read back as None, so a run's config.toml
# reproduces its resolved config (a minutes-only budget stays minutes-only on --resume).
NONE_MARKER = "none"

# Each default is stated once, in the dataclass the setting configures (``PPOArgs``, ``SACArgs``,
# ``EnvParams``, ``TournamentArgs``), and so is its description (the docstring under the field); the
# sections below read both from there (:func:`setting`) and add the bounds. Every dataclass field is
# a section field of the same name, except these, which the
# workflow sets itself (tests/test_config_fields.py holds both rules).
INTERNAL_FIELDS: dict[str, str] = {
    "EnvParams.trade_info": "backtests switch on per-asset fill prices and costs; training never reads them",
    "EnvParams.spread_scale": "the cost sensitivity's multiples of the half-spread (backtests.capacity)",
    "EnvParams.fee_scale": "the cost sensitivity's multiples of the regulatory fees (backtests.capacity)",
    "TournamentArgs.algo": "the learner of fresh pods is [agent] algo",
    "DirectArgs.average_weights": "a study setting of the direct learner (benchmarks/finetune_gain.py --set); it did not beat the start",
    "DirectArgs.finetune": "a study setting of the direct learner (benchmarks/finetune_gain.py --set); it did not beat the start",
    "LOAD_DEFAULTS.start_date": "a date bound of stored bars that a caller passes to load_market",
    "LOAD_DEFAULTS.end_date": "a date bound of stored bars that a caller passes to load_market",
}


#: The learners' argument classes and how an ``[agent]`` field's description names them.
LEARNER_LABELS: dict[type, str] = {PPOArgs: "PPO", SACArgs: "SAC", DirectArgs: "direct"}


def setting(cls: type, name: str, **bounds: Any) -> Any:
    """The section field of dataclass ``cls``'s field ``name``: its default and its one description,
    the docstring under the field (``app.settings_docs``), with the section's bounds. An ``[agent]``
    field not every learner reads says which do ("PPO: ", "PPO, SAC: ", "direct: ")."""
    scope = ""
    if cls in LEARNER_LABELS:
        readers = [c for c in LEARNER_LABELS if name in {f.name for f in dataclasses.fields(c)}]
        if len(readers) < len(LEARNER_LABELS):
            scope = ", ".join(LEARNER_LABELS[c] for c in readers) + ": "
    return Field(getattr(cls, name), description=scope + field_doc(cls.__name__, name), **bounds)


def none_by_marker(section: type[BaseModel]) -> set[str]:
    """Fields of ``section`` that may be None but default to something else."""
    return {
        name
        for name, field in section.model_fields.items()
        if field.default is not None and not field.is_required() and _allows_none(field.annotation)
    }


def _allows_none(annotation: Any) -> bool:
    return type(None) in get_args(annotation)


class Section(BaseModel):
    """A section: a frozen model that forbids unknown keys and reads :data:`NONE_MARKER` as None."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _read_none_marker(cls, data: Any) -> Any:
        if isinstance(data, dict):
            marked = none_by_marker(cls)
            return {k: None if k in marked and v == NONE_MARKER else v for k, v in data.items()}
        return data


class DataConfig(Section):
    """Where bars come from and how they are split (defaults in data.loader.LOAD_DEFAULTS)."""

    source: Literal["synthetic", "stored", "real-sample"] = LOAD_DEFAULTS["source"]
    num_tickers: int = Field(
        LOAD_DEFAULTS["num_tickers"], ge=1, le=2000, description="synthetic: tickers in the universe"
    )
    num_sessions: int = Field(LOAD_DEFAULTS["num_sessions"], ge=3, description="synthetic: trading sessions")
    start: str = Field(LOAD_DEFAULTS["start"], description="synthetic: first session date")
    signal: float = Field(
        LOAD_DEFAULTS["signal"],
        ge=0.0,
        description="synthetic: strength of the planted predictable component",
    )
    shape: Literal["minute_momentum", "daily_cross_section", "nonlinear"] = Field(
        LOAD_DEFAULTS["shape"],
        description="synthetic: the planted edge's shape (docs/data.md, Planted shapes)",
    )
    target_ic: float | None = Field(
        LOAD_DEFAULTS["target_ic"],
        ge=0.0,
        le=0.15,
        description="synthetic: the planted level as the planted predictor's daily rank IC; replaces "
        "signal (unset: signal)",
    )
    seed: int = LOAD_DEFAULTS["seed"]
    interval: str = LOAD_DEFAULTS["interval"]
    tickers: list[str] = Field(
        default_factory=list, description="stored: tickers to use (empty: all, or the universe's)"
    )
    universe: Literal["", "nasdaq100"] = Field(
        LOAD_DEFAULTS["universe"], description="stored: 'nasdaq100' = the index members on as_of ('' = none)"
    )
    as_of: str = Field(
        LOAD_DEFAULTS["as_of"],
        description="stored: membership date of the universe ('' = the first stored month)",
    )
    train_frac: float = Field(LOAD_DEFAULTS["train_frac"], gt=0, lt=1)
    valid_frac: float = Field(LOAD_DEFAULTS["valid_frac"], gt=0, lt=1)
    min_coverage: float = Field(
        LOAD_DEFAULTS["min_coverage"], ge=0, le=1, description="drop tickers with less coverage"
    )
    volume_scale: float = Field(
        LOAD_DEFAULTS["volume_scale"],
        gt=0,
        description="multiplies the volume the execution model reads (the volume cap's expected volume and "
        "the impact's adv): bars of one venue's volume (Alpaca's iex feed, a few percent of the "
        "consolidated tape) read as the market's; docs/data.md",
    )

    features: Literal["small", "library"] = Field(
        LOAD_DEFAULTS["features"],
        description="the feature set: 'small' (eight bar features) or 'library' (30: adds session returns, "
        "gap, first half hour, cross-sectional excess and rank, volatility, volume and range ratios, "
        "beta, returns relative to the market in volatility units; docs/data.md)",
    )

    @model_validator(mode="after")
    def _fractions(self) -> DataConfig:
        if self.train_frac + self.valid_frac >= 1:
            raise ValueError("train_frac + valid_frac must be < 1 (a test window must remain)")
        return self


class EnvConfig(Section):
    """Trading environment parameters (see envs.trading.EnvParams, which holds the defaults)."""

    initial_cash: float = setting(EnvParams, "initial_cash", gt=0)
    broker: Literal["alpaca", "flat"] = setting(EnvParams, "broker")
    cost_rate: float = setting(EnvParams, "cost_rate", ge=0, lt=0.1)
    sec_fee_schedule: list[tuple[str, float]] = setting(EnvParams, "sec_fee_schedule")
    taf_schedule: list[tuple[str, float, float]] = setting(EnvParams, "taf_schedule")
    round_fees: bool = setting(EnvParams, "round_fees")
    slippage_bps: float = setting(EnvParams, "slippage_bps", ge=0, lt=1000)
    decision_interval: int = setting(EnvParams, "decision_interval", ge=1)
    episode_len: int = setting(EnvParams, "episode_len", ge=1)
    action_mode: Literal["weights", "shares"] = setting(EnvParams, "action_mode")
    max_shares: float = setting(EnvParams, "max_shares", gt=0)
    reward: Literal["log_return", "return", "diff_sharpe"] = setting(EnvParams, "reward")
    drawdown_penalty: float = setting(EnvParams, "drawdown_penalty", ge=0)
    max_weight: float = setting(EnvParams, "max_weight", gt=0, le=1)
    turnover_penalty: float = setting(EnvParams, "turnover_penalty", ge=0)
    reward_scale: float = setting(EnvParams, "reward_scale", gt=0)
    spread: Literal["estimate", "fixed"] = setting(EnvParams, "spread")
    spread_bps: float = setting(EnvParams, "spread_bps", ge=0, lt=1000)
    max_participation: float = setting(EnvParams, "max_participation", ge=0, le=1)
    unfilled: Literal["drop", "work"] = setting(EnvParams, "unfilled")
    impact_coef: float = setting(EnvParams, "impact_coef", ge=0)
    impact_decay: float = setting(EnvParams, "impact_decay", ge=0, le=1)
    min_order_notional: float = setting(EnvParams, "min_order_notional", ge=0)
    num_envs: int = Field(256, ge=1)
    fast_step: Literal["auto", "on", "off"] = Field(
        "auto",
        description="fast env step: the native C kernel on CPU, torch.compile elsewhere (auto: from "
        "envs.fast_step's batch-size thresholds); docs/env.md",
    )
    sharpe_eta: float = setting(EnvParams, "sharpe_eta", gt=0, lt=1)
    bust_frac: float = setting(EnvParams, "bust_frac", ge=0, lt=1)
    precision: Literal["float32", "float64"] = setting(EnvParams, "precision")

    @model_validator(mode="after")
    def _fee_schedules(self) -> EnvConfig:
        check_schedule("sec_fee_schedule", self.sec_fee_schedule, 1)
        check_schedule("taf_schedule", self.taf_schedule, 2)
        if any(rate >= 0.01 for _, rate in self.sec_fee_schedule):
            raise ValueError("sec_fee_schedule: each rate is per $ of proceeds and must be < 0.01")
        return self


class AgentConfig(Section):
    """Learner settings (defaults in agents.ppo.PPOArgs / agents.sac.SACArgs, equal where both have a
    field); algorithm-specific fields are ignored by the other algorithm."""

    algo: Literal["ppo", "sac", "direct"] = "direct"
    seed: int = setting(PPOArgs, "seed")
    device: str = "cpu"
    hidden: int = setting(PPOArgs, "hidden", ge=4)
    embed: int = setting(PPOArgs, "embed", ge=2)
    learning_rate: float = setting(PPOArgs, "learning_rate", gt=0, lt=1)
    gamma: float = setting(PPOArgs, "gamma", gt=0, le=1)
    gae_lambda: float = setting(PPOArgs, "gae_lambda", ge=0, le=1)
    rebalance_rate: float = setting(PPOArgs, "rebalance_rate", gt=0, le=1)
    num_steps: int = setting(PPOArgs, "num_steps", ge=1)
    update_epochs: int = setting(PPOArgs, "update_epochs", ge=1)
    num_minibatches: int = setting(PPOArgs, "num_minibatches", ge=1)
    clip_coef: float = setting(PPOArgs, "clip_coef", gt=0)
    ent_coef: float = setting(PPOArgs, "ent_coef", ge=0)
    vf_coef: float = setting(PPOArgs, "vf_coef", ge=0)
    max_grad_norm: float = setting(PPOArgs, "max_grad_norm", gt=0)
    total_steps: int = setting(PPOArgs, "total_steps", ge=1)
    num_critics: int = setting(SACArgs, "num_critics", ge=1)
    critic_target: Literal["min", "mean"] = setting(SACArgs, "critic_target")
    buffer_size: int = setting(SACArgs, "buffer_size", ge=1)
    batch_size: int = setting(SACArgs, "batch_size", ge=1)
    eval_every: int = setting(PPOArgs, "eval_every", ge=1)
    weight_decay: float = setting(DirectArgs, "weight_decay", ge=0)
    horizon: int = setting(DirectArgs, "horizon", ge=1)
    batch_paths: int = setting(DirectArgs, "batch_paths", ge=1)
    holdout_frac: float = setting(DirectArgs, "holdout_frac", gt=0, lt=1)
    holdout_every: int = setting(DirectArgs, "holdout_every", ge=1)
    holdout_margin: float = setting(DirectArgs, "holdout_margin", ge=0)
    norm_updates: int = setting(DirectArgs, "norm_updates", ge=0)
    objective: Literal["excess_sharpe", "active_sharpe", "sharpe", "invested_sharpe"] = setting(
        DirectArgs, "objective"
    )
    linear_start: bool = setting(DirectArgs, "linear_start")
    nonlinear_start: bool = setting(DirectArgs, "nonlinear_start")
    start_products: bool = setting(DirectArgs, "start_products")
    start_crossfit: bool = setting(DirectArgs, "start_crossfit")
    refit_alpha: bool = setting(DirectArgs, "refit_alpha")
    demean_features: bool = setting(DirectArgs, "demean_features")
    top_mass: float = setting(DirectArgs, "top_mass", gt=0, lt=1)
    start_blend: bool = setting(DirectArgs, "start_blend")
    start_screen_draws: int = setting(DirectArgs, "start_screen_draws", ge=0, le=10_000)
    start_single_share: float = setting(DirectArgs, "start_single_share", ge=0, le=1)
    start_horizon: int = setting(DirectArgs, "start_horizon", ge=1)
    trade_window: float = setting(DirectArgs, "trade_window", gt=0, le=1)
    asset_layers: int = setting(PPOArgs, "asset_layers", ge=0)
    init_log_std: float = setting(PPOArgs, "init_log_std", ge=-10, le=2)
    norm_obs: bool = setting(PPOArgs, "norm_obs")
    anneal_lr: bool = setting(PPOArgs, "anneal_lr")
    norm_adv: bool = setting(PPOArgs, "norm_adv")
    clip_vloss: bool = setting(PPOArgs, "clip_vloss")
    compile: Literal["auto", "on", "off"] = setting(PPOArgs, "compile")
    target_kl: float | None = setting(PPOArgs, "target_kl", gt=0)
    tau: float = setting(SACArgs, "tau", gt=0, le=1)
    learning_starts: int = setting(SACArgs, "learning_starts", ge=0)
    gradient_steps: int = setting(SACArgs, "gradient_steps", ge=1)
    alpha: float = setting(SACArgs, "alpha", gt=0)
    autotune: bool = setting(SACArgs, "autotune")
    target_entropy_per_dim: float = setting(SACArgs, "target_entropy_per_dim", ge=-100, le=100)


class TournamentConfig(Section):
    """Podracer tournament: pool, leaderboard, generator, budget, backend (defaults in TournamentArgs)."""

    pods: int | None = setting(TournamentArgs, "pods", ge=1)
    leaderboard_size: int = setting(TournamentArgs, "leaderboard_size", ge=1)
    p_fresh: float = setting(TournamentArgs, "p_fresh", ge=0, le=1)
    round_steps: int = setting(TournamentArgs, "round_steps", ge=1)
    budget_steps: int | None = setting(TournamentArgs, "budget_steps", ge=1)
    budget_minutes: float | None = setting(TournamentArgs, "budget_minutes", gt=0)
    fitness: Literal["sharpe", "return", "calmar"] = setting(TournamentArgs, "fitness")
    backend: Literal["auto", "local", "ray", "population"] = setting(TournamentArgs, "backend")
    workers: int = setting(TournamentArgs, "workers", ge=0)
    population_size: int = setting(TournamentArgs, "population_size", ge=0)
    envs_per_pod: int = setting(TournamentArgs, "envs_per_pod", ge=0)
    overlap_rounds: bool | None = setting(TournamentArgs, "overlap_rounds")
    address: str | None = setting(TournamentArgs, "address")
    seed: int = setting(TournamentArgs, "seed")
    round_seconds: float | None = setting(TournamentArgs, "round_seconds", gt=0)
    max_consecutive_failures: int = setting(TournamentArgs, "max_consecutive_failures", ge=1)
    round_timeout_s: float | None = setting(TournamentArgs, "round_timeout_s", gt=0)
    champion: Literal["best", "ensemble"] = setting(TournamentArgs, "champion")
    ensemble_size: int = setting(TournamentArgs, "ensemble_size", ge=1)
    refit: bool = setting(TournamentArgs, "refit")


class BacktestConfig(Section):
    """Held-out evaluation."""

    window: Literal["test", "valid"] = "test"
    annualization: int = Field(252, ge=1, description="periods per year of the daily returns")
    significance_level: float = Field(
        SIGNIFICANCE_LEVEL,
        gt=0,
        lt=1,
        description="level of the out-of-sample test behind the verdict (docs/backtests.md)",
    )
    compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="torch.compile a policy's decision loop (auto: from 50,000 decisions on; docs/backtests.md)",
    )


class GateConfig(Section):
    """The promotion rule, read the same way by the nightly retrain and a walk-forward's folds
    (``app.gate.GateRule.of_config``, ``app.gate.shadow_settings``; docs/nightly.md).
    The book's knobs take their defaults from ``ShadowSettings``."""

    rule: Literal["book", "window", "always"] = Field(
        "book",
        description="book: the shadow book's anytime-valid tests on the sessions after each challenger's "
        "creation promote, and demote a champion whose edge is gone; window: the fixed-window gate (margin "
        "and a significant out-of-sample test on one window); always: every challenger takes over "
        "(walk-forward folds only)",
    )
    level: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="the rule's level: the book's (shared by every challenger ever entered) or the window "
        "test's (None: [backtest] significance_level)",
    )
    margin: float = Field(
        0.1, ge=0, description="window: the challenger must beat the incumbent by this much (fitness units)"
    )
    fitness: Literal["sharpe", "return", "calmar"] | None = Field(
        None, description="window: the fitness compared (None: [tournament] fitness)"
    )
    before_champion: Literal["benchmark", "cash"] = Field(
        "benchmark",
        description="what paper trading and a walk-forward's account hold while no champion is in charge: "
        "benchmark, equal weight of the universe bought (at once in paper, as fast as the volume cap lets it "
        "in a walk-forward) then held (costs on), or cash",
    )
    slots: int = Field(ShadowSettings.slots, ge=1, description="book: challengers tested at once")
    min_sessions: int = Field(
        ShadowSettings.min_sessions,
        ge=1,
        description="book: sessions a challenger is tested before it can retire as non-promising",
    )
    max_sessions: int = Field(
        ShadowSettings.max_sessions, ge=1, description="book: sessions a challenger is tested at most"
    )
    demotion_margin: float = Field(
        ShadowSettings.demotion_margin,
        gt=-1,
        lt=1,
        description="book: daily alpha over buy-and-hold the champion must keep (the demotion test's null)",
    )
    max_drawdown: float = Field(
        ShadowSettings.max_drawdown,
        gt=0,
        le=1,
        description="book: the drawdown since promotion of the champion's wealth relative to buy-and-hold's "
        "that demotes it",
    )
    keep_retired: int = Field(
        ShadowSettings.keep_retired, ge=1, description="book: retired challengers whose last figures it keeps"
    )

    @model_validator(mode="after")
    def _sessions(self) -> GateConfig:
        if self.max_sessions < self.min_sessions:
            raise ValueError("max_sessions must be >= min_sessions")
        return self


class NightlyConfig(Section):
    """Nightly retraining, champion vs challenger (``podracer retrain``; see docs/nightly.md)."""

    update: Literal["none", "yfinance", "alpaca"] = Field(
        "none",
        description="incremental bar download before training (online sources need data.source = 'stored')",
    )
    initial_days: int = Field(30, ge=1, description="update: days fetched for a ticker with no stored bars")
    max_minutes: float | None = Field(
        MAX_MINUTES,
        gt=0,
        description="a retrain's time budget: past it the run stops, keeps the champion and records a "
        "failed retrain (None: no budget); the systemd unit's TimeoutStartSec follows it",
    )
    warm_start_pods: int = Field(1, ge=0, description="fresh pods seeded with the champion's weights")
    export: bool = Field(True, description="export an onnxruntime bundle on promotion")
    tearsheet: bool = Field(True, description="write the challenger run's tear sheet")


class AlertsConfig(Section):
    """The alert hook: each new problem ``podracer status --notify`` finds, and each that clears, sent
    once as JSON (``app.alerts``; docs/nightly.md "Operating it")."""

    command: str = Field(
        "", description="shell command run with the problem as JSON on stdin, e.g. 'cat >> ~/alerts.jsonl'"
    )
    webhook: str = Field("", description="http(s) URL the same JSON is POSTed to ('' = none)")
    timeout_s: float = Field(HOOK_TIMEOUT_S, gt=0, description="seconds the command or webhook may take")

    @model_validator(mode="after")
    def _usable(self) -> AlertsConfig:
        check_settings(AlertSettings(self.command, self.webhook, self.timeout_s), "[alerts]")
        return self


class RetentionConfig(Section):
    """What a home keeps (``podracer prune``, and after each nightly retrain; see docs/nightly.md).
    The champion in charge and its predecessor are kept whatever the counts."""

    keep_runs: int = Field(30, ge=1, description="newest nightly runs kept (runs/nightly-*)")
    keep_champions: int = Field(
        5, ge=2, description="champions whose export and policy copy are kept (the last promotions)"
    )
    journal_sessions: int = Field(
        250, ge=1, description="paper sessions kept in full in the journal; older days become daily rows"
    )
    log_max_mb: float = Field(20.0, gt=0, description="a log under <home>/logs larger than this is rotated")
    keep_logs: int = Field(3, ge=0, description="rotated copies kept per log")
    after_retrain: bool = Field(True, description="prune after each nightly retrain")


class PaperConfig(Section):
    """How ``podracer paper --champion`` trades (docs/paper.md section 3; what it holds before a
    champion qualifies is ``[gate] before_champion``)."""

    max_slippage_gap_bps: float = Field(
        10.0,
        gt=0,
        description="bound on the mean gap, in bp, between the broker's fill slippage and the execution "
        "model's over the last 5 reconciled paper sessions; past it `podracer status` reports "
        "execution_gap (podracer reconcile)",
    )


class WalkForwardConfig(Section):
    """Walk-forward: nightly retraining replayed over history (``podracer walkforward``;
    docs/walkforward.md). Windows in sessions; the layout is ``backtests.folds``."""

    window: Literal["rolling", "expanding"] = Field(
        "rolling", description="rolling: train on the last train_sessions; expanding: from the first session"
    )
    train_sessions: int = Field(63, ge=1, description="sessions of a fold's train window (rolling)")
    valid_sessions: int = Field(
        21, ge=1, description="sessions of a fold's validation window: pods ranked, challenger gated"
    )
    embargo_sessions: int = Field(
        1, ge=1, description="sessions between the validation window and the test window (at least 1)"
    )
    step_sessions: int = Field(
        21,
        ge=1,
        description="retrain cadence: sessions each fold's test window trades (21 monthly, 5 weekly)",
    )
    gate_sessions: int = Field(
        21,
        ge=0,
        description="sessions after the validation window the gate reads, as nightly's test window "
        "(0: the gate reads the validation window the tournament ranked on, where its test is optimistic)",
    )
    start: str = Field("", description="first test session (ISO date; '' = as soon as the first fold fits)")
    num_folds: int = Field(0, ge=0, description="at most this many folds (0 = as many as the data holds)")
    budget_steps: int | None = Field(
        None,
        ge=1,
        description="env-steps of each fold's tournament (unset with budget_minutes: [tournament]'s)",
    )
    budget_minutes: float | None = Field(
        None,
        gt=0,
        description="wall minutes of each fold's tournament (unset with budget_steps: [tournament]'s)",
    )
    tearsheet: bool = Field(True, description="write the stitched account's tear sheet")
