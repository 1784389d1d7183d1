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
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from agents.tournament.leaderboard import Leaderboard
from agents.tournament.pod import PodOutcome, PodTask, RoundError
from data.market import MarketData

FITNESS = ("sharpe", "return", "calmar")
SCORE_CLIP = 1e3


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
    every pod is recorded whatever the fitness (the run record's ``trial_sharpes`` needs it).
    """
    from backtests import engine

    if fitness not in FITNESS:
        raise ValueError(f"unknown fitness {fitness!r} (expected one of {FITNESS})")
    with torch.no_grad():
        result = engine.evaluate(valid, params, {"pod": policy}, device=device)
    _, daily = result.daily_returns()
    if not bool(torch.isfinite(daily).all()) or not bool(torch.isfinite(result.equity).all()):
        raise RoundError("validation returns contain NaN or inf")
    col = result.index("pod")
    values = {k: _to_float(v.reshape(-1)[col]) for k, v in result.summary(annualization).items()}
    values["num_days"] = float(daily.shape[0])
    raw = float(engine.fitness(result, fitness, annualization=annualization, nan_value=0.0)[col])
    return max(-SCORE_CLIP, min(SCORE_CLIP, raw)), values


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
