"""The orchestrator: keep the pool full until the budget is spent, asynchronously.

Loop: while budget remains and the backend has room, the generator makes a pod (fresh, or a mutated
child of a leaderboard entry) and the backend runs its round; as soon as *any* pod finishes, the
updater records it (scored → inserted/rejected, or failed) and a replacement is launched: no pod
ever waits for the others. At the end the champion (best entry) is copied to ``<run>/champion/``
and the caller's ``on_status`` hook gets the run's status: the pods tried and their validation
Sharpes; the application records it in the run folder.

The tournament receives only the train and valid windows: the test window is not an argument
anywhere in this package, so no pod, score or selection can depend on it.

Resume: every update is one SQLite transaction and a pod's checkpoint is complete before its score
is recorded, so after a kill -9, ``run_tournament(..., resume=True)`` marks the pods that were in
flight as failed (interrupted), keeps every leaderboard entry and its checkpoint, and goes on until
the original budget (env-steps and wall time, both counted across sessions) is spent. With
``interrupted="rerun"`` the pods that were in flight are run again instead, with the same spec and
before any new pod: with one pod in flight at a time and an env-step budget, a killed and resumed
run then ends with the same pods, scores and champion as a run that was never stopped (the
walk-forward's resume relies on it).

The settings (:class:`TournamentArgs`) and the decisions taken once from them for every pod (PPO's
``compile``, the round timeout) live in :mod:`agents.tournament.settings`.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.tournament.backend_choice import check_backend_args, make_backend
from agents.tournament.backends import Backend
from agents.tournament.generator import PodSpec, next_pod
from agents.tournament.leaderboard import FILENAME, Leaderboard
from agents.tournament.pod import CURVE, PodOutcome, PodTask, RoundContext, RoundError, RoundFn, learner_round
from agents.tournament.search_space import SearchSpace, default_search_space
from agents.tournament.settings import TournamentArgs, auto_round_timeout, learner_compile
from agents.tournament.updater import Updater
from data.atomic import atomic_write_text
from data.errors import CheckpointError, PodracerError, one_line
from data.market import MarketData

log = logging.getLogger(__name__)

CHAMPION_FILES = ("policy.safetensors", "spec.json")
#: What a resumed run does with the pods the killed one left in flight (``run_tournament``).
INTERRUPTED = ("fail", "rerun")


@dataclass
class TournamentResult:
    """What a finished (or resumed and finished) tournament produced."""

    run_id: str
    run_dir: Path
    champion: dict[str, Any] | None
    pods_tried: int
    pods_failed: int
    env_steps: int
    trial_sharpes: list[float | None] = field(default_factory=list)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)


def _check_windows(train: MarketData, valid: MarketData) -> None:
    if train.num_steps == 0 or valid.num_steps == 0:
        raise PodracerError("tournament: the train and valid windows must not be empty")
    if train.tickers != valid.tickers or train.num_features != valid.num_features:
        raise PodracerError("tournament: train and valid windows have different tickers or features")
    if not valid.timestamps[0] > train.timestamps[-1]:
        raise PodracerError("tournament: the valid window must start after the train window ends")


def _resolve(run_dir: Path, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with checkpoint paths made absolute (the board stores them relative to the run)."""
    return [{**e, "checkpoint": str(run_dir / e["checkpoint"])} for e in entries]


