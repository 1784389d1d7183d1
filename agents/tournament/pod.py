"""One pod round: what a worker receives, runs and sends back.

A *pod* is one agent with its own vectorized env and a budget (one round of ``round_steps`` env-steps
or ``round_seconds``). A round starts from fresh weights or from a parent's checkpoint (weights and
optimizer state), trains, saves its checkpoint under ``<run>/pods/<pod_id>/``, and is scored on the
validation window. Everything here is picklable so a round can run in a worker process or a Ray task.

The round itself is any module-level function ``round_fn(task, ctx) -> PodOutcome``;
:func:`learner_round` (PPO, SAC or direct policy search) is the real one, tests pass small fakes. :func:`execute_round` wraps it for the
backends: it turns every exception into a picklable :class:`RoundError` and rejects NaN outcomes, so
a bad pod is recorded as failed and never reaches the leaderboard.

Scoring (:func:`score_policy`, in the worker): the pod's deterministic policy is scored on the whole
validation window from its first bar by ``backtests.scoring.score_window`` (the engine and metrics
that produce the final held-out numbers), so every pod is judged on the same bars with costs on. Fitness (``tournament.fitness``):

- ``sharpe`` (default): annualized Sharpe of the daily validation returns, net of costs;
- ``return``: cumulative validation return;
- ``calmar``: annual return over max drawdown; a pod with no drawdown (never a losing day, positive
  return) ranks above every pod with one, by return (``backtests.scoring.fitness``).

A metric that is undefined for a well-behaved policy (a flat all-cash policy has no return
dispersion, so its Sharpe is 0/0) scores 0 rather than failing the pod (its *Sharpe* is still
recorded as undefined, None, so the trial statistics leave it out); infinities are clipped to
``±SCORE_CLIP`` (``2 * SCORE_CLIP`` for calmar, whose no-drawdown scores lie above ``SCORE_CLIP``).
A pod whose *returns* are NaN is a broken pod and is rejected as failed.

The pod's daily validation returns (and its per-decision returns) are written next to its checkpoint
as ``valid_returns.parquet`` (:func:`write_valid_returns`): every pod tried is scored on the same
validation window, so these columns line up into the (T, N) matrix the probability of backtest
overfitting is computed from (``backtests.selection``).
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from agents import direct, ppo, sac
from agents.checkpoint import Checkpoint
from agents.tournament.generator import PodSpec
from agents.tournament.search_space import OPEN_WINDOW
from agents.tournament.settings import FITNESS
from agents.training import TrainResult
from backtests.engine import PolicyBatch
from backtests.scoring import score_window
from data.atomic import atomic_path
from data.errors import one_line
from data.market import MarketData
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

#: A pod's validation returns, next to its checkpoint (see :func:`write_valid_returns`).
VALID_RETURNS = "valid_returns.parquet"
#: A pod's learning curve, next to its checkpoint (the app reads it as ``app.runs.RunDir.curve``).
CURVE = "curve.parquet"
PERIODS = ("daily", "decision")
SCORE_CLIP = 1e3
LEARNERS = {
    "ppo": (ppo.PPOArgs, ppo.train),
    "sac": (sac.SACArgs, sac.train),
    "direct": (direct.DirectArgs, direct.train),
}


@dataclass(frozen=True)
class RoundContext:
    """What every round of a run shares: the train and valid windows (never the test window)."""

    train: MarketData
    valid: MarketData
    annualization: int  # periods per year of the daily returns ([backtest] annualization)
    env: Mapping[str, Any] = field(default_factory=dict)  # EnvParams fields + num_envs
    agent: Mapping[str, Any] = field(default_factory=dict)  # base learner args (the pod's hparams win)
    device: str = "cpu"
    fitness: str = "sharpe"


@dataclass(frozen=True)
class PodTask:
    """One round for one pod."""

    spec: PodSpec
    checkpoint_dir: str  # <run>/pods/<pod_id>/
    round_steps: int
    round_seconds: float | None = None


@dataclass(frozen=True)
class PodOutcome:
    """A finished round, scored on the validation window."""

    pod_id: str
    score: float
    metrics: dict[str, float | None]
    round_steps: int  # env-steps this round
    env_steps: int  # env-steps of the lineage so far (parent's + this round's)
    checkpoint: str
    elapsed_s: float = 0.0
    phases: dict[str, float] | None = None  # a population round's seconds by phase (its pods share them)


class RoundError(Exception):
    """A pod round failed (raised, produced NaN, or its worker died); the message is one line."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit so the error survives pickling between processes with both fields.
        return (RoundError, (str(self), self.details))


