"""The learners' settings, one declaration each: :class:`PPOArgs`, :class:`SACArgs` and :class:`DirectArgs` (frozen
dataclasses; the docstring under a field is its one description, which the ``[agent]`` section of the
config and the CLI's ``--help`` read: ``app.settings_docs``).

Standard library only, so the config (``app.config``) and its documentation load without torch;
``agents.ppo``, ``agents.sac`` and ``agents.direct`` train with them. A new ``[agent]`` setting is a field here (its
default and the docstring under it), then the same name in ``app.config_sections.AgentConfig``
through ``setting(PPOArgs, name)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from data.errors import ConfigError
from envs.params import COMPILE_MODES

#: ``[agent] compile = "auto"`` compiles the minibatch loss for runs of at least this many minibatch steps.
#: The key: docs/agents.md ("Settings"); a tournament decides once for all pods (tournament/settings.py).
COMPILE_MIN_MINIBATCHES = 1_000


@dataclass(frozen=True)
class PPOArgs:
    """Hyper-parameters of one PPO run (CleanRL names)."""

    seed: int = 0
    """seed of the network init, action sampling, minibatch shuffles and env resets"""
    total_steps: int = 500_000
    """env-steps to train for (one env-step = one decision of one env)"""
    # Measured on the planted-signal synthetic market (docs/agents.md): the edge pays out within tens
    # of decisions, so a short horizon (gamma, gae_lambda) and a large step size learn it in minutes.
    # These are also the ``[agent]`` defaults of the TOML config (app.config reads them from here).
    learning_rate: float = 3e-3
    """Adam learning rate"""
    anneal_lr: bool = False
    """linearly anneal the learning rate to 0 over the run"""
    num_steps: int = 32
    """rollout length per env between updates"""
    gamma: float = 0.9
    """discount factor"""
    gae_lambda: float = 0.9
    """GAE lambda"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """passes over each rollout"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss around the rollout's values (PPO2 style)"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: float | None = None
    """stop the update's epochs early when the approximate KL exceeds this (None: never)"""
    embed: int = 16
    """per-asset embedding width (ignored when warm-starting from a policy)"""
    hidden: int = 64
    """context / critic width (ignored when warm-starting from a policy)"""
    asset_layers: int = 0
    """depth of the shared per-asset encoder: 0 = linear (fastest), n = n ReLU layers (ignored when warm-starting)"""
    init_log_std: float = -0.5
    """initial log-std of the Gaussian over logits (ignored when warm-starting)"""
    rebalance_rate: float = 0.2
    """"weights" mode: fraction of the way to the target moved per decision (ignored when warm-starting)"""
    norm_obs: bool = True
    """update running observation statistics during rollouts"""
    eval_every: int = 50_000
    """env-steps between calls of eval_fn (it is also called once at the end)"""
    compile: str = "auto"
    """torch.compile the minibatch loss and its backward: "on", "off", or "auto" (``compiles``: on from
    COMPILE_MIN_MINIBATCHES minibatch steps; the ``[agent] compile`` key, docs/agents.md "Settings")"""

    def __post_init__(self) -> None:
        positive = ("total_steps", "learning_rate", "num_steps", "num_minibatches", "update_epochs")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"PPOArgs.{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ConfigError("PPOArgs: gamma must be in (0, 1] and gae_lambda in [0, 1]")
        if self.eval_every <= 0 or self.clip_coef <= 0 or self.max_grad_norm <= 0:
            raise ConfigError("PPOArgs: eval_every, clip_coef and max_grad_norm must be > 0")
        if not 0 < self.rebalance_rate <= 1:
            raise ConfigError(f"PPOArgs.rebalance_rate must be in (0, 1], got {self.rebalance_rate}")
        if self.compile not in COMPILE_MODES:
            raise ConfigError(
                f"PPOArgs.compile must be one of {', '.join(COMPILE_MODES)}, got {self.compile!r}"
            )

    def batch_size(self, num_envs: int) -> int:
        """Samples per update: ``num_steps * num_envs``."""
        return self.num_steps * num_envs

    def num_updates(self, num_envs: int) -> int:
        """Updates of a run: ``total_steps`` rounded up to whole batches."""
        return max(1, math.ceil(self.total_steps / self.batch_size(num_envs)))


