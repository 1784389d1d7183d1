"""Nightly retraining: challenger vs champion, promote only when it is really better.

``run_retrain(config, home)`` under the lock ``<home>/retrain.lock``:

1. **update data**: optionally download the new bars (``nightly.update = "yfinance"|"alpaca"``, into
   the bar store), then build the market exactly as ``podracer train`` does (``data.loader``);
2. **tournament**: a new run ``<home>/runs/nightly-<UTC time>/`` trained on the TRAIN window and
   selected on the VALID window; the first ``nightly.warm_start_pods`` fresh pods start from the
   current champion's weights (the rest of the pool explores as usual);
3. **evaluate**: challenger and champion backtested together on the TEST window, the most recent
   sessions, which neither the tournament's selection nor (checked) the challenger's training saw;
4. **decide** (``app.nightly.decide``): promote only if the challenger's fitness beats the
   champion's by ``nightly.margin`` AND its out-of-sample test on the test window says "edge
   significant out of sample" at ``nightly.significance_level`` (``backtests.verdict``, the rule of
   ``podracer backtest``), every earlier look at an overlapping window of the same market counted by
   the looks ledger;
5. **export** (on promotion): an onnxruntime bundle of the challenger (``app.export.export_bundle``)
   and an immutable copy of its policy under ``<home>/champions/<run_id>/``;
6. **record**: the decision row and, on promotion, the new champion pointer in ONE SQLite
   transaction (``app.nightly.registry``): the only moment the champion changes;
7. **prune** (``[retention] after_retrain``): ``app.retention.prune`` after the lock is released (it
   takes the lock itself); a failure there is logged, the decision stands.

The gate decides on the test window, so the figures measured there are **selection** figures: the
registry row's ``scores``, the champion pointer's ``info``, the run record's ``nightly`` and the run's
``metrics.json`` say ``"role": "selection"``. The out-of-sample record of a promoted champion is its
paper trading while in charge (``app.nightly.record.champion_timeline``).

Any failure before step 6 commits leaves the previous champion in place; the failure itself is
recorded as a ``failed`` decision (best effort) and raised as a one-line :class:`RetrainError`.
A run past ``[nightly] max_minutes`` is such a failure (``app.nightly.budget``): it is stopped
wherever it waits, recorded as failed with the budget as its reason, and its lock released.

This module is the orchestration: the lock, the order of the steps, the decision and the record. The
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

from app.nightly.budget import time_budget
from app.nightly.decide import decide, decision_record, failure_record, finite, overlap_note
from app.nightly.lock import RETRAIN_LOCK_NAME, ProcessLock
from app.nightly.record import SELECTION
from app.nightly.registry import Champion, current_champion, record_decision
from app.nightly.shadow import book_decision
from app.nightly.steps import RetrainSteps, default_steps, gate_significance_level, keep_champion_copy
from app.retention import prune
from app.runs import RunDir
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = dataclasses.asdict(self)
        out["eval_window"] = list(self.eval_window)
        return out


# --- the pipeline ---------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_retrain(
    config: Any,
    home: str | os.PathLike[str],
    *,
    steps: RetrainSteps | None = None,
    faults: Mapping[str, Callable[[], None]] | None = None,
) -> RetrainOutcome:
    """One retrain (see the module docstring). ``faults[step]`` runs right after ``step`` (tests);
    ``faults["record"]`` runs inside the registry transaction just before COMMIT."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    steps = steps or default_steps()
    faults = dict(faults or {})
    unknown = set(faults) - set(STEPS)
    if unknown:
        raise ConfigError(f"unknown retrain step(s) {sorted(unknown)}; steps are {', '.join(STEPS)}")
    nightly = config.nightly
    fitness = nightly.fitness or config.tournament.fitness
    with (
        ProcessLock(home / LOCK_NAME, command="podracer retrain"),
        time_budget(nightly.max_minutes) as budget,
    ):
        started_at, t0 = _now(), time.monotonic()
        champion = current_champion(home)
        champion_id = champion["run_id"] if champion else None
        info: dict[str, Any] = {
            "fitness": fitness,
            "margin": nightly.margin,
            "significance_level": gate_significance_level(config),
            "champion_run_id": champion_id,
        }
        inputs: dict[str, Any] = {
            "config": config.model_dump(mode="json") if hasattr(config, "model_dump") else {},
            "pid": os.getpid(),
        }
        step = "update_data"

        def reached(name: str) -> None:
            hook = faults.get(name)
            if hook is not None:
                hook()
            budget.check()  # off the main thread the timer cannot interrupt a step: check between them

        try:
            data = steps.update_data(config, home)
            windows = {k: tuple(v) for k, v in data.windows.items()}
            info.update(
                data_start=(windows.get("full") or windows["train"])[0],
                data_end=(windows.get("full") or windows["test"])[1],
                selection_start=windows["valid"][0],
                selection_end=windows["valid"][1],
                eval_start=windows["test"][0],
                eval_end=windows["test"][1],
            )
            inputs.update(data_source=data.source, data_update=dict(data.update), windows=windows)
            # By construction (whole-session splits) selection ends before evaluation starts: a
            # data layer that broke this would let the test window leak into selection.
            if not windows["valid"][1] < windows["test"][0] or not windows["train"][1] < windows["valid"][0]:
                raise PodracerError(f"windows overlap: {windows} (train < valid < test required)")
            reached("update_data")

            step = "tournament"
            challenger = steps.tournament(config, home, data, champion)
            info["challenger_run_id"] = challenger.run_id
            inputs.update(run_trials=challenger.num_trials, warm_started_from=challenger.warm_started_from)
            reached("tournament")

            step = "evaluate"
            eval_window = (info["eval_start"], info["eval_end"])
            evaluation = steps.evaluate(config, home, data, challenger, champion)
            edge = evaluation.edge
            scores = {
                # The gate decides on these figures: they are selection figures, not out-of-sample
                # ones (app.nightly.record: paper trading since promotion is the out-of-sample record).
                "role": SELECTION,
                "challenger": dict(evaluation.challenger),
                "champion": dict(evaluation.champion) if evaluation.champion is not None else None,
                "challenger_test": evaluation.test.model_dump(exclude_unset=True) if evaluation.test else {},
                "challenger_edge": edge.text if edge is not None else None,
            }
            # The DSR over the looks counted: the Sharpe half of the significance check.
            test = evaluation.test
            info["num_trials"] = (test.looks if test is not None else None) or 1
            ch_fit = finite(evaluation.challenger.get("fitness"))
            champ_fit = (
                finite(evaluation.champion.get("fitness")) if evaluation.champion is not None else None
            )
            ch_dsr = test.psr_after_looks if test is not None else None
            info.update(challenger_fitness=ch_fit, champion_fitness=champ_fit, challenger_dsr=ch_dsr)
            reached("evaluate")

            step = "decide"
            promotion = decide(
                ch_fit,
                champ_fit,
                edge,
                has_champion=champion is not None,
                margin=nightly.margin,
                first_promotion=nightly.first_promotion,
                fitness=fitness,
            )
            reason = promotion.reason + overlap_note(champion, eval_window[0])
            if nightly.shadow_book:  # the shadow book's anytime-valid rule decides (app.nightly.shadow)
                promotion, challenger, _night = book_decision(
                    config, home, data.splits.full, challenger, champion
                )
                info["challenger_run_id"], reason = challenger.run_id, promotion.reason
            reached("decide")

            bundle: Path | None = None
            new_champion: Champion | None = None
            if promotion.promote:
                step = "export"
                if nightly.export:
                    bundle = steps.export(config, home, challenger)
                policy_copy = keep_champion_copy(home, challenger)
                new_champion = Champion(
                    run_id=challenger.run_id,
                    policy_dir=str(policy_copy),
                    promoted_at=_now(),
                    bundle=str(bundle) if bundle else None,
                    fitness=fitness,
                    fitness_value=ch_fit,
                    selection_end=info["selection_end"],
                    eval_start=info["eval_start"],
                    eval_end=info["eval_end"],
                    info={
                        "run_dir": str(challenger.run_dir),
                        "challenger_dsr": ch_dsr,
                        "challenger_edge": scores["challenger_edge"],
                        "previous_champion": champion_id,
                        # fitness_value / challenger_dsr / challenger_edge were measured on the window
                        # the gate decided on: selection figures.
                        "eval_role": SELECTION,
                    },
                )
                reached("export")

            step = "record"
            decision = decision_record(
                started_at=started_at,
                decided_at=_now(),
                promotion=promotion,
                reason=reason,
                info=info,
                bundle=str(bundle) if bundle else None,
                inputs={**inputs, "duration_s": round(time.monotonic() - t0, 3)},
                scores=scores,
            )
            decision_id = record_decision(home, decision, new_champion, before_commit=faults.get("record"))
            _label_run(challenger.run_dir, promotion.promote, decision_id)
        except BaseException as err:
            _record_failure(home, started_at, step, err, info, inputs, t0)
            if isinstance(err, KeyboardInterrupt | SystemExit):
                raise
            kept = f"champion {champion_id} kept" if champion_id else "no champion yet"
            error = RetrainError(f"retrain failed at step {step}: {one_line(err)} ({kept})")
            if isinstance(err, ConfigError):
                error.exit_code = err.exit_code  # the user's to fix, like any config error
            raise error from err

    outcome = RetrainOutcome(
        decision_id=decision_id,
        verdict=decision.verdict,
        reason=reason,
        challenger_run_id=challenger.run_id,
        previous_champion=champion_id,
        champion=challenger.run_id if promotion.promote else champion_id,
        bundle=str(bundle) if bundle else None,
        fitness=fitness,
        challenger_fitness=ch_fit,
        champion_fitness=champ_fit,
        challenger_edge=scores["challenger_edge"],
        eval_window=(info["eval_start"], info["eval_end"]),
        duration_s=round(time.monotonic() - t0, 3),
    )
    log.info("retrain %s: %s", outcome.verdict, outcome.reason)
    retention = getattr(config, "retention", None)
    if retention is not None and retention.after_retrain:
        _prune_after(home, retention)
    return outcome


def _prune_after(home: Path, retention: Any) -> None:
    """``[retention]`` applied after a retrain (``app.retention``); a failure is logged, never raised:
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


def _record_failure(
    home: Path,
    started_at: str,
    step: str,
    err: BaseException,
    info: Mapping[str, Any],
    inputs: Mapping[str, Any],
    t0: float,
) -> None:
    """Best effort: a ``failed`` decision row, never touching the champion pointer."""
    try:
        record_decision(
            home,
            failure_record(
                started_at=started_at,
                decided_at=_now(),
                step=step,
                reason=one_line(err) or type(err).__name__,
                info=info,
                inputs={**inputs, "duration_s": round(time.monotonic() - t0, 3)},
            ),
        )
    except Exception as record_err:  # noqa: BLE001 - the original failure is what the user must see
        log.error("could not record the failed retrain in the registry: %s", one_line(record_err))