RoundFn = Callable[[PodTask, RoundContext], PodOutcome]


def as_round_error(err: BaseException) -> RoundError:
    """``err`` as a one-line :class:`RoundError` (the traceback kept in ``details``)."""
    if isinstance(err, RoundError):
        return err
    return RoundError(one_line(err), traceback.format_exc())


def execute_round(round_fn: RoundFn, task: PodTask, ctx: RoundContext) -> PodOutcome:
    """Run ``round_fn`` and validate its outcome; every failure becomes a :class:`RoundError`."""
    start = time.monotonic()
    try:
        outcome = round_fn(task, ctx)
    except RoundError:
        raise
    except BaseException as err:  # noqa: BLE001 - a pod must never take the run down with it
        if isinstance(err, KeyboardInterrupt):
            raise
        raise as_round_error(err) from None
    return checked_outcome(outcome, start)


def checked_outcome(outcome: Any, start: float) -> PodOutcome:
    """``outcome`` if it is a :class:`PodOutcome` with a finite score (its ``elapsed_s`` filled in
    from ``start``, a ``time.monotonic()``); raises :class:`RoundError` otherwise."""
    if not isinstance(outcome, PodOutcome):
        raise RoundError(f"round function returned {type(outcome).__name__}, not PodOutcome")
    if not math.isfinite(outcome.score):
        raise RoundError(f"validation score is {outcome.score} (NaN or infinite)")
    if outcome.elapsed_s <= 0:
        outcome = dataclasses.replace(outcome, elapsed_s=time.monotonic() - start)
    return outcome


# --- the real round: PPO (or SAC) on the train window, scored on the valid window -----------------
def learner_round(task: PodTask, ctx: RoundContext) -> PodOutcome:
    """Train one pod for a round with its learner (``spec.algo``) and score it (see module docstring)."""
    start = time.monotonic()
    spec = task.spec
    if spec.algo not in LEARNERS:
        raise RoundError(f"unknown algo {spec.algo!r} (expected {', '.join(LEARNERS)})")
    args_cls, learn = LEARNERS[spec.algo]
    params = env_params(ctx)
    train_env = make_train_env(ctx, pod_num_envs(ctx), spec.seed)
    args = pod_args(args_cls, task, ctx)

    init = None
    if spec.init_checkpoint is not None:
        init = Checkpoint.load(spec.init_checkpoint, device=ctx.device)

    callbacks = []
    if task.round_seconds is not None:  # the round's wall-time cap: go on while there is time left
        deadline = start + task.round_seconds
        callbacks.append(lambda event: time.monotonic() < deadline)
    result = learn(args, train_env, callbacks=callbacks, init=init)

    for name, tensor in result.policy.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise RoundError(f"parameter {name} is not finite after training")

    scored = score_policy(
        result.policy,
        ctx.valid,
        params,
        fitness=ctx.fitness,
        annualization=ctx.annualization,
        device=ctx.device,
    )
    return save_round(task, result, scored, start)


def env_params(ctx: RoundContext) -> EnvParams:
    """The run's ``EnvParams`` (the ``EnvParams`` fields of ``ctx.env``)."""
    env_fields = {f.name for f in dataclasses.fields(EnvParams)}
    return EnvParams(**{k: v for k, v in ctx.env.items() if k in env_fields})


def pod_num_envs(ctx: RoundContext) -> int:
    """Envs of one pod (the run's ``num_envs``)."""
    return int(ctx.env.get("num_envs", 16))


def make_train_env(ctx: RoundContext, num_envs: int, seed: int = 0) -> TradingVecEnv:
    """An env of ``num_envs`` envs on the train window with the run's env settings (a pod's own, or a
    population's batch of all its pods' envs)."""
    return TradingVecEnv(
        ctx.train,
        env_params(ctx),
        num_envs=num_envs,
        device=ctx.device,
        seed=seed,
        fast_step=str(ctx.env.get("fast_step", "auto")),
    )


def pod_args(args_cls: type, task: PodTask, ctx: RoundContext) -> Any:
    """The learner arguments of a pod's round: the run's base arguments, the pod's hyper-parameters
    over them, its seed and the round's env-steps."""
    spec = task.spec
    raw = {**ctx.agent, **spec.hparams, "seed": spec.seed, "total_steps": task.round_steps}
    return learner_args(args_cls, raw, ctx.train, int(env_params(ctx).decision_interval))


