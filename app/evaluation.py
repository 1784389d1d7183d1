"""What every app stage that judges a policy on a window shares: the backtest command
(``app.workflows.backtest``), the nightly gate (``app.nightly.steps``) and walk-forward
(``app.walkforward``) check that the policy fits the market, name the market for the looks ledger and
count the look there; the tournament's stages rank pods on a validation window of at least
:data:`MIN_VALID_SESSIONS`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from backtests import engine, looks, oos_test, report
from data.errors import CheckpointError

#: Fewest sessions in the validation window for a pod's validation Sharpe (of daily returns) to mean
#: anything: with fewer, a handful of days decides the ranking, every all-cash pod ties at an undefined
#: Sharpe and the champion is whichever came first. 10 sessions are two trading weeks.
MIN_VALID_SESSIONS = 10


def check_policy_fits(policy: Any, market: Any, params: Any) -> None:
    """A policy can trade ``market`` under ``params``: same tickers, shapes and action mode."""
    tickers = tuple(getattr(policy.meta, "tickers", ()) or ())
    if tickers and tickers != tuple(market.tickers):
        raise CheckpointError(
            f"champion was trained on {len(tickers)} tickers that differ from the market's "
            f"{len(market.tickers)} ({', '.join(market.tickers[:5])}...)"
        )
    if policy.config.num_features != market.num_features or policy.num_assets != market.num_assets:
        raise CheckpointError(
            f"champion expects {policy.num_assets} assets x {policy.config.num_features} features, the market "
            f"has {market.num_assets} x {market.num_features}"
        )
    if policy.meta.action_mode != params.action_mode:
        raise CheckpointError(
            f"champion acts in {policy.meta.action_mode!r} mode but the run's env uses {params.action_mode!r}"
        )


def market_identity(data: Any, tickers: Sequence[str]) -> str:
    """What makes two backtests look at the same market (``backtests.looks``): for synthetic data
    every setting that changes a price (seed, signal, tickers, sessions, start, interval); for stored
    or shipped data the source, the interval and the set of tickers (a digest of the sorted symbols)."""
    names = sorted(str(t) for t in tickers)
    if data.source == "synthetic":
        return (
            f"synthetic seed={data.seed} signal={data.signal:g} tickers={len(names)} "
            f"sessions={data.num_sessions} start={data.start} interval={data.interval}"
        )
    digest = hashlib.sha256(" ".join(names).encode()).hexdigest()[:16]
    return f"{data.source} interval={data.interval} tickers={len(names)} set={digest}"


def count_look(
    home: Path, run: str, result: engine.BacktestResult, *, window: str, market: str
) -> looks.LookCount | None:
    """Record the selected strategy's look at a held-out window in ``<home>/looks.sqlite``; None for
    another window (no look at held-out data) or a backtest without a selected strategy."""
    strategy = report.selected_strategy(result)
    if window != report.HELD_OUT_WINDOW or strategy is None:
        return None
    _, daily = result.daily_returns()
    returns = daily[:, result.names.index(strategy)].detach().cpu().numpy()
    start, end = result.date_range()
    look = looks.Look(run, strategy, market, start, end, len(returns), oos_test.sharpe_per_day(returns))
    return looks.record_look(looks.ledger_path(home), look)
