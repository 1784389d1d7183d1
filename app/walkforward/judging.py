"""Where a walk-forward meets the nightly gate and the backtest's verdict: the two calls to rewire
when either rule changes.

- :func:`replay_gate` (``[gate] rule = "window"`` or ``"always"``): a fold's challenger against the
  incumbent, by the code path of ``podracer retrain``: ``app.nightly.steps.score_step`` scores both on the gate's window (the
  incumbent on features normalized with its own statistics) and writes the challenger's out-of-sample
  test there at the gate's level, and ``app.gate.judge_challenger`` applies the promotion rule of
  ``app.gate.GateRule.of_config``, nightly's (``[gate] margin`` and an edge significant at ``[gate]
  level``). The
  gate's window is the fold's validation window, or with ``[walkforward] gate_sessions`` the sessions
  after it (a window the tournament did not rank on, as nightly's test window); the fold's test window
  is the out-of-sample account and no part of the gate reads it. The gates' looks are counted in the
  walk-forward's own looks ledger (``<run>/looks.sqlite``), so overlapping gate windows of successive
  folds deflate each other as nightly's do; a replay never reads or writes the home's registry.
- :func:`write_account_report`: the stitched out-of-sample account's report (``backtests.report``, the
  metrics.json contract) with its verdict: the whole span is ONE look (one strategy, selected fold by
  fold by rules fixed in advance), counted in the home's looks ledger once the last fold is done.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from app.champion import Champion
from app.config import Config
from app.evaluation import count_look, look_arguments, market_identity
from app.gate import GateResult, GateRule, judge_challenger
from app.nightly.steps import ChallengerRun, DataSnapshot, score_step
from app.runs import RunDir
from backtests import report
from backtests.engine import BacktestResult
from backtests.metrics_model import MetricsDocument, WalkForwardSummary, read_metrics
from backtests.verdict import judge, stated_verdict, verdict_fields
from data.features import DEFAULT_WINDOWS, lookback
from data.market import MarketData

log = logging.getLogger(__name__)

#: The ``window`` of the stitched account's metrics.json (its out-of-sample test reads it as held out).
ACCOUNT_WINDOW = "walkforward"


@dataclass(frozen=True)
class GateSplits:
    """What ``score_step`` reads of a market: the gate's window (``test``), the window the tournament
    ranked pods on (``valid``: the selection diagnostics) and bars that hold both with enough before
    them for the incumbent's features (``full``)."""

    full: MarketData
    valid: MarketData
    test: MarketData
    feed: str | None = None  # the bars' data feed (``data.loader.MarketSplits.feed``), for the report


def replay_gate(
    config: Config,
    run: RunDir,
    *,
    market: MarketData,
    valid: tuple[int, int],
    window: tuple[int, int],
    challenger: ChallengerRun,
    incumbent: Champion | None,
    feed: str | None = None,
) -> GateResult:
    """The gate of ``[gate] rule`` (``"window"``, or ``"always"``) on the fold's gate window (see the
    module docstring).

    ``market``: bars that hold the validation window ``valid`` and the gate's ``window`` (``[start,
    stop)`` indices of ``market``; the same range when the gate reads the validation window) with the
    challenger's features; ``incumbent``: the policy in charge (its ``run_dir`` record holds its
    feature spec), None before the first promotion; ``run``: the walk-forward (its looks ledger);
    ``feed``: the bars' data feed, recorded in the gate's report.
    The gate's figures are written to the challenger's run as nightly writes them (``backtest/``),
    labelled with their window.
    """
    # Bars before the windows only feed the incumbent's causal features (data.features.lookback).
    first = max(0, valid[0] - lookback((market.feature_spec or {}).get("windows") or DEFAULT_WINDOWS))
    held = market.slice(first, window[1])
    splits = GateSplits(
        full=held,
        valid=held.slice(valid[0] - first, valid[1] - first),
        test=held.slice(window[0] - first, window[1] - first),
        feed=feed,
    )
    dates = splits.test.date_range()
    quiet = config.with_updates(nightly={"tearsheet": False})
    snapshot = DataSnapshot(splits=splits, windows={"valid": splits.valid.date_range(), "test": dates})
    evaluation = score_step(quiet, run.path, snapshot, challenger, incumbent)
    labelled = _label_gate_window(RunDir.at(challenger.run_dir), "valid" if window == valid else "gate")
    # On the validation window the verdict is a selection-window verdict, and says so.
    evaluation = dataclasses.replace(evaluation, edge=stated_verdict(labelled))
    return judge_challenger(GateRule.of_config(config), evaluation, incumbent, window=dates)


