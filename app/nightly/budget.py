"""The retrain's time budget (``[nightly] max_minutes``): past it, the run stops cleanly.

Why a timer signal and not only checks between steps: a step can hang (a market-data server that
accepts and never answers, a tournament round that never returns), and a check between steps never
comes. ``SIGALRM`` raises :class:`RetrainOverBudget` in the main thread wherever it is waiting
(sockets, sleeps, the tournament's loop), so the pipeline's failure path runs: the previous
champion stays, a ``failed`` decision names the budget, and the lock is released. Off the main
thread (no signals there) the budget is checked between steps only (:meth:`Budget.check`).

The budget's default and the slack ``podracer status`` allows past it are ``app.retrain_limits``'s.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

from data.errors import PodracerError


class RetrainOverBudget(PodracerError):
    """The retrain ran past ``[nightly] max_minutes``: stopped, previous champion kept."""

    exit_code = 1


class Budget:
    """A deadline ``minutes`` from now (``None``: none); :meth:`check` raises past it."""

    def __init__(self, minutes: float | None) -> None:
        self.minutes = minutes
        self.deadline = None if minutes is None else time.monotonic() + minutes * 60.0

    def message(self) -> str:
        return f"ran past its budget of [nightly] max_minutes = {self.minutes:g} and was stopped"

    def check(self) -> None:
        """Raise :class:`RetrainOverBudget` when the deadline has passed."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise RetrainOverBudget(self.message())


@contextlib.contextmanager
def time_budget(minutes: float | None) -> Iterator[Budget]:
    """Run the block under a budget of ``minutes`` (see the module docstring); the timer is
    disarmed and the previous handler restored on the way out."""
    budget = Budget(minutes)
    if minutes is None or threading.current_thread() is not threading.main_thread():
        yield budget
        return

    def expire(signum: int, frame: object) -> None:
        raise RetrainOverBudget(budget.message())

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, minutes * 60.0)
    try:
        yield budget
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)
