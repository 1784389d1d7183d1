"""What every app stage that judges a policy on a window shares: the backtest command
(``app.workflows.backtest``), the nightly gate (``app.nightly.steps``) and walk-forward
(``app.walkforward``) check that the policy fits the market, name the market for the looks ledger and
count the look there; the tournament's stages rank pods on a validation window of at least
:data:`MIN_VALID_SESSIONS`; the selection diagnostics read every trial's validation returns
(:func:`trial_returns`, :func:`selection_inputs`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from agents.ensemble import ENSEMBLE_POD
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import read_valid_returns_matrix
from app.runs import CHAMPION_START, RunDir
from backtests import engine, looks, looks_memory, oos_test, report
from backtests.snooping import SelectionInputs
from data.errors import CheckpointError

log = logging.getLogger(__name__)

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


#: The identity of every market of exchange bars (the bar store, the shipped sample).
EXCHANGE_BARS = "exchange bars"


def market_identity(data: Any) -> str:
    """What makes two backtests look at the same prices (``backtests.looks``), by the data, not the
    name it was loaded under: synthetic prices are the generator's (seed and signal change every
    price); exchange bars, stored or shipped, are one ticker's trading on one date whichever source
    holds them, so they are one market (``EXCHANGE_BARS``) and the ledger's overlap rule, which reads
    the windows' dates and the ticker sets, says which looks saw the same bars. The interval and the
    ticker list are not part of it: the same bars at 5m or 1m, or with one ticker more, are one market."""
    if data.source == "synthetic":
        identity = f"synthetic seed={data.seed} signal={data.signal:g}"
        # Another planted shape or level is another market (the default's identity is as it was).
        if getattr(data, "shape", "minute_momentum") != "minute_momentum":
            identity += f" shape={data.shape}"
        if getattr(data, "target_ic", None) is not None:
            identity += f" target_ic={data.target_ic:g}"
        return identity
    return EXCHANGE_BARS


#: Windows whose returns include held-out sessions: every backtest of them is a look.
LOOK_WINDOWS = ("test", "full")


def policy_digest(*policy_dirs: Path | str) -> str:
    """A digest of the policies' weights and specs (the look key's ``policy``): a new champion under a
    reused run name is a new look."""
    digest = hashlib.sha256()
    for policy_dir in policy_dirs:
        for path in sorted(Path(policy_dir).rglob("*")):
            if path.is_file() and path.suffix in (".safetensors", ".json"):
                digest.update(path.relative_to(policy_dir).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def count_look(
    home: Path,
    run: str,
    result: engine.BacktestResult,
    *,
    window: str,
    market: str,
    policy: str = "",
    run_dir: RunDir | None = None,
) -> tuple[looks.Look, looks.LookCount] | None:
    """Record the selected strategy's look at a window with held-out sessions (:data:`LOOK_WINDOWS`) in
    ``<home>/looks.sqlite``; None for another window or a backtest without a selected strategy.

    With ``run_dir``, the count is also the run's own (``backtests.looks_memory``): the larger of the
    ledger's and the one the run remembers for the window (a lower bound when a ledger that counted
    some of those looks is gone), and the run remembers it (``<run>/looks.json``). A malformed memory
    is a one-line error before the look is recorded."""
    strategy = report.selected_strategy(result)
    if window not in LOOK_WINDOWS or strategy is None:
        return None
    _, daily = result.daily_returns()
    returns = daily[:, result.names.index(strategy)].detach().cpu().numpy()
    start, end = result.date_range()
    look = looks.Look(
        run,
        strategy,
        market,
        start,
        end,
        len(returns),
        # A view of the whole span shows the held-out sessions (a look) but its Sharpe ratio is mostly
        # in-sample: it must not set the hurdle of the out-of-sample looks.
        oos_test.sharpe_per_day(returns) if window == "test" else None,
        policy=f"{policy}:{result_digest(returns)}" if policy else result_digest(returns),
        tickers=tuple(result.tickers),
    )
    if run_dir is None:
        count = looks.record_look(looks.ledger_path(home), look)
    else:
        count = looks_memory.record_and_remember(
            looks.ledger_path(home), look, run_dir.remembered_looks, report=run_dir.backtest_metrics
        )
    return dataclasses.replace(look, ledger=count.ledger), count


def result_digest(returns: Any) -> str:
    """A digest of what a look saw: the judged strategy's daily returns (rounded to 1e-12), which
    everything that changes the result moves (costs, execution, decision interval, seed, the bars):
    editing any of them and backtesting again is a new look; backtesting again unchanged is not."""
    values = np.round(np.asarray(returns, dtype=np.float64), 12) + 0.0  # + 0.0: -0.0 hashes as 0.0
    return hashlib.sha256(values.tobytes()).hexdigest()[:12]


def look_arguments(counted: tuple[looks.Look, looks.LookCount] | None) -> dict[str, Any]:
    """The report's keywords for a counted look: the earlier looks it is first judged with, the look
    itself and the looks counted now (``backtests.report.metrics_document``)."""
    if counted is None:
        return {}
    look, count = counted
    return {"earlier_looks": count.earlier_sharpes, "look": look, "now": count.now}


def trial_returns(run_dir: RunDir) -> tuple[Any, Any, list[str]] | None:
    """``(dates (T,), returns (T, N), ids)``: the daily validation returns of every scored pod of a
    tournament run, the ensemble last (None for a single run, which has no leaderboard, or a run
    from before pods kept their returns)."""
    if not run_dir.leaderboard.is_file():
        return None
    scored = [p["pod_id"] for p in read_pods(run_dir.path) if p.get("score") is not None]
    when, returns, ids = read_valid_returns_matrix(run_dir.pods, scored, period="daily")
    # The ensemble (app.ensemble.ensemble_step) is one more trial on the same window, and so is a
    # fine-tuned champion's start, scored there by the refit (app.refit): each a column after the pods'.
    for extra in (ENSEMBLE_POD, CHAMPION_START):
        more_when, more, more_ids = read_valid_returns_matrix(run_dir.path, [extra], period="daily")
        if not (more_ids and ids):
            continue
        if not np.array_equal(np.asarray(more_when), np.asarray(when)):
            log.warning(
                "%s's validation returns do not line up with the pods': left out of the trials", extra
            )
            continue
        returns = np.column_stack([returns, more])
        ids = [*ids, *more_ids]
    return (when, returns, ids) if ids else None


def selection_inputs(
    run_dir: RunDir, valid: Any, params: Any, champion: str | None, *, device: str = "cpu"
) -> SelectionInputs | None:
    """The selection diagnostics' inputs: every trial's daily validation returns (:func:`trial_returns`),
    the column of the ``champion`` pod, and buy-and-hold's daily returns on the validation window
    ``valid`` on the same dates (its column left out when the dates do not line up)."""
    trials = trial_returns(run_dir)
    if trials is None:
        return None
    when, returns, ids = trials
    benchmark = engine.buy_and_hold_on(valid, params, when, device=device)
    if not np.isfinite(benchmark).all():
        log.warning("buy-and-hold's validation returns do not line up with the pods': no SPA test")
        benchmark = None
    # A fine-tuned champion that gave way to its start (app.refit) is judged by the start's look.
    refit = run_dir.info().extra.get("refit") or {}
    if refit.get("refitted") and refit.get("start_t") is not None and CHAMPION_START in ids:
        champion = CHAMPION_START
    column = ids.index(champion) if champion in ids else None
    return SelectionInputs(returns=returns, ids=tuple(ids), champion=column, benchmark=benchmark)