@dataclass(frozen=True)
class SACArgs:
    """Hyper-parameters of one SAC run (a field PPOArgs also has takes PPO's default: they share ``[agent]``)."""

    seed: int = 0
    """seed of the network init, action sampling, replay sampling and env resets"""
    total_steps: int = 500_000
    """env-steps to train for"""
    learning_rate: float = 3e-3
    """Adam learning rate of actor, critics and temperature"""
    gamma: float = 0.9
    """discount factor"""
    tau: float = 0.005
    """Polyak rate of the target critics"""
    batch_size: int = 1024
    """transitions per gradient step"""
    buffer_size: int = 200_000
    """replay buffer size in transitions (memory: about 8 * obs_dim bytes each)"""
    learning_starts: int = 4096
    """env-steps collected before the first gradient step"""
    gradient_steps: int = 1
    """gradient steps per vectorized env step (each adds num_envs transitions)"""
    num_critics: int = 4
    """K, the size of the critic ensemble"""
    critic_target: str = "min"
    """how the K target critics are combined: "min" or "mean\""""
    alpha: float = 0.05
    """initial entropy temperature"""
    autotune: bool = True
    """tune alpha towards the target entropy"""
    target_entropy_per_dim: float = -1.0
    """target entropy per raw action dimension"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip of each network"""
    embed: int = 16
    """per-asset embedding width (actor and critics)"""
    hidden: int = 64
    """context / critic hidden width"""
    asset_layers: int = 0
    """depth of the actor's shared per-asset encoder: 0 = linear (ignored when warm-starting)"""
    init_log_std: float = -0.5
    """initial log-std of the actor's Gaussian over logits (ignored when warm-starting)"""
    rebalance_rate: float = 0.2
    """"weights" mode: fraction of the way to the target moved per decision (ignored when warm-starting)"""
    norm_obs: bool = True
    """update running observation statistics while collecting"""
    eval_every: int = 50_000
    """env-steps between calls of eval_fn (also called once at the end)"""

    def __post_init__(self) -> None:
        for name in (
            "total_steps",
            "learning_rate",
            "batch_size",
            "buffer_size",
            "gradient_steps",
            "num_critics",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"SACArgs.{name} must be > 0, got {getattr(self, name)}")
        if self.critic_target not in ("min", "mean"):
            raise ConfigError(f"SACArgs.critic_target must be 'min' or 'mean', got {self.critic_target!r}")
        if not 0 < self.gamma <= 1 or not 0 < self.tau <= 1:
            raise ConfigError("SACArgs: gamma and tau must be in (0, 1]")
        if self.eval_every <= 0 or self.learning_starts < 0 or self.alpha <= 0:
            raise ConfigError("SACArgs: eval_every and alpha must be > 0, learning_starts >= 0")
        if not 0 < self.rebalance_rate <= 1:
            raise ConfigError(f"SACArgs.rebalance_rate must be in (0, 1], got {self.rebalance_rate}")


Objective = Literal["excess_sharpe", "active_sharpe", "sharpe", "invested_sharpe"]
Benchmark = Literal["market", "exposure", "uninvested"]
Finetune = Literal["all", "skip", "rule"]
OBJECTIVES: tuple[str, ...] = ("excess_sharpe", "active_sharpe", "sharpe", "invested_sharpe")
FINETUNES: tuple[str, ...] = ("all", "skip", "rule")


