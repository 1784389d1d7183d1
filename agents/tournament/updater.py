"""The updater: put a scored (or failed) pod on the leaderboard.

Scoring itself runs in the worker (:func:`agents.tournament.pod.score_policy`); recording
(:class:`Updater`) runs in the orchestrator, the only writer of the leaderboard.
"""

from __future__ import annotations

from agents.tournament.leaderboard import Leaderboard
from agents.tournament.pod import PodOutcome, PodTask
from data.errors import one_line


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
        self.board.record_failure(
            task.spec.pod_id, one_line(error, typed=False), round_steps=task.round_steps, elapsed_s=elapsed_s
        )
        return "failed"
