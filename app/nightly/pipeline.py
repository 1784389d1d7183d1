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
   champion's by ``nightly.margin`` AND its deflated Sharpe ratio reaches ``nightly.dsr_threshold``;
5. **export** (on promotion): an onnxruntime bundle of the challenger (``app.export.export_bundle``)
   and an immutable copy of its policy under ``<home>/champions/<run_id>/``;
6. **record**: the decision row and, on promotion, the new champion pointer in ONE SQLite
   transaction (``app.nightly.registry``): the only moment the champion changes.

The gate decides on the test window, so the figures measured there are **selection** figures: the
registry row's ``scores``, the champion pointer's ``info``, the run record's ``nightly`` and the run's
``metrics.json`` say ``"role": "selection"``. The out-of-sample record of a promoted champion is its
paper trading since promotion (``app.nightly.record.out_of_sample_record``).

Any failure before step 6 commits leaves the previous champion in place; the failure itself is
recorded as a ``failed`` decision (best effort) and raised as a one-line :class:`RetrainError`.

The steps are injectable (:class:`RetrainSteps`) so tests drive every branch with fakes; the real
ones are :func:`default_steps`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.ensemble import is_ensemble, load_policy
from agents.tournament import pod
from agents.tournament.orchestrator import run_tournament
from app.config import config_to_toml, to_env_params, to_tournament_args
from app.export import export_bundle
from app.nightly.decide import (
    decide,
    decision_record,
    failure_record,
    finite,
    overlap_note,
    trials_on_window,
)
from app.nightly.lock import ProcessLock
from app.nightly.normalization import SPEC_FILE, champion_feature_spec, with_feature_spec
from app.nightly.record import SELECTION
from app.nightly.registry import Champion, current_champion, record_decision
from app.runs import RunDir
from app.workflows.backtest import check_policy_fits, trial_returns
from app.workflows.training import ensemble_step
from backtests import engine, report, scoring
from data.atomic import atomic_write_json, replace_dir
from data.errors import CheckpointError, ConfigError, PodracerError
from data.loader import load_market
from data.sources.stream import fetch_to_store
from data.store import BarStore
from data.universe import resolve_tickers

log = logging.getLogger(__name__)

LOCK_NAME = "retrain.lock"
CHAMPIONS_DIR = "champions"
STEPS = ("update_data", "tournament", "evaluate", "decide", "export", "record")
_POLICY_FILES = ("policy.safetensors", "spec.json")


class RetrainError(PodracerError):
    """A retrain step failed; the previous champion is still in place."""

    exit_code = 1


# --- what the steps exchange ----------------------------------------------------------------------


@dataclass(frozen=True)
class DataSnapshot:
    """The market of this retrain and the dates of its windows (first, last session, ISO)."""

    splits: Any  # data.loader.MarketSplits (fakes may pass anything the other fake steps accept)
    windows: Mapping[str, tuple[str, str]]  # "train", "valid", "test" (+ "full")
    source: str = "synthetic"
    update: Mapping[str, Any] = field(default_factory=dict)  # what the incremental download did


@dataclass(frozen=True)
class ChallengerRun:
    """The tournament's result: its run and its champion policy (the challenger)."""

    run_id: str
    run_dir: Path
    policy_dir: Path
    num_trials: int  # pods tried (scored) in this tournament
    trial_sharpes: tuple[float, ...] = ()
    warm_started_from: str | None = None  # champion run id whose weights seeded the pool


@dataclass(frozen=True)
class Evaluation:
    """Challenger and champion on the same evaluation window."""

    fitness: str  # "sharpe", "return" or "calmar"
    window: tuple[str, str]
    challenger: Mapping[str, float | None]  # metrics, incl. "fitness" and "deflated_sharpe_ratio"
    champion: Mapping[str, float | None] | None  # None when there is no champion yet
    num_trials: int  # trials the DSR was deflated for


@dataclass(frozen=True)
class RetrainSteps:
    """The pipeline's steps; replace any of them (tests, other data sources)."""

    update_data: Callable[[Any, Path], DataSnapshot]
    tournament: Callable[[Any, Path, DataSnapshot, Mapping[str, Any] | None], ChallengerRun]
    evaluate: Callable[[Any, Path, DataSnapshot, ChallengerRun, Mapping[str, Any] | None, int], Evaluation]
    export: Callable[[Any, Path, ChallengerRun], Path]


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
    challenger_dsr: float | None
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


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    msg = text[0] if text else ""
    return msg if isinstance(err, PodracerError) else f"{type(err).__name__}: {msg}".rstrip(": ")


