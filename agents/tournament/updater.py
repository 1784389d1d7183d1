"""The updater: score a pod on the validation window and put the result on the leaderboard.

Scoring runs in the worker (:func:`score_policy`): the pod's deterministic policy is backtested on the
whole validation window from its first bar, through ``backtests.engine`` and ``backtests.metrics``
(the very code that produces the final held-out numbers), so every pod is judged on the same bars
with costs on. Fitness (``tournament.fitness``):

- ``sharpe`` (default): annualized Sharpe of the daily validation returns, net of costs;
- ``return``: cumulative validation return;
- ``calmar``: annual return over max drawdown.

A metric that is undefined for a well-behaved policy (a flat all-cash policy has no return
dispersion, so its Sharpe is 0/0) scores 0 rather than failing the pod; infinities are clipped to
``±SCORE_CLIP``. A pod whose *returns* are NaN is a broken pod and is rejected as failed.

Recording (:class:`Updater`) runs in the orchestrator, the only writer of the leaderboard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from agents.tournament.leaderboard import Leaderboard
from agents.tournament.pod import PodOutcome, PodTask, RoundError
from data.market import MarketData

FITNESS = ("sharpe", "return", "calmar")
SCORE_CLIP = 1e3
_FITNESS_METRIC = {"sharpe": "sharpe_ratio", "return": "cum_returns_final", "calmar": "calmar_ratio"}


def fitness_from_metrics(metrics: Mapping[str, float | None], fitness: str) -> float:
    """The scalar score of a pod from its validation metrics (see the module docstring)."""
    if fitness not in FITNESS:
        raise ValueError(f"unknown fitness {fitness!r} (expected one of {FITNESS})")
    value = metrics.get(_FITNESS_METRIC[fitness])
    if value is None or math.isnan(value):
        return 0.0
    return max(-SCORE_CLIP, min(SCORE_CLIP, float(value)))


def score_policy(
    policy: Callable[[Tensor], Tensor],
    valid: MarketData,
    params: Any,
    *,
    fitness: str = "sharpe",
    annualization: int = 252,
    device: str | torch.device = "cpu",
) -> tuple[float, dict[str, float | None]]:
    """Backtest ``policy`` deterministically on ``valid``; return ``(score, metrics)``.

    ``metrics`` holds the summary metrics of the daily returns (floats or None), so the Sharpe of
    every pod is recorded whatever the fitness (``run.json``'s ``trial_sharpes`` needs it).
    """
    from backtests import engine, metrics

    with torch.no_grad():
        result = engine.run_backtest(valid, params, {"pod": policy}, baselines=(), device=device)
    daily = _column(result.daily_returns(), result, "pod")
    if not bool(torch.isfinite(torch.as_tensor(daily)).all()):
        raise RoundError("validation returns contain NaN or inf")
    summary = metrics.summary(daily, annualization=annualization)
    values = {k: _to_float(v) for k, v in summary.items()}
    values["num_days"] = float(len(daily))
    return fitness_from_metrics(values, fitness), values


def _column(daily: Any, result: Any, name: str) -> Tensor:
    """The ``name`` strategy's daily returns from whatever ``daily_returns()`` returned."""
    if hasattr(daily, "columns"):  # a pandas DataFrame, one column per strategy
        return torch.as_tensor(daily[name].to_numpy(), dtype=torch.float64)
    tensor = torch.as_tensor(daily, dtype=torch.float64)
    if tensor.ndim == 2:
        return tensor[:, list(result.names).index(name)]
    return tensor


def _to_float(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


class Updater:
    """Turns finished (or failed) rounds into leaderboard transactions."""

    def __init__(self, board: Leaderboard) -> None:
        self.board = board

    def apply(self, task: PodTask, outcome: PodOutcome) -> str:
        """Record a scored pod; ``"inserted"`` when it made the top K, else ``"rejected"``."""
        return self.board.record_score(
            task.spec.pod_id,
            score=outcome.score,
            metrics=outcome.metrics,
            round_steps=outcome.round_steps,
            env_steps=outcome.env_steps,
            elapsed_s=outcome.elapsed_s,
        )

    def fail(self, task: PodTask, error: BaseException, elapsed_s: float = 0.0) -> str:
        """Record a failed pod. Its planned round counts against the budget, so a run whose pods
        all crash still ends."""
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        self.board.record_failure(
            task.spec.pod_id, message, round_steps=task.round_steps, elapsed_s=elapsed_s
        )
        return "failed"