def run_tournament(
    run_dir: str | Path,
    train: MarketData,
    valid: MarketData,
    *,
    args: TournamentArgs,
    env: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    device: str = "cpu",
    annualization: int,
    round_fn: RoundFn = learner_round,
    space: SearchSpace | None = None,
    backend: Backend | None = None,
    config_toml: str | None = None,
    resume: bool = False,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_status: Callable[[dict[str, Any]], None] | None = None,
    interrupted: str = "fail",
) -> TournamentResult:
    """Run (or resume) a tournament in ``run_dir``; see the module docstring.

    ``env`` holds ``envs.trading.EnvParams`` fields plus ``num_envs``; ``agent`` the learner's base
    arguments (each pod's sampled hyper-parameters override them). ``config_toml`` (the caller's
    resolved config) is written to ``<run>/config.toml`` on a fresh run. ``on_progress`` gets a
    snapshot dict after every change (the CLI's live table). ``on_status`` gets the run's status
    fields when the run starts (``running``), stops on an error (``interrupted``) and ends (``done``,
    with the champion); mappings in them (``windows``) are meant to be merged one level deep into
    what the caller recorded before (the test window's dates). ``interrupted`` (with ``resume``):
    ``"fail"`` records the pods a killed run left in flight as failed, ``"rerun"`` runs them again
    (see the module docstring).
    """
    if interrupted not in INTERRUPTED:
        raise PodracerError(f"run_tournament: interrupted must be one of {INTERRUPTED}, got {interrupted!r}")
    run_dir = Path(run_dir)
    _check_windows(train, valid)
    if backend is None:
        check_backend_args(args, device)  # (before the run folder exists)
    board_path = run_dir / FILENAME
    if resume and not board_path.is_file():
        raise PodracerError(f"cannot resume {run_dir}: no {FILENAME} there")
    if not resume and board_path.is_file():
        raise PodracerError(f"{run_dir} already holds a tournament (use --resume to continue it)")
    space = space or default_search_space(args.algo)
    ctx = RoundContext(
        train=train,
        valid=valid,
        env=dict(env or {}),
        agent={**(agent or {}), "compile": learner_compile(args, env or {}, agent or {})},
        device=device,
        fitness=args.fitness,
        annualization=annualization,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "pods").mkdir(exist_ok=True)
    if config_toml is not None and not (resume and (run_dir / "config.toml").exists()):
        atomic_write_text(run_dir / "config.toml", config_toml)

    board = Leaderboard(run_dir, args.leaderboard_size)
    rerun: list[PodSpec] = []
    if resume:
        for entry in board.entries():
            if not (run_dir / entry["checkpoint"] / "spec.json").is_file():
                raise CheckpointError(f"resume: checkpoint of leaderboard entry {entry['pod_id']} is missing")
        lost = board.mark_resumed({"pid": os.getpid()}, rerun=interrupted == "rerun")
        if interrupted == "rerun":
            rerun = _interrupted_specs(run_dir, board, lost)
        log.info(
            "resumed %s: %d entries kept, %d interrupted pods %s",
            run_dir,
            len(board.entries()),
            len(lost),
            "run again" if interrupted == "rerun" else "failed",
        )
    else:
        board.set_meta("args", asdict(args))
    _report_status(run_dir, board, args, train, valid, on_status, status="running")

    backend = backend or make_backend(
        args.backend,
        workers=args.workers,
        address=args.address,
        pods=args.pods,
        population_size=args.population_size,
        envs_per_pod=args.envs_per_pod,
        round_steps=args.round_steps,
        overlap_rounds=args.overlap_rounds,
        device=device,
        algo=args.algo,
    )
    session = _Session(run_dir, board, args, space, backend, on_progress, rerun=rerun)
    try:
        backend.start(round_fn, ctx)
        session.loop()
    except BaseException:
        backend.close(abort=True)
        _report_status(run_dir, board, args, train, valid, on_status, status="interrupted")
        board.close()
        raise
    backend.close()
    champion = _copy_champion(run_dir, board)
    result = _report_status(run_dir, board, args, train, valid, on_status, status="done", champion=champion)
    board.close()
    return result