def _copy_policy(source: Path, target: Path, feature_spec: Mapping[str, Any] | None = None) -> Path:
    """Copy a policy folder to ``target`` by a whole-folder swap (never a half-written champion), with
    the feature spec it was trained with (``feature_spec.json``: its normalization travels with it)."""
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in _POLICY_FILES:
        if not (source / name).is_file():
            raise PodracerError(f"challenger policy {source / name} is missing")
        shutil.copy2(source / name, staging / name)
    if feature_spec:
        atomic_write_json(staging / SPEC_FILE, dict(feature_spec))
    return replace_dir(staging, target)


def _run_feature_spec(run_dir: Path) -> dict[str, Any] | None:
    try:
        spec = RunDir.at(run_dir).read().get("feature_spec")
    except PodracerError:
        return None
    return dict(spec) if isinstance(spec, Mapping) else None


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
    with ProcessLock(home / LOCK_NAME, command="podracer retrain"):
        started_at, t0 = _now(), time.monotonic()
        champion = current_champion(home)
        champion_id = champion["run_id"] if champion else None
        info: dict[str, Any] = {
            "fitness": fitness,
            "margin": nightly.margin,
            "dsr_threshold": nightly.dsr_threshold,
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
            num_trials = max(1, challenger.num_trials + trials_on_window(home, eval_window))
            info["num_trials"] = num_trials
            evaluation = steps.evaluate(config, home, data, challenger, champion, num_trials)
            scores = {
                # The gate decides on these figures: they are selection figures, not out-of-sample
                # ones (app.nightly.record: paper trading since promotion is the out-of-sample record).
                "role": SELECTION,
                "challenger": dict(evaluation.challenger),
                "champion": dict(evaluation.champion) if evaluation.champion is not None else None,
            }
            ch_fit = finite(evaluation.challenger.get("fitness"))
            champ_fit = (
                finite(evaluation.champion.get("fitness")) if evaluation.champion is not None else None
            )
            ch_dsr = finite(evaluation.challenger.get("deflated_sharpe_ratio"))
            info.update(challenger_fitness=ch_fit, champion_fitness=champ_fit, challenger_dsr=ch_dsr)
            reached("evaluate")

            step = "decide"
            verdict = decide(
                ch_fit,
                champ_fit,
                ch_dsr,
                has_champion=champion is not None,
                margin=nightly.margin,
                dsr_threshold=nightly.dsr_threshold,
                first_promotion=nightly.first_promotion,
                fitness=fitness,
            )
            reason = verdict.reason + overlap_note(champion, eval_window[0])
            reached("decide")

            bundle: Path | None = None
            new_champion: Champion | None = None
            if verdict.promote:
                step = "export"
                if nightly.export:
                    bundle = steps.export(config, home, challenger)
                policy_copy = _copy_policy(
                    challenger.policy_dir,
                    home / CHAMPIONS_DIR / challenger.run_id,
                    _run_feature_spec(challenger.run_dir),
                )
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
                        "previous_champion": champion_id,
                        # fitness_value / challenger_dsr were measured on the window the gate decided
                        # on: selection figures.
                        "eval_role": SELECTION,
                    },
                )
                reached("export")

            step = "record"
            decision = decision_record(
                started_at=started_at,
                decided_at=_now(),
                verdict=verdict,
                reason=reason,
                info=info,
                bundle=str(bundle) if bundle else None,
                inputs={**inputs, "duration_s": round(time.monotonic() - t0, 3)},
                scores=scores,
            )
            decision_id = record_decision(home, decision, new_champion, before_commit=faults.get("record"))
            _label_run(challenger.run_dir, verdict.promote, decision_id)
        except BaseException as err:
            _record_failure(home, started_at, step, err, info, inputs, t0)
            if isinstance(err, KeyboardInterrupt | SystemExit):
                raise
            kept = f"champion {champion_id} kept" if champion_id else "no champion yet"
            error = RetrainError(f"retrain failed at step {step}: {_one_line(err)} ({kept})")
            if isinstance(err, ConfigError):
                error.exit_code = err.exit_code  # the user's to fix, like any config error
            raise error from err

    outcome = RetrainOutcome(
        decision_id=decision_id,
        verdict=decision.verdict,
        reason=reason,
        challenger_run_id=challenger.run_id,
        previous_champion=champion_id,
        champion=challenger.run_id if verdict.promote else champion_id,
        bundle=str(bundle) if bundle else None,
        fitness=fitness,
        challenger_fitness=ch_fit,
        champion_fitness=champ_fit,
        challenger_dsr=ch_dsr,
        eval_window=(info["eval_start"], info["eval_end"]),
        duration_s=round(time.monotonic() - t0, 3),
    )
    log.info("retrain %s: %s", outcome.verdict, outcome.reason)
    return outcome


