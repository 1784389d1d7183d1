"""Nightly retraining: challenger vs champion, promote only when it is really better.

``run_retrain(config, home)`` under the lock ``<home>/retrain.lock``:

1. **update data**: optionally download the new bars (``nightly.update = "yfinance"|"alpaca"``, into
   the bar store), then build the market exactly as ``podracer train`` does (``data.loader``);
2. **tournament**: a new run ``<home>/runs/nightly-<UTC time>/`` trained on the TRAIN window and
   selected on the VALID window; the first ``nightly.warm_start_pods`` fresh pods start from the
   current champion's weights (the rest of the pool explores as usual);
3. **evaluate**: challenger and champion backtested together on the TEST window, the most recent
   sessions, which neither the tournament's selection nor (checked) the challenger's training saw;
4. **decide**: by ``[gate] rule`` (``app.gate``, the one home of the promotion rule's settings, read
   the same way by a walk-forward): ``"book"`` (the default) the shadow book (``app.nightly.shadow``):
   tonight's challenger enters it, an earlier one is promoted once the sessions after its creation
   pass the anytime-valid test at ``[gate] level``, and the champion is demoted when its edge is
   gone; ``"window"`` the fixed-window gate: promote only if the challenger's fitness beats the
   champion's by ``[gate] margin`` AND its out-of-sample test on the test window says "edge
   significant out of sample" at ``[gate] level`` (``backtests.verdict``, the rule of ``podracer
   backtest``), every earlier look at an overlapping window of the same market counted by the looks
   ledger. The result names the rule that decided (``GateResult.rule``). ``"always"`` (every
   challenger takes over) is a walk-forward's setting: a retrain refuses it;
5. **export** (on promotion): an onnxruntime bundle of the challenger (``app.export.export_bundle``)
   and an immutable copy of its policy under ``<home>/champions/<run_id>/``;
6. **record**: the decision row and, on promotion, the new champion pointer, or, on the shadow book's
   demotion, the pointer removed and a demotion row (``app.champion.ChampionDemotion``: run, reason,
   time, last session) in ONE SQLite transaction (``app.nightly.registry``): the only moment the
   champion changes. After a demotion no champion is in charge: paper trading holds
   ``[gate] before_champion`` as before the first promotion. The shadow book's night is written
   only after that commit (``app.nightly.shadow.commit_night``): a failure before it leaves the book
   as it was, and the next night replays the same sessions;
7. **prune** (``[retention] after_retrain``): ``app.nightly.retention.prune`` after the lock is released (it
   takes the lock itself); a failure there is logged, the decision stands.

The gate decides on the test window, so the figures measured there are **selection** figures: the
registry row's ``scores``, the champion pointer's ``info``, the run record's ``nightly`` and the run's
``metrics.json`` say ``"role": "selection"``. The out-of-sample record of a promoted champion is its
paper trading while in charge (``app.nightly.record.champion_timeline``).

Any failure before step 6 commits leaves the previous champion in place; the failure itself is
recorded as a ``failed`` decision (best effort) and raised as a one-line :class:`RetrainError`.
A run past ``[nightly] max_minutes`` is such a failure (``app.nightly.budget``): it is stopped
wherever it waits, recorded as failed with the budget as its reason, and its lock released.

This module is the orchestration: the lock, the order of the steps and the record; the decision is
the configured rule's (``app.gate.judge_challenger``'s or the book's), recorded as it is
(``DecisionRecord.decided``). The
data, tournament, evaluation and export steps live in ``app.nightly.steps``; they are injectable
(``RetrainSteps``) so tests drive every branch with fakes, and the real ones are
``steps.default_steps``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.champion import Champion, ChampionDemotion, ChampionNote
from app.config import Config
from app.gate import Evaluation, GateResult, GateRule, judge_challenger, shadow_settings
from app.nightly.budget import time_budget
from app.nightly.decision import DecisionRecord, DecisionRuns, DecisionWindows
from app.nightly.lock import RETRAIN_LOCK_NAME, ProcessLock
from app.nightly.record import SELECTION
from app.nightly.registry import current_champion, record_decision
from app.nightly.retention import prune
from app.nightly.shadow import Demotion, ShadowNight, book_decision, commit_night
from app.nightly.steps import ChallengerRun, DataSnapshot, RetrainSteps, default_steps, keep_champion_copy
from app.runs import RunDir
from backtests.metrics_model import StrategyMetrics
from data.errors import ConfigError, PodracerError, one_line

log = logging.getLogger(__name__)

LOCK_NAME = RETRAIN_LOCK_NAME
STEPS = ("update_data", "tournament", "evaluate", "decide", "export", "record")


class RetrainError(PodracerError):
    """A retrain step failed; the previous champion is still in place."""

    exit_code = 1


@dataclass(frozen=True)
class RetrainOutcome:
    """What one retrain decided (``podracer retrain --json`` prints :meth:`to_dict`)."""

    decision_id: int
    verdict: str  # "promoted" or "rejected"
    reason: str
    challenger_run_id: str
    previous_champion: str | None
    champion: str | None  # the champion after this run
    bundle: str | None
    fitness: str
    challenger_fitness: float | None
    champion_fitness: float | None
    challenger_edge: str | None  # the challenger's out-of-sample verdict line (backtests.verdict)
    eval_window: tuple[str, str]
    duration_s: float
    demoted: str | None = None  # the champion this run demoted (then ``champion`` is None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = dataclasses.asdict(self)
        out["eval_window"] = list(self.eval_window)
        return out


# --- the pipeline ---------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class _Progress:
    """What a retrain has established so far (its failure row records whatever it holds)."""

    started_at: str
    t0: float
    rule: GateRule
    champion: Champion | None
    inputs: dict[str, Any]
    step: str = "update_data"
    windows: DecisionWindows | None = None
    challenger: ChallengerRun | None = None
    gate: GateResult | None = None
    demotion: ChampionDemotion | None = None
    night: ShadowNight | None = None  # the book's night, written after the registry commits

    @property
    def runs(self) -> DecisionRuns:
        return DecisionRuns(
            challenger=self.challenger.run_id if self.challenger is not None else None,
            champion=self.champion.run_id if self.champion is not None else None,
        )

    def inputs_now(self) -> dict[str, Any]:
        return {**self.inputs, "duration_s": round(time.monotonic() - self.t0, 3)}


def run_retrain(
    config: Config,
    home: str | os.PathLike[str],
    *,
    steps: RetrainSteps | None = None,
    faults: Mapping[str, Callable[[], None]] | None = None,
) -> RetrainOutcome:
    """One retrain (see the module docstring). ``faults[step]`` runs right after ``step`` (tests);
    ``faults["record"]`` runs inside the registry transaction just before COMMIT."""
    rule = GateRule.of_config(config)
    if rule.rule == "always":
        raise ConfigError(
            '[gate] rule = "always" promotes every challenger untested: a walk-forward\'s setting; '
            'a retrain decides by "book" or "window"'
        )
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    steps = steps or default_steps()
    faults = dict(faults or {})
    unknown = set(faults) - set(STEPS)
    if unknown:
        raise ConfigError(f"unknown retrain step(s) {sorted(unknown)}; steps are {', '.join(STEPS)}")
    with (
        ProcessLock(home / LOCK_NAME, command="podracer retrain"),
        time_budget(config.nightly.max_minutes) as budget,
    ):

        def reached(name: str) -> None:
            hook = faults.get(name)
            if hook is not None:
                hook()
            budget.check()  # off the main thread the timer cannot interrupt a step: check between them

        progress = _Progress(
            started_at=_now(),
            t0=time.monotonic(),
            rule=rule,
            champion=current_champion(home),
            inputs={
                "config": config.model_dump(mode="json") if hasattr(config, "model_dump") else {},
                "pid": os.getpid(),
            },
        )
        try:
            decision_id, bundle = _retrain_steps(config, home, steps, progress, reached, faults.get("record"))
        except BaseException as err:
            error = _failed(home, progress, err)
            if error is err:
                raise
            raise error from err
    outcome = _outcome(progress, decision_id, bundle)
    log.info("retrain %s: %s", outcome.verdict, outcome.reason)
    retention = getattr(config, "retention", None)
    if retention is not None and retention.after_retrain:
        _prune_after(home, retention)
    return outcome


def _retrain_steps(
    config: Config,
    home: Path,
    steps: RetrainSteps,
    progress: _Progress,
    reached: Callable[[str], None],
    before_commit: Callable[[], None] | None,
) -> tuple[int, Path | None]:
    """The steps in order, each recording in ``progress`` what it established; returns the decision's
    id and the bundle exported on promotion."""
    data = steps.update_data(config, home)
    progress.windows = DecisionWindows.of(data.windows)
    progress.inputs.update(
        data_source=data.source,
        data_update=dict(data.update),
        windows={k: tuple(v) for k, v in data.windows.items()},
    )
    _check_windows(data)
    reached("update_data")

    progress.step = "tournament"
    challenger = progress.challenger = steps.tournament(config, home, data, progress.champion)
    progress.inputs.update(run_trials=challenger.num_trials, warm_started_from=challenger.warm_started_from)
    reached("tournament")

    progress.step = "evaluate"
    evaluation = steps.evaluate(config, home, data, challenger, progress.champion)
    reached("evaluate")

    progress.step = "decide"
    gate = progress.gate = _decide(config, home, data, evaluation, progress)
    challenger = progress.challenger
    reached("decide")

    bundle: Path | None = None
    new_champion: Champion | None = None
    if gate.promote:
        progress.step = "export"
        if config.nightly.export:
            bundle = steps.export(config, home, challenger)
        new_champion = _promoted(home, challenger, gate, progress, bundle)
        reached("export")

    progress.step = "record"
    decision = DecisionRecord.decided(
        gate,
        started_at=progress.started_at,
        decided_at=_now(),
        runs=progress.runs,
        windows=progress.windows,
        bundle=str(bundle) if bundle else None,
        inputs=progress.inputs_now(),
        # The gate decided on these figures: selection figures, not out-of-sample ones
        # (app.nightly.record: paper trading since promotion is the out-of-sample record).
        role=SELECTION,
    )
    decision_id = record_decision(
        home, decision, new_champion, demotion=progress.demotion, before_commit=before_commit
    )
    if progress.night is not None:  # the book follows the registry, never leads it
        _commit_book(home, progress.night)
    _label_run(challenger.run_dir, gate.promote, decision_id)
    return decision_id, bundle


#: The gate result's figures of tonight's challenger on the test window (cleared when the book promotes
#: an earlier night's run: its evidence is the book's e-values, in the reason).
_TONIGHTS_FIGURES = ("challenger_fitness", "edge", "edge_outcome", "looks", "psr_after_looks", "oos_test")


def _decide(
    config: Config, home: Path, data: DataSnapshot, evaluation: Evaluation, progress: _Progress
) -> GateResult:
    """The decision of ``[gate] rule``: the fixed window's on tonight's scores, or the shadow book's
    (``app.nightly.shadow``, at :func:`app.gate.shadow_settings`), which may promote an earlier
    night's challenger (then ``progress.challenger``) or demote the champion (``progress.demotion``).
    Either way the result holds tonight's challenger's figures on the test window and names the rule
    that decided."""
    assert progress.windows is not None and progress.challenger is not None  # the steps before ran
    gate = judge_challenger(progress.rule, evaluation, progress.champion, window=progress.windows.evaluation)
    if progress.rule.rule != "book":
        return gate
    tonight = progress.challenger.run_id
    promotion, progress.challenger, night = book_decision(
        config, home, data.splits.full, progress.challenger, progress.champion, shadow_settings(config)
    )
    progress.night = night
    progress.demotion = _demotion(night.demote, progress)
    update: dict[str, Any] = {"promote": promotion.promote, "reason": promotion.reason, "rule": "book"}
    if progress.challenger.run_id != tonight:  # an earlier night's run: tonight's figures are not its
        update |= dict.fromkeys(_TONIGHTS_FIGURES) | {"challenger": StrategyMetrics()}
        progress.inputs["tonights_challenger"] = tonight  # the decision row names both runs
    return gate.model_copy(update=update)


def _demotion(demote: Demotion | None, progress: _Progress) -> ChampionDemotion | None:
    """The registry's demotion row of the book's demotion of the champion in charge (None: none, or
    the book named another run than the registry's champion)."""
    champion, windows = progress.champion, progress.windows
    if demote is None or champion is None or demote.run_id != champion.run_id:
        return None
    session = windows.data[1] if windows is not None else None
    return ChampionDemotion(run_id=demote.run_id, reason=demote.reason, demoted_at=_now(), session=session)


def _check_windows(data: DataSnapshot) -> None:
    """By construction (whole-session splits) selection ends before evaluation starts: a data layer
    that broke this would let the test window leak into selection."""
    windows = {k: tuple(v) for k, v in data.windows.items()}
    if not windows["valid"][1] < windows["test"][0] or not windows["train"][1] < windows["valid"][0]:
        raise PodracerError(f"windows overlap: {windows} (train < valid < test required)")


def _promoted(
    home: Path, challenger: ChallengerRun, gate: GateResult, progress: _Progress, bundle: Path | None
) -> Champion:
    """The new champion pointer: an immutable copy of the challenger's policy and why it won."""
    windows = progress.windows
    assert windows is not None  # set by the update_data step
    policy_copy = keep_champion_copy(home, challenger)
    return Champion(
        run_id=challenger.run_id,
        policy_dir=str(policy_copy),
        promoted_at=_now(),
        bundle=str(bundle) if bundle else None,
        fitness=gate.fitness,
        fitness_value=gate.challenger_fitness,
        selection_end=windows.selection[1],
        eval_start=windows.evaluation[0],
        eval_end=windows.evaluation[1],
        # fitness_value / challenger_dsr / challenger_edge were measured on the window the gate
        # decided on: selection figures.
        info=ChampionNote(
            run_dir=str(challenger.run_dir),
            challenger_dsr=gate.psr_after_looks,
            challenger_edge=gate.edge,
            previous_champion=progress.runs.champion,
            eval_role=SELECTION,
        ),
    )


def _outcome(progress: _Progress, decision_id: int, bundle: Path | None) -> RetrainOutcome:
    gate, challenger, windows = progress.gate, progress.challenger, progress.windows
    assert gate is not None and challenger is not None and windows is not None  # the steps ran
    champion_id = progress.runs.champion
    kept = None if progress.demotion is not None else champion_id  # a demotion leaves none in charge
    return RetrainOutcome(
        decision_id=decision_id,
        verdict="promoted" if gate.promote else "rejected",
        reason=gate.reason or "",
        challenger_run_id=challenger.run_id,
        previous_champion=champion_id,
        champion=challenger.run_id if gate.promote else kept,
        bundle=str(bundle) if bundle else None,
        fitness=progress.rule.fitness,
        challenger_fitness=gate.challenger_fitness,
        champion_fitness=gate.incumbent_fitness,
        challenger_edge=gate.edge,
        eval_window=windows.evaluation,
        duration_s=round(time.monotonic() - progress.t0, 3),
        demoted=progress.demotion.run_id if progress.demotion is not None else None,
    )


def _failed(home: Path, progress: _Progress, err: BaseException) -> BaseException:
    """Record the failure (best effort), and the error to raise: a one-line :class:`RetrainError`
    (an interrupt or exit as it is)."""
    _record_failure(home, progress, err)
    if isinstance(err, KeyboardInterrupt | SystemExit):
        return err
    champion_id = progress.runs.champion
    kept = f"champion {champion_id} kept" if champion_id else "no champion yet"
    error = RetrainError(f"retrain failed at step {progress.step}: {one_line(err)} ({kept})")
    if isinstance(err, ConfigError):
        error.exit_code = err.exit_code  # the user's to fix, like any config error
    return error


def _prune_after(home: Path, retention: Any) -> None:
    """``[retention]`` applied after a retrain (``app.nightly.retention``); a failure is logged, never raised:
    the decision is recorded already, and the next night prunes again."""
    try:
        removed = prune(home, retention)
    except (OSError, PodracerError) as err:
        log.warning("prune after the retrain failed: %s", one_line(err))
        return
    if removed:
        log.info(
            "pruned %d item(s): %s", len(removed), ", ".join(f"{d.kind} {Path(d.path).name}" for d in removed)
        )


def _commit_book(home: Path, night: ShadowNight) -> None:
    """Best effort, after the commit: the night's shadow book. A failure is logged and the decision
    stands (the next night follows the registry's champion and replays these sessions)."""
    try:
        commit_night(home, night)
    except (OSError, PodracerError) as err:
        log.warning("the shadow book's night was not written (the next night replays it): %s", one_line(err))


def _label_run(run_dir: Path, promoted: bool, decision_id: int) -> None:
    """Best effort, after the commit: the challenger's run record says its test-window figures were
    the gate's selection figures (its ``metrics.json`` says so too: :func:`score_step`)."""
    try:
        RunDir.at(run_dir).update(
            nightly={
                "eval_role": SELECTION,
                "decision_id": decision_id,
                "verdict": "promoted" if promoted else "rejected",
            }
        )
    except (OSError, PodracerError) as err:
        log.warning("could not label run %s: %s", run_dir, one_line(err))


def _record_failure(home: Path, progress: _Progress, err: BaseException) -> None:
    """Best effort: a ``failed`` decision row, never touching the champion pointer."""
    try:
        record_decision(
            home,
            DecisionRecord.failed(
                started_at=progress.started_at,
                decided_at=_now(),
                step=progress.step,
                reason=one_line(err) or type(err).__name__,
                rule=progress.rule,
                runs=progress.runs,
                windows=progress.windows,
                gate=progress.gate,
                inputs=progress.inputs_now(),
            ),
        )
    except Exception as record_err:  # noqa: BLE001 - the original failure is what the user must see
        log.error("could not record the failed retrain in the registry: %s", one_line(record_err))