class _Session:
    """The asynchronous loop of one orchestrator process."""

    def __init__(
        self,
        run_dir: Path,
        board: Leaderboard,
        args: TournamentArgs,
        space: SearchSpace,
        backend: Backend,
        on_progress: Callable[[dict[str, Any]], None] | None,
        rerun: list[PodSpec] | None = None,
    ) -> None:
        self.run_dir, self.board, self.args, self.space = run_dir, board, args, space
        self.rerun = list(rerun or [])  # interrupted pods to run again, first, with their own spec
        self.backend, self.on_progress = backend, on_progress
        self.updater = Updater(board)
        self.in_flight: dict[cf.Future, tuple[PodTask, float]] = {}
        self.started = time.monotonic()
        self.wall_before = float(board.meta().get("wall_s", 0.0))  # earlier sessions of a resumed run
        self.consecutive_failures = 0
        self.last_error = ""
        self.durations: list[float] = []  # wall seconds of the rounds that returned (auto timeout)

    # budget -------------------------------------------------------------------------------------
    def wall_s(self) -> float:
        return self.wall_before + time.monotonic() - self.started

    def time_left(self) -> float:
        if self.args.budget_minutes is None:
            return math.inf
        return self.args.budget_minutes * 60.0 - self.wall_s()

    def steps_left(self) -> float:
        if self.args.budget_steps is None:
            return math.inf
        planned = sum(task.round_steps for task, _ in self.in_flight.values())
        return self.args.budget_steps - self.board.env_steps_spent() - planned

    # loop ---------------------------------------------------------------------------------------
    def loop(self) -> None:
        self._progress()
        while True:
            self._launch()
            self.backend.flush()
            if not self.in_flight:
                break
            done, _ = cf.wait(list(self.in_flight), timeout=1.0, return_when=cf.FIRST_COMPLETED)
            # In launch order: pods that finish together (a population) are recorded alike every run.
            for future in [f for f in self.in_flight if f in done]:
                self._finish(future)
            self._reap_hung()
            self.board.set_meta("wall_s", self.wall_s())
            self._progress()

    def _launch(self) -> None:
        while True:
            room = self.backend.room(self.args.pods, len(self.in_flight))
            if len(self.in_flight) >= room:
                return
            steps, seconds = self.steps_left(), self.time_left()
            if steps < 1 or seconds <= 0:
                return
            if self.rerun:
                spec = self.rerun.pop(0)  # its row is still "running": no second start_pod
            else:
                seq = self.board.next_seq()
                spec = next_pod(
                    seq,
                    entries=_resolve(self.run_dir, self.board.entries()),
                    space=self.space,
                    p_fresh=self.args.p_fresh,
                    seed=self.args.seed,
                    algo=self.args.algo,
                )
                self._record_start(spec)
            round_seconds = self.args.round_seconds
            if math.isfinite(seconds):
                round_seconds = min(round_seconds or math.inf, seconds)
            task = PodTask(
                spec=spec,
                checkpoint_dir=str(self.run_dir / "pods" / spec.pod_id),
                round_steps=int(min(self.args.round_steps, steps)),
                round_seconds=round_seconds,
            )
            self.in_flight[self.backend.submit(task)] = (task, time.monotonic())

    def _record_start(self, spec: PodSpec) -> None:
        self.board.start_pod(
            spec.pod_id,
            seq=spec.seq,
            parent_id=spec.parent_id,
            generation=spec.generation,
            algo=spec.algo,
            hparams=spec.hparams,
            seed=spec.seed,
            checkpoint=f"pods/{spec.pod_id}",
        )

    def round_timeout(self) -> float:
        if self.args.round_timeout_s is not None:
            return self.args.round_timeout_s
        return auto_round_timeout(self.durations, self.args.round_seconds)

    def _reap_hung(self) -> None:
        """Kill and fail the rounds in flight for longer than the round timeout."""
        limit = self.round_timeout()
        for future, (task, _submitted) in list(self.in_flight.items()):
            # From when the round began running: a fresh worker pool first spends seconds starting.
            since = self.backend.running_since(future)
            now = time.monotonic()
            if future.done() or since is None or now - since <= limit:
                continue
            self.in_flight.pop(future)
            self.backend.kill(future)
            error = RoundError(f"round timeout: no result after {limit:.0f}s (hung pod killed)")
            self._failed(task, error, now - since)

    def _finish(self, future: cf.Future) -> None:
        task, started = self.in_flight.pop(future)
        elapsed = time.monotonic() - started
        try:
            outcome = future.result()
        except Exception as err:  # noqa: BLE001 - a lost worker fails its pod, not the run
            outcome = RoundError(f"worker lost: {one_line(err)}")
        if isinstance(outcome, PodOutcome):
            decision = self.updater.apply(task, outcome)
            self.consecutive_failures = 0
            self.durations.append(elapsed)
            log.debug("pod %s scored %.4f: %s", task.spec.pod_id, outcome.score, decision)
            return
        error = outcome if isinstance(outcome, BaseException) else RoundError(repr(outcome))
        self._failed(task, error, elapsed)

    def _failed(self, task: PodTask, error: BaseException, elapsed: float) -> None:
        self.updater.fail(task, error, elapsed_s=elapsed)
        self.consecutive_failures += 1
        self.last_error = str(error)
        log.warning("pod %s failed: %s", task.spec.pod_id, error)
        if self.consecutive_failures >= self.args.max_consecutive_failures:
            raise PodracerError(
                f"{self.consecutive_failures} pods failed in a row; last error: {self.last_error}"
            )

    def _progress(self) -> None:
        if self.on_progress is None:
            return
        now = time.monotonic()
        self.on_progress(
            {
                "run_id": self.run_dir.name,
                "in_flight": [
                    {
                        "pod_id": task.spec.pod_id,
                        "parent_id": task.spec.parent_id,
                        "generation": task.spec.generation,
                        "hparams": task.spec.hparams,
                        "round_steps": task.round_steps,
                        "running_s": now - started,
                    }
                    for task, started in self.in_flight.values()
                ],
                "leaderboard": self.board.entries(),
                "env_steps_spent": self.board.env_steps_spent(),
                "budget_steps": self.args.budget_steps,
                "wall_s": self.wall_s(),
                "budget_s": None if self.args.budget_minutes is None else self.args.budget_minutes * 60.0,
                "pods_started": self.board.next_seq(),
                "consecutive_failures": self.consecutive_failures,
            }
        )


