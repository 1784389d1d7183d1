"""Scoring policies on a window: backtest them from the window's first bar and turn their daily
returns into one fitness each, higher is better (the tournament's ranking and the training curves'
validation score use this; the final held-out numbers come from the same engine and metrics).

- :func:`score_window`: the backtest and the fitness of every strategy, together;
- :func:`fitness`: the fitness of a backtest already run (``"sharpe"``, ``"return"`` or ``"calmar"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from backtests import metrics as m
from backtests.engine import BacktestResult, PolicyBatch, PolicyFn, run_backtest
from data.errors import PodracerError
from data.market import MarketData
from envs.trading import EnvParams

FITNESS_KINDS: tuple[str, ...] = ("sharpe", "return", "calmar")
#: Calmar fitness: finite ratios are clipped to +-CALMAR_CAP; a strategy with no drawdown and a positive
#: return scores in (CALMAR_CAP, 2 * CALMAR_CAP), above every strategy with a drawdown, ordered by return.
CALMAR_CAP = 1e3


@dataclass(frozen=True)
class WindowScores:
    """The backtest of a window and one fitness per strategy (its columns)."""

    result: BacktestResult
    fitness: Tensor  # (S,) float64, in the order of result.names

    def of(self, name: str) -> float:
        """The fitness of strategy ``name``."""
        return float(self.fitness[self.result.index(name)])


def score_window(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, PolicyFn] | PolicyBatch,
    *,
    kind: str = "sharpe",
    annualization: float,
    nan_value: float = -math.inf,
    baselines: Sequence[str] = (),
    device: str | torch.device | None = None,
    num_threads: int | None = None,
) -> WindowScores:
    """Score ``policies`` (and any ``baselines``) on the whole ``market`` window: a deterministic
    :func:`~backtests.engine.run_backtest` (no baselines unless asked) and :func:`fitness` of each."""
    if kind not in FITNESS_KINDS:
        raise PodracerError(f"unknown fitness {kind!r}; choose from {', '.join(FITNESS_KINDS)}")
    result = run_backtest(
        market, params, policies, baselines=baselines, device=device, num_threads=num_threads
    )
    return WindowScores(result, fitness(result, kind, annualization=annualization, nan_value=nan_value))


def fitness(
    result: BacktestResult,
    kind: str = "sharpe",
    *,
    annualization: float,
    nan_value: float = -math.inf,
) -> Tensor:
    """One fitness per strategy ``(S,)`` from daily returns, higher is better.

    ``"sharpe"``: annualized Sharpe ratio; ``"return"``: total compounded return; ``"calmar"``: Calmar
    ratio clipped to ``+-CALMAR_CAP``. Undefined values (a flat equity curve has no Sharpe ratio) become
    ``nan_value``, so that sorting ranks them last.

    Calmar with no drawdown (no losing day, positive return) is annual return / 0, undefined as a ratio
    but the best possible risk profile: it must not rank below a weaker strategy that lost on some day,
    so it scores ``CALMAR_CAP * (2 - 1 / (1 + cumulative return))``, above every strategy with a
    drawdown (whose Calmar is at most ``CALMAR_CAP``) and increasing with the return among themselves.
    Flat at zero (all cash) stays undefined.
    """
    _, daily = result.daily_returns()
    if kind == "sharpe":
        out = m.sharpe_ratio(daily, annualization=annualization)
    elif kind == "return":
        out = m.cum_returns_final(daily)
    elif kind == "calmar":
        out = m.calmar_ratio(daily, annualization=annualization).clamp(-CALMAR_CAP, CALMAR_CAP)
        cum = m.cum_returns_final(daily)
        no_drawdown = (m.max_drawdown(daily) == 0) & (cum > 0)
        out = torch.where(no_drawdown, CALMAR_CAP * (2.0 - 1.0 / (1.0 + cum)), out)
    else:
        raise PodracerError(f"unknown fitness {kind!r}; choose from {', '.join(FITNESS_KINDS)}")
    return torch.where(torch.isnan(out), torch.full_like(out, nan_value), out)
