"""The sections of the TOML config (``app.config``): one frozen pydantic model per section, holding
its keys, their bounds and descriptions, and the defaults read from the dataclass each configures.

``app.config`` assembles them into ``Config`` and owns the file: reading (keys of older files
included), writing, and the mapping from the sections to the dataclasses.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.ppo import PPOArgs
from agents.sac import SACArgs
from agents.tournament.orchestrator import TournamentArgs
from backtests.verdict import SIGNIFICANCE_LEVEL
from data.loader import LOAD_DEFAULTS
from envs.trading import EnvParams

# TOML has no null: an optional field whose default is not None (``tournament.budget_steps``) is
# written as the string "none" when it is None, and read back as None, so a run's config.toml
# reproduces its resolved config (a minutes-only budget stays minutes-only on --resume).
NONE_MARKER = "none"

# Each default is stated once, in the dataclass the setting configures (``PPOArgs``, ``SACArgs``,
# ``EnvParams``, ``TournamentArgs``); the sections below read it from there and add the bounds and the
# description. Every dataclass field is a section field of the same name, except these, which the
# workflow sets itself (tests/test_config_fields.py holds both rules).
INTERNAL_FIELDS: dict[str, str] = {
    "EnvParams.trade_info": "backtests switch on per-asset fill prices and costs; training never reads them",
    "TournamentArgs.algo": "the learner of fresh pods is [agent] algo",
    "LOAD_DEFAULTS.start_date": "a date bound of stored bars that a caller passes to load_market",
    "LOAD_DEFAULTS.end_date": "a date bound of stored bars that a caller passes to load_market",
}


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

    @model_validator(mode="after")
    def _fractions(self) -> DataConfig:
        if self.train_frac + self.valid_frac >= 1:
            raise ValueError("train_frac + valid_frac must be < 1 (a test window must remain)")
        return self


class EnvConfig(Section):
    """Trading environment parameters (see envs.trading.EnvParams, which holds the defaults)."""

    initial_cash: float = Field(EnvParams.initial_cash, gt=0)
    cost_rate: float = Field(EnvParams.cost_rate, ge=0, lt=0.1)
    slippage_bps: float = Field(EnvParams.slippage_bps, ge=0, lt=1000)
    decision_interval: int = Field(EnvParams.decision_interval, ge=1, description="bars between decisions")
    episode_len: int = Field(EnvParams.episode_len, ge=1, description="decisions per episode")
    action_mode: Literal["weights", "shares"] = EnvParams.action_mode
    max_shares: float = Field(EnvParams.max_shares, gt=0)
    reward: Literal["log_return", "return", "diff_sharpe"] = EnvParams.reward
    drawdown_penalty: float = Field(EnvParams.drawdown_penalty, ge=0)
    max_weight: float = Field(
        EnvParams.max_weight,
        gt=0,
        le=1,
        description="per-asset cap on the weight at the fill; excess stays in cash",
    )
    turnover_penalty: float = Field(
        EnvParams.turnover_penalty, ge=0, description="reward -= penalty * traded notional / value"
    )
    reward_scale: float = Field(EnvParams.reward_scale, gt=0)
    num_envs: int = Field(256, ge=1)
    fast_step: Literal["auto", "on", "off"] = Field(
        "auto",
        description="fast env step: the native C kernel on CPU, torch.compile elsewhere (auto: from "
        "envs.fast_step's batch-size thresholds); docs/env.md",
    )
    sharpe_eta: float = Field(
        EnvParams.sharpe_eta, gt=0, lt=1, description="diff_sharpe: EMA rate of the return moments"
    )
    bust_frac: float = Field(
        EnvParams.bust_frac, ge=0, lt=1, description="an episode ends when value < bust_frac * initial_cash"
    )
    precision: Literal["float32", "float64"] = Field(
        EnvParams.precision, description="dtype of per-asset quantities (accounting is always float64)"
    )


class AgentConfig(Section):
    """Learner settings (defaults in agents.ppo.PPOArgs / agents.sac.SACArgs, equal where both have a
    field); algorithm-specific fields are ignored by the other algorithm."""

    algo: Literal["ppo", "sac"] = "ppo"
    seed: int = PPOArgs.seed
    device: str = "cpu"
    hidden: int = Field(PPOArgs.hidden, ge=4)
    embed: int = Field(PPOArgs.embed, ge=2)
    learning_rate: float = Field(PPOArgs.learning_rate, gt=0, lt=1)
    gamma: float = Field(PPOArgs.gamma, gt=0, le=1)
    gae_lambda: float = Field(PPOArgs.gae_lambda, ge=0, le=1)
    rebalance_rate: float = Field(
        PPOArgs.rebalance_rate,
        gt=0,
        le=1,
        description="fraction of the gap to the target weights traded per decision",
    )
    num_steps: int = Field(PPOArgs.num_steps, ge=1, description="PPO: rollout length per env")
    update_epochs: int = Field(PPOArgs.update_epochs, ge=1)
    num_minibatches: int = Field(PPOArgs.num_minibatches, ge=1)
    clip_coef: float = Field(PPOArgs.clip_coef, gt=0)
    ent_coef: float = Field(PPOArgs.ent_coef, ge=0)
    vf_coef: float = Field(PPOArgs.vf_coef, ge=0)
    max_grad_norm: float = Field(PPOArgs.max_grad_norm, gt=0)
    total_steps: int = Field(PPOArgs.total_steps, ge=1, description="env-steps for a single `podracer train`")
    num_critics: int = Field(SACArgs.num_critics, ge=1, description="SAC: critic ensemble size")
    critic_target: Literal["min", "mean"] = SACArgs.critic_target
    buffer_size: int = Field(SACArgs.buffer_size, ge=1)
    batch_size: int = Field(SACArgs.batch_size, ge=1)
    eval_every: int = Field(PPOArgs.eval_every, ge=1, description="env-steps between validation evaluations")
    asset_layers: int = Field(PPOArgs.asset_layers, ge=0, description="per-asset encoder depth (0: linear)")
    init_log_std: float = Field(
        PPOArgs.init_log_std, ge=-10, le=2, description="initial log-std of the Gaussian over logits"
    )
    norm_obs: bool = Field(PPOArgs.norm_obs, description="update running observation statistics")
    anneal_lr: bool = Field(PPOArgs.anneal_lr, description="PPO: anneal the learning rate linearly to 0")
    norm_adv: bool = Field(PPOArgs.norm_adv, description="PPO: normalize advantages per minibatch")
    clip_vloss: bool = Field(PPOArgs.clip_vloss, description="PPO: clip the value loss (PPO2 style)")
    compile: Literal["auto", "on", "off"] = Field(
        PPOArgs.compile,
        description="PPO: torch.compile the minibatch loss (auto: for runs of 1,000 minibatch steps or "
        "more; a tournament decides once for all pods; docs/agents.md)",
    )
    target_kl: float | None = Field(
        PPOArgs.target_kl, gt=0, description="PPO: stop an update's epochs past this approximate KL"
    )
    tau: float = Field(SACArgs.tau, gt=0, le=1, description="SAC: Polyak rate of the target critics")
    learning_starts: int = Field(
        SACArgs.learning_starts, ge=0, description="SAC: env-steps collected before the first update"
    )
    gradient_steps: int = Field(SACArgs.gradient_steps, ge=1, description="SAC: updates per vectorized step")
    alpha: float = Field(SACArgs.alpha, gt=0, description="SAC: initial entropy temperature")
    autotune: bool = Field(SACArgs.autotune, description="SAC: tune alpha towards the target entropy")
    target_entropy_per_dim: float = Field(
        SACArgs.target_entropy_per_dim,
        ge=-100,
        le=100,
        description="SAC: target entropy per action dimension",
    )


class TournamentConfig(Section):
    """Podracer tournament: pool, leaderboard, generator, budget, backend (defaults in TournamentArgs)."""

    pods: int | None = Field(
        TournamentArgs.pods,
        ge=1,
        description="pods training at once (unset: the backend's own; population: the population size)",
    )
    leaderboard_size: int = Field(TournamentArgs.leaderboard_size, ge=1)
    p_fresh: float = Field(
        TournamentArgs.p_fresh, ge=0, le=1, description="probability a new pod starts from scratch"
    )
    round_steps: int = Field(TournamentArgs.round_steps, ge=1, description="env-steps per pod round")
    budget_steps: int | None = Field(TournamentArgs.budget_steps, ge=1)
    budget_minutes: float | None = Field(TournamentArgs.budget_minutes, gt=0)
    fitness: Literal["sharpe", "return", "calmar"] = TournamentArgs.fitness
    backend: Literal["auto", "local", "ray", "population"] = Field(
        TournamentArgs.backend,
        description="auto: population for PPO on a CUDA device, else local (docs/tournament.md)",
    )
    workers: int = Field(
        TournamentArgs.workers,
        ge=0,
        description="local and population backends: worker processes (0 = inline; a GPU: one)",
    )
    population_size: int = Field(
        TournamentArgs.population_size,
        ge=0,
        description="population backend: pods per population (0: from the device's memory and a probe)",
    )
    envs_per_pod: int = Field(
        TournamentArgs.envs_per_pod,
        ge=0,
        description="population backend: envs per pod (0: [env] num_envs, or more where a GPU's probe finds it faster)",
    )
    address: str | None = Field(
        TournamentArgs.address,
        description="ray: address of an existing cluster (population: run the populations there)",
    )
    seed: int = TournamentArgs.seed
    round_seconds: float | None = Field(
        TournamentArgs.round_seconds, gt=0, description="optional wall-time cap of one pod round"
    )
    max_consecutive_failures: int = Field(
        TournamentArgs.max_consecutive_failures, ge=1, description="stop after this many failed pods in a row"
    )
    round_timeout_s: float | None = Field(
        TournamentArgs.round_timeout_s,
        gt=0,
        description="kill and fail a pod round with no result after this many seconds "
        "(unset: 4x the median round so far, at least 10 min; 1 h until 3 rounds finished)",
    )
    champion: Literal["best", "ensemble"] = Field(
        TournamentArgs.champion,
        description="the run's champion: the best pod, or the mean of the top ensemble_size pods",
    )
    ensemble_size: int = Field(
        TournamentArgs.ensemble_size, ge=1, description="K: leaderboard pods averaged by the ensemble"
    )


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


class NightlyConfig(Section):
    """Nightly retraining, champion vs challenger (``podracer retrain``; see docs/nightly.md)."""

    update: Literal["none", "yfinance", "alpaca"] = Field(
        "none",
        description="incremental bar download before training (online sources need data.source = 'stored')",
    )
    initial_days: int = Field(30, ge=1, description="update: days fetched for a ticker with no stored bars")
    fitness: Literal["sharpe", "return", "calmar"] | None = Field(
        None, description="fitness compared on the evaluation window (None: tournament.fitness)"
    )
    margin: float = Field(
        0.1, ge=0, description="challenger must beat the champion by this much (fitness units)"
    )
    significance_level: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="the gate's level: the challenger's out-of-sample test must be significant at it "
        "(None: [backtest] significance_level)",
    )
    first_promotion: Literal["always", "significant"] = Field(
        "always", description="with no champion yet: promote always, or only a significant challenger"
    )
    warm_start_pods: int = Field(1, ge=0, description="fresh pods seeded with the champion's weights")
    export: bool = Field(True, description="export an onnxruntime bundle on promotion")
    tearsheet: bool = Field(True, description="write the challenger run's tear sheet")


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
    gate: Literal["nightly", "always"] = Field(
        "nightly",
        description="nightly: the retrain gate decides challenger vs incumbent ([nightly] margin and significance_level); "
        "always: every fold's challenger takes over",
    )
    tearsheet: bool = Field(True, description="write the stitched account's tear sheet")
