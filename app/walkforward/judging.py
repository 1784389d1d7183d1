"""Where a walk-forward meets the nightly gate and the backtest's verdict: the two calls to rewire
when either rule changes.

- :func:`replay_gate`: a fold's challenger against the incumbent, by the code path of
  ``podracer retrain``: ``app.nightly.steps.evaluate_step`` scores both on one window (the incumbent
  on features normalized with its own statistics), and ``app.nightly.decide.decide`` applies the
  promotion rule (``[nightly] margin``, the challenger's deflated Sharpe ratio over the pods tried at
  ``[nightly] dsr_threshold``, ``first_promotion``). The window is the fold's VALIDATION window: the
  test window is the out-of-sample account and no part of the gate may read it. The tournament
  selected the challenger on that window too, which is what the deflated Sharpe ratio accounts for:
  it is deflated for every pod tried there, plus every earlier fold's pods whose gate window overlaps
  (the rule of ``app.nightly.decide.trials_on_window``, over the walk-forward's own folds: a replay
  never reads or writes the home's registry).
- :func:`write_account_report`: the stitched out-of-sample account's report (``backtests.report``,
  the metrics.json contract) with its verdict: the whole span is ONE look (one strategy, selected
  fold by fold by rules fixed in advance), so its deflated Sharpe ratio is its probabilistic Sharpe
  ratio (``backtests.verdict.judge``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.nightly.decide import decide, finite, overlap_note
from app.nightly.steps import ChallengerRun, DataSnapshot, evaluate_step
from app.runs import RunDir
from backtests import report
from backtests.engine import BacktestResult
from data.atomic import atomic_write_json
from data.features import DEFAULT_WINDOWS, lookback
from data.market import MarketData

log = logging.getLogger(__name__)

GATES = ("nightly", "always")


@dataclass(frozen=True)
class GateSplits:
    """What ``evaluate_step`` reads of a market: the window it scores on (``test``) and a market that
    holds it with enough bars before it for the incumbent's features (``full``)."""

    full: MarketData
    test: MarketData


@dataclass(frozen=True)
class GateOutcome:
    """The gate's answer for one fold, and the figures it rests on (validation window)."""

    promote: bool
    reason: str
    fitness: str
    challenger: Mapping[str, float | None]  # metrics on the gate window, incl. fitness and DSR
    incumbent: Mapping[str, float | None] | None
    num_trials: int  # trials the challenger's DSR was deflated for
    window: tuple[str, str]
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the fold record's ``gate``)."""
        out = dataclasses.asdict(self)
        out["window"] = list(self.window)
        return report.json_safe(out)


def trials_on_gate_window(earlier: Sequence[Mapping[str, Any]], window: tuple[str, str]) -> int:
    """Pods of the earlier folds (their records) whose gate window overlaps ``window`` (inclusive ISO
    dates): their choices were made on these days too."""
    total = 0
    for record in earlier:
        gate = record.get("gate") or {}
        seen = gate.get("window")
        if seen and seen[0] <= window[1] and window[0] <= seen[1]:
            total += int(record.get("pods_tried") or 0)
    return total


def replay_gate(
    config: Any,
    home: Path,
    *,
    market: MarketData,
    valid: tuple[int, int],
    challenger: ChallengerRun,
    incumbent: Mapping[str, Any] | None,
    earlier: Sequence[Mapping[str, Any]] = (),
    gate: str = "nightly",
) -> GateOutcome:
    """The nightly gate on the fold's validation window (see the module docstring).

    ``market``: bars that hold the validation window ``valid = [start, stop)`` (indices of ``market``)
    with the challenger's features; ``incumbent``: the policy in charge, shaped like the registry's
    champion (``run_id``, ``policy_dir``, ``info.run_dir`` whose record holds its feature spec,
    ``selection_end``), None before the first promotion; ``earlier``: the completed folds' records.
    The gate's figures are written to the challenger's run as nightly writes them (``backtest/``),
    labelled as this validation window.
    """
    nightly = config.nightly
    fitness = nightly.fitness or config.tournament.fitness
    # Bars before the window only feed the incumbent's causal features (data.features.lookback).
    first = max(0, valid[0] - lookback((market.feature_spec or {}).get("windows") or DEFAULT_WINDOWS))
    held = market.slice(first, valid[1])
    window = held.slice(valid[0] - first, valid[1] - first)
    dates = window.date_range()
    num_trials = max(1, challenger.num_trials + trials_on_gate_window(earlier, dates))
    quiet = config.with_updates(nightly={"tearsheet": False})
    snapshot = DataSnapshot(splits=GateSplits(full=held, test=window), windows={"test": dates})
    evaluation = evaluate_step(quiet, home, snapshot, challenger, incumbent, num_trials)
    _label_gate_window(RunDir.at(challenger.run_dir))
    ch_fit = finite(evaluation.challenger.get("fitness"))
    inc_fit = finite(evaluation.champion.get("fitness")) if evaluation.champion is not None else None
    ch_dsr = finite(evaluation.challenger.get("deflated_sharpe_ratio"))
    if gate == "always":
        promote, reason = True, "gate = always: the fold's challenger takes over"
    else:
        verdict = decide(
            ch_fit,
            inc_fit,
            ch_dsr,
            has_champion=incumbent is not None,
            margin=nightly.margin,
            dsr_threshold=nightly.dsr_threshold,
            first_promotion=nightly.first_promotion,
            fitness=fitness,
        )
        promote, reason = verdict.promote, verdict.reason + overlap_note(incumbent, dates[0])
    return GateOutcome(
        promote=promote,
        reason=reason,
        fitness=fitness,
        challenger=dict(evaluation.challenger),
        incumbent=dict(evaluation.champion) if evaluation.champion is not None else None,
        num_trials=num_trials,
        window=dates,
        figures={
            "challenger_fitness": ch_fit,
            "incumbent_fitness": inc_fit,
            "challenger_dsr": ch_dsr,
            "margin": nightly.margin,
            "dsr_threshold": nightly.dsr_threshold,
        },
    )


def _label_gate_window(run: RunDir) -> None:
    """The gate's report names its window for what it is in a walk-forward: the validation window."""
    doc = json.loads(run.backtest_metrics.read_text(encoding="utf-8"))
    doc.update(window="valid", role_note="the walk-forward's gate decided on this fold's validation window")
    atomic_write_json(run.backtest_metrics, doc)


def write_account_report(
    run: RunDir,
    result: BacktestResult,
    *,
    annualization: float,
    cost_rate: float,
    slippage_bps: float,
    tearsheet: bool,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """The stitched account's report in ``<run>/backtest/`` (the account as ``champion``, the baselines
    beside it), judged as ONE look at the span, with ``extra`` (the walk-forward's keys) merged into
    its metrics.json. Returns the document."""
    doc = report.write_report(
        run.path,
        result,
        window="walkforward",
        annualization=annualization,
        num_trials=1,
        cost_rate=cost_rate,
        slippage_bps=slippage_bps,
        tearsheet=tearsheet,
    )
    doc = report.json_safe({**doc, **extra})
    atomic_write_json(run.backtest_metrics, doc)
    return doc