@dataclass(frozen=True)
class DirectArgs:
    """Hyper-parameters of one direct-policy-search run."""

    seed: int = 0
    """seed of the network init and of the paths' start bars"""
    total_steps: int = 500_000
    """env-steps to train for (one env-step = one simulated decision of one path)"""
    learning_rate: float = 3e-3
    """AdamW learning rate"""
    weight_decay: float = 1e-3
    """AdamW's decoupled weight decay"""
    horizon: int = 32
    """decisions per simulated path (the gradient runs through all of them)"""
    batch_paths: int = 64
    """paths per update, each from a random decision bar of the train window (from cash)"""
    holdout_frac: float = 0.2
    """share of the train window's decisions (its last ones) kept out of training for early stopping"""
    holdout_every: int = 10
    """updates between runs over the held-out decisions"""
    holdout_margin: float = 2.0
    """standard errors of the paired per-decision difference on the held-out tail by which fine-tuned
    weights must beat the warm start (the ridge or the parent) to replace it (0: any better objective)"""
    norm_updates: int = 10
    """updates whose observations fit a fresh policy's observation statistics (frozen after)"""
    finetune: Finetune = "all"
    """what the gradient moves: every weight of the network (``"all"``), the linear skip alone
    (``"skip"``: the start's linear score re-weighted feature by feature for the traded objective,
    costs and turnover included, with the network fixed; needs the linear start's skip), or the
    trading rule alone (``"rule"``: the logits' scale and the rebalance rate, two numbers, with the
    network fixed; agents.direct); a study setting, not an ``[agent]`` key; not on the population
    backend"""
    average_weights: bool = False
    """the held-out looks judge the running mean of the weights (Polyak averaging: a warm start counted
    as the first iterate; a fresh policy's mean begins once its ``norm_updates`` are done), not the
    last iterate, so the steps' noise averages out and the result stays near the start
    (agents.direct; a study setting, not an ``[agent]`` key; not on the population backend)"""
    objective: Objective = "active_sharpe"
    """what the gradient climbs: the Sharpe ratio of the net excess over equal weight held at the
    book's own exposure (``"active_sharpe"``: the selection alone, so holding cash through a fall earns
    nothing), of the net excess over equal weight (``"excess_sharpe"``), of the net return
    (``"sharpe"``), or of the net return with the book's cash share earning equal weight's return
    (``"invested_sharpe"``: the whole book's Sharpe ratio where cash buys no safety)"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    embed: int = 16
    """per-asset embedding width (ignored when warm-starting from a policy)"""
    hidden: int = 64
    """context width (ignored when warm-starting from a policy)"""
    asset_layers: int = 0
    """depth of the shared per-asset encoder (ignored when warm-starting)"""
    init_log_std: float = -0.5
    """initial log-std of the policy's Gaussian (unused by this learner; kept for PPO children)"""
    rebalance_rate: float = 0.2
    """"weights" mode: fraction of the way to the target moved per decision (ignored when warm-starting)"""
    trade_window: float = 1.0
    """"weights" mode: decisions later in their session than this fraction of it hold the book (1.0:
    every decision trades; 0.03 at 15-minute decisions: the session's first only; ignored when
    warm-starting)"""
    linear_start: bool = True
    """a fresh policy starts as the softmax of a ridge fit on the train window (agents.linear_start)"""
    demean_features: bool = False
    """asset_layers >= 1: the encoder reads each asset's features minus their mean across the assets
    (ignored when warm-starting)"""
    nonlinear_start: bool = False
    """the linear start plus a network of each asset's features fitted to the ridge's residual, kept
    if it beats the ridge on the held-out tail (agents.nonlinear_start; needs asset_layers = 1)"""
    start_products: bool = True
    """nonlinear start: a quadratic of two features (the pair screened by its product, its product
    and two squares fitted by least squares) is a second candidate beside the networks, judged by
    the same out-of-fold rule (agents.nonlinear_start.fit_product); no effect without
    ``nonlinear_start``"""
    start_crossfit: bool = True
    """nonlinear start: the member networks are judged (against the ridge, and against the pair
    candidate) on out-of-fold rows read at the epochs the other folds choose, not at the epoch chosen
    on those rows (agents.nonlinear_start.crossfit_rows); no effect without ``nonlinear_start``"""
    refit_alpha: bool = False
    """the tournament's refit: a fine-tuned champion is judged against its start on the validation
    window by the alpha over buy-and-hold of their daily difference, not by the difference itself
    (agents.tournament.refit), so a fine-tuning that sells exposure in a falling window is not kept
    for it"""
    top_mass: float = 0.5
    """linear start: the softmax temperature puts this share of the book on the top 20% by score"""
    start_blend: bool = True
    """linear start: the ridge's scores averaged with those of the one feature that best ranks the fit
    rows' returns (agents.linear_start.start_path)"""
    start_screen_draws: int = 64
    """linear start's blend: bootstrap resamples of the fit rows its screen is bagged over, each
    feature picked weighted by its share of them (0: the one feature of the best |t|;
    agents.linear_start.screen_weights)"""
    start_single_share: float = 1.0
    """linear start's blend: the weight of the screened feature's model against the ridge's (1: the
    screened feature's model alone, the ridge still choosing the penalty and the zero model; 0.5:
    half each; agents.linear_start.start_path)"""
    start_horizon: int = 1
    """linear start: decisions the ridge's target return spans (1: the next interval; 26: the next
    session at 15-minute decisions of 390-minute sessions)"""
    eval_every: int = 50_000
    """env-steps between calls of eval_fn (it is also called once at the end)"""

    def __post_init__(self) -> None:
        positive = (
            "total_steps",
            "learning_rate",
            "horizon",
            "batch_paths",
            "holdout_every",
            "max_grad_norm",
            "start_horizon",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"DirectArgs.{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 < self.holdout_frac < 1.0:
            raise ConfigError(f"DirectArgs.holdout_frac must be in (0, 1), got {self.holdout_frac}")
        if not (math.isfinite(self.holdout_margin) and self.holdout_margin >= 0):
            raise ConfigError(
                f"DirectArgs.holdout_margin must be a finite number >= 0, got {self.holdout_margin}"
            )
        if self.start_screen_draws < 0:
            raise ConfigError(f"DirectArgs.start_screen_draws must be >= 0, got {self.start_screen_draws}")
        if not 0.0 <= self.start_single_share <= 1.0:
            raise ConfigError(
                f"DirectArgs.start_single_share must be in [0, 1], got {self.start_single_share}"
            )
        if self.weight_decay < 0 or self.norm_updates < 0:
            raise ConfigError("DirectArgs.weight_decay and norm_updates must be >= 0")
        if not 0.0 < self.top_mass < 1.0:
            raise ConfigError(f"DirectArgs.top_mass must be in (0, 1), got {self.top_mass}")
        if not 0.0 < self.trade_window <= 1.0:
            raise ConfigError(f"DirectArgs.trade_window must be in (0, 1], got {self.trade_window}")
        if self.demean_features and self.asset_layers < 1:
            raise ConfigError("DirectArgs.demean_features needs asset_layers >= 1")
        if self.nonlinear_start and (self.asset_layers != 1 or not self.linear_start):
            raise ConfigError("DirectArgs.nonlinear_start needs asset_layers = 1 and linear_start")
        if self.finetune not in FINETUNES:
            raise ConfigError(f"DirectArgs.finetune {self.finetune!r}: choose {', '.join(FINETUNES)}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"DirectArgs.objective {self.objective!r}: choose {', '.join(OBJECTIVES)}")