def _interrupted_specs(run_dir: Path, board: Leaderboard, pod_ids: list[str]) -> list[PodSpec]:
    """The specs of the pods a killed run left in flight, rebuilt from their rows (a child from its
    parent's row: checkpoints are never deleted), in launch order."""
    rows = {p["pod_id"]: p for p in board.pods()}
    specs = []
    for pod_id in pod_ids:
        row = rows[pod_id]
        parent = rows.get(row["parent_id"]) if row["parent_id"] is not None else None
        if row["parent_id"] is not None and parent is None:
            raise CheckpointError(f"resume: parent {row['parent_id']} of interrupted pod {pod_id} is unknown")
        specs.append(
            PodSpec(
                pod_id=pod_id,
                seq=int(row["seq"]),
                seed=int(row["seed"]),
                algo=str(row["algo"]),
                hparams=dict(row["hparams"] or {}),
                parent_id=row["parent_id"],
                generation=int(row["generation"]),
                init_checkpoint=None if parent is None else str(run_dir / parent["checkpoint"]),
                parent_env_steps=0 if parent is None else int(parent["env_steps"]),
            )
        )
    return specs


def _copy_champion(run_dir: Path, board: Leaderboard) -> dict[str, Any] | None:
    """Copy the best entry's policy to ``<run>/champion/`` (a whole-folder swap, never half-written)."""
    entries = board.entries()
    if not entries:
        return None
    best = entries[0]
    source = run_dir / best["checkpoint"]
    target = run_dir / "champion"
    staging = run_dir / ".champion.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in (*CHAMPION_FILES, CURVE):
        if (source / name).is_file():
            shutil.copy2(source / name, staging / name)
        elif name in CHAMPION_FILES:
            raise CheckpointError(f"champion {best['pod_id']}: {source / name} is missing")
    old = run_dir / ".champion.old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    return {
        "pod_id": best["pod_id"],
        "score": best["score"],
        "generation": best["generation"],
        "env_steps": best["env_steps"],
        "hparams": best["hparams"],
        "sharpe_ratio": (best.get("metrics") or {}).get("sharpe_ratio"),
        "source_checkpoint": best["checkpoint"],
    }


def _sharpe_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _report_status(
    run_dir: Path,
    board: Leaderboard,
    args: TournamentArgs,
    train: MarketData,
    valid: MarketData,
    on_status: Callable[[dict[str, Any]], None] | None,
    *,
    status: str,
    champion: dict[str, Any] | None = None,
) -> TournamentResult:
    """The tournament's status fields, handed to ``on_status`` (other stages record their own keys)."""
    pods = board.pods()
    scored = [p for p in pods if p["score"] is not None]
    # A pod whose Sharpe is undefined (all cash: no dispersion) is a trial with no Sharpe: None, never 0
    # (zeros would shrink the trials' variance, and any deflated Sharpe's hurdle computed from it).
    sharpes = [_sharpe_or_none((p["metrics"] or {}).get("sharpe_ratio")) for p in scored]
    failed = sum(1 for p in pods if p["status"] == "failed")
    fields: dict[str, Any] = {
        "run_id": run_dir.name,
        "kind": "tournament",
        "status": status,
        "seed": args.seed,
        "tournament": asdict(args),
        # Merged by the recorder, not replaced: the caller may have recorded the test window's dates
        # (never its bars).
        "windows": {"train": list(train.date_range()), "valid": list(valid.date_range())},
        "tickers": list(train.tickers),
        "pods_tried": len(scored),
        "pods_failed": failed,
        "trial_sharpes": sharpes,
        "env_steps": board.env_steps_spent(),
        "updated": time.time(),
    }
    if champion is not None:
        fields["champion"] = champion
    if on_status is not None:
        on_status(fields)
    return TournamentResult(
        run_id=run_dir.name,
        run_dir=run_dir,
        champion=champion,
        pods_tried=len(scored),
        pods_failed=failed,
        env_steps=board.env_steps_spent(),
        trial_sharpes=sharpes,
        leaderboard=board.entries(),
    )