def learner_args(args_cls: type, raw: Mapping[str, Any], train: MarketData, interval: int) -> Any:
    """``args_cls`` of the settings ``raw`` (base arguments and a pod's hyper-parameters; other keys
    ignored), a kind's ``"open"`` trade window resolved on the train window's sessions."""
    raw = dict(raw)
    if raw.get("trade_window") == OPEN_WINDOW:
        raw["trade_window"] = open_window(train.time_of_day, interval)
    if raw.get("nonlinear_start") and not raw.get("linear_start", True):
        raw["nonlinear_start"] = False  # (a run without the linear start has none to add to)
    arg_fields = {f.name for f in dataclasses.fields(args_cls)}
    return args_cls(**{k: v for k, v in raw.items() if k in arg_fields})


def open_window(time_of_day: Tensor, interval: int) -> float:
    """The trade window of a policy that trades at each session's first decision only: half way
    between the time of day of a full session's first bar (the window's least) and of its bar
    ``interval`` on (the second decision's), so a shorter session's first decision is inside it too."""
    first = float(time_of_day.min())
    return min(1.0, first * (1.0 + interval / 2.0))


def save_round(task: PodTask, result: TrainResult, scored: Scored, start: float) -> PodOutcome:
    """Write a trained and scored pod's files (checkpoint, curve, validation returns) and return its
    outcome (``start``: the round's ``time.monotonic()`` start)."""
    spec = task.spec
    score, metrics, series = scored
    out = Path(task.checkpoint_dir)
    Checkpoint(result.policy, result.optimizer_state).save(out)
    history = [dict(row) for row in result.history]
    if history:
        # The round's validation result on its last row, so training curves show it.
        history[-1].update({"eval/score": score, "eval/sharpe": metrics.get("sharpe_ratio")})
    _write_curve(out / CURVE, history, spec.parent_env_steps)
    write_valid_returns(out / VALID_RETURNS, series)
    return PodOutcome(
        pod_id=spec.pod_id,
        score=score,
        metrics=metrics,
        round_steps=int(result.env_steps),
        env_steps=spec.parent_env_steps + int(result.env_steps),
        checkpoint=str(out),
        elapsed_s=time.monotonic() - start,
    )


#: The PPO round is the learner round of a PPO pod (the name the orchestrator's default uses).
ppo_round = learner_round


def _write_curve(path: Path, history: list[Mapping[str, Any]], offset: int) -> None:
    """The round's training curve as parquet, with lineage env-steps so curves chain parent→child."""
    import pandas as pd

    frame = pd.DataFrame(list(history))
    if "env_steps" in frame.columns:
        frame["lineage_env_steps"] = frame["env_steps"] + offset
    with atomic_path(path, suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)


# --- scoring on the validation window (runs in the worker) ----------------------------------------
@dataclass(frozen=True)
class ValidReturns:
    """A pod's returns on the validation window: daily (one per session, what the Sharpe, the DSR and
    the PBO use) and per decision (the env's own periods)."""

    dates: Any  # (D,) numpy datetime64[D]: session dates
    daily: Any  # (D,) float64
    decision_timestamps: Any  # (K,) numpy datetime64[ns] UTC: the decision bars' start times
    decision: Any  # (K,) float64


#: What scoring a pod gives: ``(score, metrics, validation returns)``.
Scored = tuple[float, dict[str, float | None], ValidReturns]


def write_valid_returns(path: str | Path, series: ValidReturns) -> None:
    """``valid_returns.parquet``, long format: ``period`` ("daily" | "decision"), ``timestamp`` (UTC; a
    session's date at midnight for daily rows), ``value`` (the return). Written atomically."""
    import numpy as np
    import pandas as pd

    daily_ts = np.asarray(series.dates, dtype="datetime64[D]").astype("datetime64[ns]")
    frame = pd.DataFrame(
        {
            "period": ["daily"] * len(daily_ts) + ["decision"] * len(series.decision_timestamps),
            "timestamp": pd.DatetimeIndex(
                np.concatenate([daily_ts, np.asarray(series.decision_timestamps, dtype="datetime64[ns]")])
            ).tz_localize("UTC"),
            "value": np.concatenate(
                [np.asarray(series.daily, dtype=np.float64), np.asarray(series.decision, dtype=np.float64)]
            ),
        }
    )
    with atomic_path(Path(path), suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)


