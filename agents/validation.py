"""The validation score a learner logs while training, through the backtest engine.

``validation_score_fn(valid, params)`` returns the function that ``ppo.train`` / ``sac.train`` call
(their ``eval_fn``) every ``eval_every`` env-steps: the deterministic policy and equal-weight
buy-and-hold are scored over the whole VALID window (``backtests.scoring.score_window``: same
``envs.trading.step``, same costs) and the result is summarized as

- ``score``: annualized Sharpe ratio of the policy's daily returns (the tournament's default fitness,
  ``backtests.scoring.fitness``; 0 when undefined, e.g. a flat equity curve),
- ``log_return`` / ``buy_and_hold_log_return``: total log growth of the window, and their difference
  ``excess_log_return``,
- ``cost_frac``: costs paid as a fraction of the initial value.

The test window is never touched here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from backtests.scoring import score_window
from data.market import MarketData


def validation_scores(
    policy: Callable, market: MarketData, params: Any, *, annualization: float
) -> dict[str, float]:
    """Deterministic backtest of ``policy`` vs buy-and-hold over ``market``; see the module docstring."""
    with torch.no_grad():
        scores = score_window(
            market,
            params,
            {"policy": policy},
            kind="sharpe",
            annualization=annualization,
            nan_value=0.0,
            baselines=("buy_and_hold",),
        )
    result = scores.result
    col, bh = result.index("policy"), result.index("buy_and_hold")
    initial = float(result.initial_value)
    final = result.equity[-1].double()
    log_ret = math.log(max(float(final[col]), 1e-12) / initial)
    bh_ret = math.log(max(float(final[bh]), 1e-12) / initial)
    sharpe = scores.of("policy")
    return {
        "score": sharpe,
        "sharpe": sharpe,
        "log_return": log_ret,
        "buy_and_hold_log_return": bh_ret,
        "excess_log_return": log_ret - bh_ret,
        "cost_frac": float(result.costs[:, col].sum()) / initial,
    }


def validation_score_fn(
    valid: MarketData, params: Any, *, annualization: float
) -> Callable[[Any], dict[str, float]]:
    """A ``score_fn(policy) -> metrics`` over the validation window (for ``train(..., eval_fn=)``)."""

    def score_fn(policy: Any) -> dict[str, float]:
        return validation_scores(policy, valid, params, annualization=annualization)

    return score_fn
