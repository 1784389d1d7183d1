"""A walk-forward's folds on the loaded market's calendar: bars, dates and the per-fold settings.

:func:`plan_folds` turns ``[walkforward]``'s layout (``backtests.folds``, in sessions) into bar ranges
and session dates of the loaded market, and checks on the dates that every fold's train, validation
and gate windows end before its embargo and test window; :func:`fold_config` is a fold's tournament
config (its budget and seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.config import Config
from app.evaluation import MIN_VALID_SESSIONS
from backtests import folds as fl
from data.errors import ConfigError, PodracerError
from data.market import MarketData


@dataclass(frozen=True)
class FoldPlan:
    """A fold with its windows in bars of the loaded market and in session dates."""

    fold: fl.Fold
    bars: dict[str, tuple[int, int]]  # train / valid / gate / test: half-open bar ranges
    dates: dict[str, tuple[str, str]]  # train / valid / gate / embargo / test: first and last session date

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the run record's layout, the fold record's windows)."""
        return {"index": self.fold.index, "sessions": self.fold.to_dict(), "windows": self.windows()}

    def windows(self) -> dict[str, list[str]]:
        return {name: list(d) for name, d in self.dates.items()}


def plan_folds(market: MarketData, settings: Any) -> list[FoldPlan]:
    """The folds of ``[walkforward]`` ``settings`` over ``market``'s sessions, with bars and dates."""
    if settings.valid_sessions < MIN_VALID_SESSIONS:
        raise ConfigError(
            f"walkforward.valid_sessions = {settings.valid_sessions}: at least {MIN_VALID_SESSIONS} are "
            "needed to rank pods by a validation Sharpe"
        )
    sid = market.session_id.cpu().numpy()
    num_sessions = int(sid[-1]) + 1
    bar = np.searchsorted(sid, np.arange(num_sessions + 1), side="left")  # first bar of each session
    days = market.session_dates()[bar[:-1]]
    first_test = None
    if settings.start:
        first_test = int(np.searchsorted(days, np.datetime64(settings.start, "D"), side="left"))
    layout = fl.fold_layout(
        num_sessions,
        train_sessions=settings.train_sessions,
        valid_sessions=settings.valid_sessions,
        step_sessions=settings.step_sessions,
        embargo_sessions=settings.embargo_sessions,
        gate_sessions=settings.gate_sessions,
        window=settings.window,
        first_test=first_test,
        max_folds=settings.num_folds or None,
    )

    def dates(window: tuple[int, int]) -> tuple[str, str]:
        return str(days[window[0]]), str(days[window[1] - 1])

    plans = []
    for fold in layout:
        windows = {
            "train": fold.train,
            "valid": fold.valid,
            "gate": fold.gate_window,
            "embargo": fold.embargo,
            "test": fold.test,
        }
        plan = FoldPlan(
            fold=fold,
            bars={k: (int(bar[w[0]]), int(bar[w[1]])) for k, w in windows.items() if k != "embargo"},
            dates={k: dates(w) for k, w in windows.items()},
        )
        _check_no_lookahead(plan)
        plans.append(plan)
    return plans


def _check_no_lookahead(plan: FoldPlan) -> None:
    d = plan.dates
    gate_ok = d["gate"] == d["valid"] or d["valid"][1] < d["gate"][0] <= d["gate"][1]
    if not (
        d["train"][1] < d["valid"][0] <= d["valid"][1]
        and gate_ok
        and d["gate"][1] < d["embargo"][0] <= d["embargo"][1] < d["test"][0]
    ):
        raise PodracerError(f"fold {plan.fold.index}: windows overlap or touch the test window: {d}")


def fold_config(config: Config, index: int) -> Config:
    """The config of fold ``index``'s tournament: ``[walkforward]``'s budget when it sets one, and the
    tournament seed plus the fold's index (each fold draws its own pods, reproducibly)."""
    wf = config.walkforward
    updates: dict[str, Any] = {"seed": config.tournament.seed + index}
    if wf.budget_steps is not None or wf.budget_minutes is not None:
        updates.update(budget_steps=wf.budget_steps, budget_minutes=wf.budget_minutes)
    return config.with_updates(tournament=updates)