def read_valid_returns_matrix(
    pods_dir: str | Path, pod_ids: list[str], period: str = "daily"
) -> tuple[Any, Any, list[str]]:
    """``(timestamps (T,), returns (T, N), pod_ids)`` of the pods in ``pod_ids`` that have a
    ``valid_returns.parquet`` (runs from before it was written have none: they are left out), one
    column per pod, rows the union of their timestamps (NaN where a pod has none; every pod of a run
    is scored on the same window, so there are none)."""
    import numpy as np
    import pandas as pd

    if period not in PERIODS:
        raise ValueError(f"period must be one of {PERIODS}, got {period!r}")
    columns: dict[str, Any] = {}
    for pod_id in pod_ids:
        path = Path(pods_dir) / pod_id / VALID_RETURNS
        if not path.is_file():
            continue
        frame = pd.read_parquet(path)
        rows = frame[frame["period"] == period]
        columns[pod_id] = pd.Series(rows["value"].to_numpy(), index=pd.DatetimeIndex(rows["timestamp"]))
    if not columns:
        return np.empty(0, "datetime64[ns]"), np.empty((0, 0)), []
    table = pd.DataFrame(columns).sort_index()
    stamps = table.index.tz_convert("UTC").tz_localize(None).to_numpy(dtype="datetime64[ns]")
    return stamps, table.to_numpy(dtype=np.float64), list(table.columns)


def score_policy(
    policy: Callable[[Tensor], Tensor],
    valid: MarketData,
    params: Any,
    *,
    fitness: str = "sharpe",
    annualization: int,
    device: str | torch.device = "cpu",
) -> tuple[float, dict[str, float | None], ValidReturns]:
    """Backtest ``policy`` deterministically on ``valid``; return ``(score, metrics, returns)``.

    ``metrics`` holds the summary metrics of the daily returns (floats or None: an all-cash pod's
    Sharpe is None), so the Sharpe of every pod is recorded whatever the fitness (the run record's
    ``trial_sharpes`` needs it); ``returns`` the daily and per-decision validation returns.
    """
    (scored,) = _score(valid, params, {"pod": policy}, fitness, annualization, device)
    if isinstance(scored, RoundError):
        raise scored
    return scored


def score_policies(
    batch: PolicyBatch | Mapping[str, Callable[[Tensor], Tensor]],
    valid: MarketData,
    params: Any,
    *,
    fitness: str = "sharpe",
    annualization: int,
    device: str | torch.device = "cpu",
) -> list[Scored | RoundError]:
    """:func:`score_policy` of every policy of ``batch`` (a population's batch, or named policies:
    each its own row of the env), from one batched backtest: the
    same scores, metrics and returns, or a :class:`RoundError` for a policy whose returns are not
    finite (the others are unaffected: every policy is its own row of the env)."""
    return _score(valid, params, batch, fitness, annualization, device)


def _score(
    valid: MarketData,
    params: Any,
    policies: Mapping[str, Callable[[Tensor], Tensor]] | PolicyBatch,
    fitness: str,
    annualization: int,
    device: str | torch.device,
) -> list[Scored | RoundError]:
    if fitness not in FITNESS:
        raise ValueError(f"unknown fitness {fitness!r} (expected one of {FITNESS})")
    with torch.no_grad():
        scores = score_window(
            valid, params, policies, kind=fitness, annualization=annualization, nan_value=0.0, device=device
        )
    result = scores.result
    dates, daily = result.daily_returns()
    summary = result.summary(annualization)
    finite = (torch.isfinite(daily).all(dim=0) & torch.isfinite(result.equity).all(dim=0)).tolist()
    bound = 2 * SCORE_CLIP if fitness == "calmar" else SCORE_CLIP
    out: list[Scored | RoundError] = []
    for name in policies.names if isinstance(policies, PolicyBatch) else policies:
        col = result.index(name)
        if not finite[col]:
            out.append(RoundError("validation returns contain NaN or inf"))
            continue
        values = {k: _to_float(v.reshape(-1)[col]) for k, v in summary.items()}
        values["num_days"] = float(daily.shape[0])
        series = ValidReturns(
            dates=dates,
            daily=daily[:, col].to(torch.float64).cpu().numpy(),
            decision_timestamps=result.timestamps,
            decision=result.returns[:, col].to(torch.float64).cpu().numpy(),
        )
        out.append((max(-bound, min(bound, scores.of(name))), values, series))
    return out


def _to_float(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