def _label_gate_window(run: RunDir, window: str) -> MetricsDocument:
    """The gate's report names its window for what it is in a walk-forward, and its verdict is judged
    again for it (on the validation window: "on the selection window", never "out of sample")."""
    note = f"the walk-forward's gate decided on this fold's {window} window"
    doc = read_metrics(run.backtest_metrics).model_copy(update={"window": window, "role_note": note})
    oos = doc.oos_test
    if oos is not None and oos.strategy is not None:
        doc = doc.model_copy(update=verdict_fields(judge(doc, oos.strategy)))
    doc.write(run.backtest_metrics)
    return doc


#: The share of the level a walk-forward's provisional reports spend together: each of the
#: ``planned_folds`` provisional reports (one after each fold) is tested at ``level * PROVISIONAL_SHARE
#: / planned_folds`` and the final one at ``level * (1 - PROVISIONAL_SHARE)``. By the union bound
#: the chance that any report of a null span reads "significant" stays at most ``level``, whichever
#: report a reader stops at (an alpha-spending schedule; most of the level kept for the whole span).
PROVISIONAL_SHARE = 0.1


def report_level(level: float, *, final: bool, planned_folds: int | None) -> float:
    """The level one report of a walk-forward's stitched account is tested at (see
    :data:`PROVISIONAL_SHARE`); without a plan (``planned_folds`` None) the report is the only one."""
    if planned_folds is None:
        return level
    if final:
        return level * (1.0 - PROVISIONAL_SHARE)
    return level * PROVISIONAL_SHARE / max(planned_folds, 1)


def write_account_report(
    run: RunDir,
    result: BacktestResult,
    *,
    config: Config,
    home: Path | None,
    tearsheet: bool,
    walkforward: WalkForwardSummary,
    final: bool = True,
    planned_folds: int | None = None,
    policy: str = "",
    capacity: BacktestResult | None = None,
    data_feed: str | None = None,
) -> MetricsDocument:
    """The stitched account's report in ``<run>/backtest/`` (the account as ``champion``, the baselines
    beside it), its out-of-sample test over the span so far, with ``walkforward`` (the folds and
    champions) in its metrics.json; ``final``: the last fold is done; ``data_feed``: the bars' feed
    (``data.loader.MarketSplits.feed``), recorded with ``[data] volume_scale``.

    The span is one look: only the final report is counted in the home's looks ledger (with ``home``;
    keyed by ``policy``, the digest of the policies in charge) and its verdict stated with the looks
    counted now. The provisional reports after each fold (not ``final``) are tested at the level the
    span's alpha-spending schedule gives them (:func:`report_level`, out of ``planned_folds``), so
    stopping at any of them keeps the span's error at the configured level. Returns the document."""
    identity = market_identity(config.data)
    level = report_level(config.backtest.significance_level, final=final, planned_folds=planned_folds)
    counted = None
    if home is not None and final:
        counted = count_look(
            home,
            run.run_id,
            result,
            window=report.HELD_OUT_WINDOW,
            market=identity,
            policy=policy,
            run_dir=run,
        )
    params = config.env
    doc = report.write_report(
        run.path,
        result,
        window=report.HELD_OUT_WINDOW,  # every session of the span is out of sample
        tearsheet=tearsheet,
        annualization=config.backtest.annualization,
        num_trials=1,
        cost_rate=params.cost_rate,
        slippage_bps=params.slippage_bps,
        execution=report.execution_settings(
            params, data_feed=data_feed, volume_scale=config.data.volume_scale
        ),
        significance_level=level,
        seed=config.tournament.seed,
        market=identity,
        capacity=capacity,
        max_participation=params.max_participation,
        **look_arguments(counted),
    )
    # The account selected nothing itself: each fold's tournament did, and its gate report says how.
    diagnostics = "selection diagnostics: each fold's own, in its gate report (folds/fold-<k>/backtest/)"
    doc = doc.model_copy(
        update={
            "window": ACCOUNT_WINDOW,
            "final": final,
            "verdict_diagnostics": diagnostics if doc.verdict_outcome else None,
            "walkforward": walkforward,
        }
    )
    doc.write(run.backtest_metrics)
    return doc