def _label_run(run_dir: Path, promoted: bool, decision_id: int) -> None:
    """Best effort, after the commit: the challenger's run record says its test-window figures were
    the gate's selection figures (its ``metrics.json`` says so too: :func:`evaluate_step`)."""
    try:
        RunDir.at(run_dir).update(
            nightly={
                "eval_role": SELECTION,
                "decision_id": decision_id,
                "verdict": "promoted" if promoted else "rejected",
            }
        )
    except (OSError, PodracerError) as err:
        log.warning("could not label run %s: %s", run_dir, _one_line(err))


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
                reason=_one_line(err) or type(err).__name__,
                info=info,
                inputs={**inputs, "duration_s": round(time.monotonic() - t0, 3)},
            ),
        )
    except Exception as record_err:  # noqa: BLE001 - the original failure is what the user must see
        log.error("could not record the failed retrain in the registry: %s", _one_line(record_err))


# --- the real steps -------------------------------------------------------------------------------


def incremental_update(
    home: Path,
    *,
    source: str,
    tickers: Sequence[str],
    interval: str,
    initial_days: int,
    today: date | None = None,
    fetch: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Download the bars missing from the store since its last stored session (re-fetching that
    session, which may have been partial) up to ``today``; a ticker with nothing stored gets
    ``initial_days``. The store merges by timestamp, so re-fetched bars are never doubled. ``fetch``
    (tests) replaces the streaming fetch with a function returning a bar frame."""
    store = BarStore(home)
    part = store.info()["intervals"].get(interval) or {}
    stored = part.get("by_ticker") or {}
    names = [t.upper() for t in tickers] or sorted(stored)
    if not names:
        raise ConfigError("nightly.update needs data.tickers (the store holds no tickers yet)")
    today = today or datetime.now(UTC).date()
    first_new = today - timedelta(days=initial_days)
    starts = [date.fromisoformat(stored[t]["end"]) if t in stored else first_new for t in names]
    start, end = min(starts), today
    extended = bool(part.get("extended_hours", False))
    if fetch is None:
        # The streaming fetch `podracer data fetch` uses: chunked, resumable, Retry-After aware, and
        # raw bars plus their splits/dividends (Alpaca and yfinance), adjusted on load (a split between
        # two nightly updates stays on one basis: data.actions).
        streamed = fetch_to_store(
            home,
            source,
            names,
            start.isoformat(),
            end.isoformat(),
            interval,
            extended_hours=extended,
            today=today,
        )
        return {
            "source": source,
            "tickers": names,
            "start": start.isoformat(),
            "end": end.isoformat(),
            "rows_fetched": streamed.bars_fetched,
            "files_written": streamed.files_written,
        }
    bars = fetch(source, names, start.isoformat(), end.isoformat(), interval)
    report = store.write(bars, interval, extended_hours=extended, source=source)
    return {
        "source": source,
        "tickers": names,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "rows_fetched": len(bars),
        "files_written": len(report.files_written),
    }


def update_data_step(config: Any, home: Path) -> DataSnapshot:
    """Step 1: optional incremental download, then the market as ``podracer train`` builds it."""
    nightly = config.nightly
    update: dict[str, Any] = {"source": "none"}
    if nightly.update != "none":
        if config.data.source != "stored":
            raise ConfigError(
                f"nightly.update = {nightly.update!r} downloads into the bar store: set data.source = 'stored'"
            )
        update = incremental_update(
            home,
            source=nightly.update,
            # [data] universe: the members on as_of (default today: the ones trading now) plus tickers
            tickers=resolve_tickers(
                config.data.universe, config.data.as_of or date.today().isoformat(), config.data.tickers
            ),
            interval=config.data.interval,
            initial_days=nightly.initial_days,
        )
    splits = load_market(config.data, home=home, device=config.agent.device)
    windows = {k: tuple(v) for k, v in splits.windows().items()}
    windows["full"] = tuple(splits.full.date_range())
    return DataSnapshot(splits=splits, windows=windows, source=str(splits.source), update=update)


def warm_start_round(task: Any, ctx: Any, *, champion_dir: str, warm_pods: int) -> Any:
    """The tournament's learner round, with the first ``warm_pods`` fresh pods starting from the
    champion's weights (module-level and partial-able, so worker processes can unpickle it)."""
    spec = task.spec
    if spec.parent_id is None and spec.init_checkpoint is None and spec.seq < warm_pods:
        task = dataclasses.replace(task, spec=dataclasses.replace(spec, init_checkpoint=champion_dir))
        log.info("pod %s warm-started from the champion's weights (%s)", spec.pod_id, champion_dir)
    return pod.learner_round(task, ctx)


def tournament_step(
    config: Any, home: Path, data: DataSnapshot, champion: Mapping[str, Any] | None
) -> ChallengerRun:
    """Step 2: a tournament on train/valid in a new run, warm-started from the champion."""
    run_id = "nightly-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run_dir = home / "runs" / run_id
    suffix = 1
    while run_dir.exists():  # two retrains within one second (tests): never reuse a run folder
        run_dir = home / "runs" / f"{run_id}-{suffix}"
        suffix += 1
    run_id = run_dir.name
    splits = data.splits
    args = to_tournament_args(config)
    round_fn: Any = pod.learner_round
    warm_from = None
    if champion is not None and is_ensemble(champion["policy_dir"]):
        # An ensemble has no single network (nor optimizer state) to continue training from.
        log.info("champion %s is an ensemble: no warm start", champion["run_id"])
    elif champion is not None and config.nightly.warm_start_pods > 0:
        round_fn = functools.partial(
            warm_start_round,
            champion_dir=str(champion["policy_dir"]),
            warm_pods=config.nightly.warm_start_pods,
        )
        warm_from = str(champion["run_id"])
    run_dir.mkdir(parents=True)
    record = RunDir.at(run_dir)
    record.update(
        windows={k: list(v) for k, v in data.windows.items() if k != "full"},
        feature_spec=splits.full.feature_spec,
    )
    result = run_tournament(
        run_dir,
        splits.train,
        splits.valid,
        args=args,
        env=config.env.model_dump(),
        agent=config.agent.model_dump(),
        device=config.agent.device,
        annualization=config.backtest.annualization,
        round_fn=round_fn,
        config_toml=config_to_toml(config),
        on_status=record.on_status,
    )
    if result.champion is not None:  # the ensemble of the top pods: one more trial, maybe the champion
        result = ensemble_step(
            record,
            result,
            splits.valid,
            args,
            params=to_env_params(config.env),
            annualization=config.backtest.annualization,
            device=config.agent.device,
        )
    record.update(nightly={"warm_started_from": warm_from, "warm_start_pods": config.nightly.warm_start_pods})
    if result.champion is None:
        raise PodracerError(f"tournament {run_id} produced no champion ({result.pods_failed} pods failed)")
    return ChallengerRun(
        run_id=run_id,
        run_dir=run_dir,
        policy_dir=run_dir / "champion",
        num_trials=int(result.pods_tried),
        trial_sharpes=tuple(None if s is None else float(s) for s in result.trial_sharpes),
        warm_started_from=warm_from,
    )


def evaluate_step(
    config: Any,
    home: Path,
    data: DataSnapshot,
    challenger: ChallengerRun,
    champion: Mapping[str, Any] | None,
    num_trials: int,
) -> Evaluation:
    """Step 3: backtest challenger and champion together on the test window (one engine call, so the
    same bars, costs and fills), score both, and write the challenger run's ``backtest/`` report
    (the challenger as ``champion`` of its run, the incumbent as ``incumbent``)."""

    device = config.agent.device
    market = data.splits.test
    params = to_env_params(config.env)
    fitness = config.nightly.fitness or config.tournament.fitness
    annualization = config.backtest.annualization
    policies: dict[str, Any] = {"challenger": load_policy(challenger.policy_dir, device=device)}
    check_policy_fits(policies["challenger"], market, params)
    result = engine.run_backtest(market, params, policies, device=device, compile=config.backtest.compile)
    normalization: dict[str, Any] = {"challenger": "tonight's train window (its own)"}
    if champion is not None:
        champ = load_policy(champion["policy_dir"], device=device)
        # Like with like: the champion sees tonight's bars through ITS OWN feature normalization
        # (the statistics its bundle carries), never tonight's.
        spec, where = champion_feature_spec(champion)
        champ_market = market
        if spec is not None:
            champ_market = with_feature_spec(data.splits.full, market, spec)
            normalization["champion"] = f"its own ({where})"
        else:
            log.warning("champion %s: %s; scoring it with tonight's normalization", champion["run_id"], where)
            normalization["champion"] = f"tonight's ({where})"
        try:
            check_policy_fits(champ, champ_market, params)
        except CheckpointError as err:
            raise CheckpointError(f"the champion cannot trade today's data: {err}") from None
        # A second engine call on the same bars, costs and fills (the engine is deterministic from the
        # window's first bar), then one result: the same as one call with per-policy features.
        alone = engine.run_backtest(
            champ_market,
            params,
            {"champion": champ},
            baselines=(),
            device=device,
            compile=config.backtest.compile,
        )
        result = merge_results(result, alone)
    metrics = report.compute_metrics(
        result,
        annualization=annualization,
        num_trials=num_trials,
        trial_sharpes=challenger.trial_sharpes,
        deflated=["challenger"],
    )
    scores = scoring.fitness(result, fitness, annualization=annualization, nan_value=math.nan)
    for i, name in enumerate(result.names):
        metrics[name]["fitness"] = finite(float(scores[i]))
    renamed = dataclasses.replace(
        result,
        names=tuple({"challenger": "champion", "champion": "incumbent"}.get(n, n) for n in result.names),
    )
    doc = report.write_report(
        challenger.run_dir,
        renamed,
        window="test",
        annualization=annualization,
        num_trials=num_trials,
        trial_sharpes=challenger.trial_sharpes,
        trial_returns=trial_returns(RunDir.at(challenger.run_dir)),
        cost_rate=params.cost_rate,
        slippage_bps=params.slippage_bps,
        tearsheet=config.nightly.tearsheet,
    )
    # The promotion gate decides on this window: these are selection figures (app.nightly.record).
    atomic_write_json(
        challenger.run_dir / "backtest" / "metrics.json",
        report.json_safe({**doc, "role": SELECTION, "role_note": "the nightly gate decided on this window"}),
    )
    for name, how in normalization.items():
        metrics[name]["normalization"] = how
    return Evaluation(
        fitness=fitness,
        window=result.date_range(),
        challenger=metrics["challenger"],
        champion=metrics.get("champion") if champion is not None else None,
        num_trials=num_trials,
    )


def merge_results(a: engine.BacktestResult, b: engine.BacktestResult) -> engine.BacktestResult:
    """One result with the strategies of ``a`` then ``b`` (two runs over the same window's bars)."""
    if not (np.array_equal(a.timestamps, b.timestamps) and a.tickers == b.tickers):
        raise PodracerError("cannot merge backtests of different windows or tickers")
    cat = {
        name: torch.cat([getattr(a, name), getattr(b, name)], dim=1)
        for name in ("equity", "returns", "weights", "costs", "turnover", "trades", "trade_costs")
    }
    day_equity = None
    if a.day_equity is not None and b.day_equity is not None:
        day_equity = torch.cat([a.day_equity, b.day_equity], dim=1)
    return dataclasses.replace(
        a,
        names=(*a.names, *b.names),
        terminated_at=(*a.terminated_at, *b.terminated_at),
        day_equity=day_equity,
        **cat,
    )


def export_step(config: Any, home: Path, challenger: ChallengerRun) -> Path:
    """Step 5: the challenger's onnxruntime bundle under ``<home>/exports/``."""
    return export_bundle(challenger.run_dir, home=home)


def default_steps() -> RetrainSteps:
    """The real pipeline."""
    return RetrainSteps(
        update_data=update_data_step,
        tournament=tournament_step,
        evaluate=evaluate_step,
        export=export_step,
    )
