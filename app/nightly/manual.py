"""A person overrules the promotion rule, on the record: ``podracer promote RUN`` and ``podracer demote``.

:func:`promote_by_hand` puts a run of the home in charge: its champion policy is exported to an
onnxruntime bundle (``app.export.export_bundle``, as a retrain's export step does) and loaded back
with ``app.bundle.load_bundle`` (the checks ``paper --champion`` makes), its policy copied to
``<home>/champions/<run_id>/`` (``steps.keep_champion_copy``: what the next retrain scores as the
incumbent), then the decision and the pointer are written in one registry transaction
(``app.nightly.registry.record_decision``), like the rule's. :func:`demote_by_hand` removes the
champion in charge with a ``demotions`` row, as the shadow book's demotion does. Both rows say
``source = "manual"`` and carry the operator's reason (``DecisionRecord.by_hand``); the pointer of a
hand-promoted champion says it too (``ChampionNote.source``/``reason``), so ``podracer status`` and the
dashboard show it.

Everything downstream follows the pointer as it follows the rule's: the paper loop from the next
session's first cycle (the benchmark, or cash, after a demotion), the next retrain's gate and shadow
book (``follow_champion``: a new tenure record from the change), retention (the champion in charge and
its predecessor are kept). Both take ``<home>/retrain.lock``: never beside a retrain or a prune (exit
75), whose decision would otherwise be taken against a champion that is no longer in charge.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from app.bundle import load_bundle
from app.champion import Champion, ChampionDemotion, ChampionNote
from app.export import export_bundle
from app.nightly.decision import MANUAL, DecisionRecord
from app.nightly.lock import RETRAIN_LOCK_NAME, ProcessLock
from app.nightly.registry import current_champion, record_decision
from app.nightly.steps import ChallengerRun, keep_champion_copy
from app.runs import RUN_NAME, RunDir, runs_root
from data.errors import PodracerError, one_line
from data.scrub import scrub


class ManualError(PodracerError):
    """A hand-made champion change that cannot be made (nothing was written)."""


@dataclass(frozen=True)
class ManualOutcome:
    """What ``podracer promote`` / ``demote`` changed."""

    action: Literal["promoted", "demoted"]
    run_id: str  # the run put in charge, or the champion demoted
    previous: str | None  # the champion in charge before (a promotion); None: none was
    reason: str
    decision_id: int
    bundle: str | None = None  # the promoted run's bundle


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _reason(reason: str | None) -> str:
    """The operator's reason on one line, secrets masked (it is stored in the pointer's ``info`` too,
    which the registry does not scrub); none is an error (the record must say why)."""
    text = " ".join(str(reason or "").split())
    if not text:
        raise ManualError("--reason is empty: say why the champion changes by hand (it goes on the record)")
    return scrub(text)


def _who() -> dict[str, Any]:
    """Who made the change, for the decision's ``inputs``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name in some containers
        user = None
    return {"user": user, "pid": os.getpid()}


def _run(home: Path, run_id: str) -> RunDir:
    """The home's run ``run_id`` with a champion policy, or a one-line error."""
    if not RUN_NAME.match(run_id):
        raise ManualError(f"{run_id!r} is not a run id (a folder name under {runs_root(home)})")
    run = RunDir(home, run_id)
    if not run.exists():
        raise ManualError(f"no run {run_id!r} in {runs_root(home)}")
    if not run.champion.is_dir():
        raise ManualError(f"run {run_id} has no champion policy ({run.champion} is missing)")
    if run.status() == "running":
        raise ManualError(f"run {run_id}'s record says it is still running: promote a finished run")
    return run


def _bundle(home: Path, run: RunDir, exporter: str) -> Path:
    """The run's champion exported and loaded back as the paper loop will load it."""
    try:
        path = export_bundle(run.path, home=home, exporter=exporter)
    except PodracerError as err:
        raise ManualError(f"run {run.run_id}: its policy cannot be exported: {one_line(err)}") from None
    try:
        load_bundle(path)
    except PodracerError as err:
        raise ManualError(f"run {run.run_id}: its bundle {path} does not load: {one_line(err)}") from None
    return path


def promote_by_hand(
    home: str | os.PathLike[str], run_id: str, reason: str, *, exporter: str = "dynamo"
) -> ManualOutcome:
    """Put run ``run_id`` of ``home`` in charge, for ``reason`` (see the module docstring)."""
    home = Path(home)
    why = _reason(reason)
    run = _run(home, run_id)
    with ProcessLock(home / RETRAIN_LOCK_NAME, command="podracer promote"):
        previous = current_champion(home)
        if previous is not None and previous.run_id == run_id:
            raise ManualError(f"run {run_id} is already the champion (promoted {previous.promoted_at})")
        bundle = _bundle(home, run, exporter)
        policy = keep_champion_copy(home, ChallengerRun(run_id, run.path, run.champion, num_trials=0))
        now = _now()
        before = previous.run_id if previous is not None else None
        champion = Champion(
            run_id=run_id,
            policy_dir=str(policy),
            promoted_at=now,
            bundle=str(bundle),
            info=ChampionNote(run_dir=str(run.path), previous_champion=before, source=MANUAL, reason=why),
        )
        decision = DecisionRecord.by_hand(
            "promote",
            reason=why,
            decided_at=now,
            run_id=run_id,
            previous=before,
            bundle=str(bundle),
            inputs={"command": "podracer promote", "exporter": exporter, **_who()},
        )
        decision_id = record_decision(home, decision, champion)
    return ManualOutcome("promoted", run_id, before, why, decision_id, str(bundle))


def demote_by_hand(home: str | os.PathLike[str], reason: str) -> ManualOutcome:
    """Remove the champion in charge of ``home``, for ``reason``: the benchmark (or cash) takes over."""
    home = Path(home)
    why = _reason(reason)
    if current_champion(home) is None:  # read first: a home without a registry stays untouched
        raise ManualError("no champion in charge: nothing to demote")
    with ProcessLock(home / RETRAIN_LOCK_NAME, command="podracer demote"):
        champion = current_champion(home)  # again under the lock: a retrain may have changed it
        if champion is None:
            raise ManualError("no champion in charge: nothing to demote")
        now = _now()
        decision = DecisionRecord.by_hand(
            "demote",
            reason=why,
            decided_at=now,
            run_id=champion.run_id,
            inputs={"command": "podracer demote", **_who()},
        )
        demotion = ChampionDemotion(run_id=champion.run_id, reason=why, demoted_at=now, source=MANUAL)
        decision_id = record_decision(home, decision, demotion=demotion)
    return ManualOutcome("demoted", champion.run_id, champion.run_id, why, decision_id)
