"""Walk-forward: nightly retraining replayed over history, traded as one out-of-sample account.

:func:`run_walkforward` loads the market once (``data.loader``: the stored or synthetic bars of
``[data]``) and lays out folds in sessions (``backtests.folds``, settings ``[walkforward]``). Fold by
fold, one at a time:

1. **features**: the fold's bars (views of the loaded market) with features normalized on ITS train
   window only, trading only its own universe: the index members on its dates whose bars cover
   ``[data] min_coverage`` of its train window (``data.fold_market``; the market is loaded with
   every candidate of the span, ``load_market(per_window=True)``);
2. **tournament**: the tournament of ``podracer train`` on the fold's train / validation windows, in
   ``<run>/folds/fold-<k>/`` (a run folder of its own, resumable), the first
   ``[nightly] warm_start_pods`` fresh pods starting from the incumbent's weights as nightly does
   (``app.nightly.steps.warm_start_round``), then the ensemble step;
3. **gate**: the promotion rule of ``[gate] rule``, read as nightly reads it (``app.gate``): the
   shadow book (``"book"``, ``app.walkforward.book``), the fixed-window gate, challenger vs incumbent
   on the fold's gate window (``"window"``, ``app.walkforward.judging.replay_gate``), or every
   challenger takes over (``"always"``);
4. **account**: the policy in charge trades the fold's test window as the continuation of ONE
   account (before any champion qualifies, ``[gate] before_champion``: the benchmark, bought
   once and held, or cash) (``backtests.stitched``: the engine over the whole span so far, each policy deciding on
   features normalized with its own statistics), and the fold is recorded atomically
   (``RunDir.write_fold_record``): windows, pods tried, challenger, gate decision, policy in charge,
   test figures, seconds.

After every fold the stitched account's report is written to ``<run>/backtest/`` (the metrics.json
contract of ``backtests.report``, plus ``walkforward``: the folds and which champion traded which
sessions); after the last one with the verdict of the whole span as one look and the tear sheet.

Resume (``resume=RUN``): completed folds are read back from their records; the first fold without
one resumes its tournament (``run_tournament(resume=True, interrupted="rerun")``: the pods in flight
when the process died run again with their own spec, so with one pod in flight at a time and an
env-step budget the run ends exactly as one that never stopped) and the walk-forward goes on.

No lookahead: a fold's train and validation windows end ``embargo_sessions`` (>= 1) before its test
window (checked here on the dates); its normalization is fitted on its train window; the gate reads
the validation window only; the account's decision on bar t fills at bar t + 1.
"""

from __future__ import annotations

import functools
import gc
import logging
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agents.ensemble import is_ensemble
from agents.tournament import pod
from agents.tournament.orchestrator import run_tournament
from agents.training import Event
from app.champion import Champion, ChampionNote
from app.config import Config, config_to_toml, to_env_params, to_tournament_args, write_config
from app.gate import GateResult
from app.nightly.steps import ChallengerRun, tournament_settings, warm_start_round
from app.refit import after_tournament
from app.runs import RunDir, new_id
from app.walkforward.account import StitchedAccount
from app.walkforward.book import book_settings, fold_book, fold_of
from app.walkforward.judging import replay_gate
from app.walkforward.plan import FoldPlan, fold_config, plan_folds
from app.walkforward.record import BookStep, FoldRecord, read_fold_records
from backtests.metrics_model import MetricsDocument
from backtests.stitched import segment_figures
from data.errors import ConfigError, PodracerError
from data.fold_market import FoldMarket, fold_market
from data.loader import load_market
from data.market import MarketData

log = logging.getLogger(__name__)

KIND = "walkforward"


@dataclass(frozen=True)
class WalkForwardResult:
    """What a finished walk-forward produced (also in its run folder)."""

    run_id: str
    run_dir: Path
    folds: list[FoldRecord]  # the fold records
    metrics: MetricsDocument  # the stitched account's metrics.json
    seconds: float
    peak_rss_mb: dict[str, float]


# --- the run ---------------------------------------------------------------------------------------


def run_walkforward(
    config: Config,
    home: str | Path,
    *,
    run: str | None = None,
    resume: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> WalkForwardResult:
    """Run (or ``resume``) a walk-forward; see the module docstring. ``on_event`` gets progress events
    (``start``, ``stage``, ``pods``, ``fold_done``, ``done``: the CLI's display)."""
    t0 = time.monotonic()
    emit = on_event or (lambda event: None)
    home = Path(home)
    wf_run = _open_run(home, run, resume)
    device = torch.device(config.agent.device)
    # Every candidate ticker of the span: each fold trades its own universe (data.fold_market).
    splits = load_market(config.data, home=home, device=device, per_window=True)
    full = bars_only(splits.full)
    plans = plan_folds(full, config.walkforward)
    records = read_fold_records(wf_run) if resume is not None else []
    _check_resumed_layout(wf_run, plans, records)
    if resume is None:
        wf_run.path.mkdir(parents=True)
        write_config(config, wf_run.config)
        wf_run.write(_run_record(wf_run, config, full, plans))
    else:
        wf_run.update(status="running", error=None)
    account = StitchedAccount(
        full,
        plans,
        to_env_params(config.env),
        device,
        min_coverage=config.data.min_coverage,
        before_champion=config.gate.before_champion,
        feed=splits.feed,
    )
    for record in records:
        account.add(plans[record.index], _in_charge_of(wf_run, record, records), holding=record.holding())
    emit({"event": "start", "run_id": wf_run.run_id, "folds": len(plans), "done": len(records)})
    try:
        with _ray_session(config):
            for plan in plans[len(records) :]:
                record = _run_fold(config, home, wf_run, plan, records, account, emit, len(plans))
                records.append(record)
                emit({"event": "fold_done", "index": plan.fold.index, "record": record})
        emit({"event": "stage", "index": None, "stage": "report"})
        doc = account.report(
            wf_run, config, records, tearsheet=config.walkforward.tearsheet, home=home, final=True
        )
    except BaseException as err:
        wf_run.update(status="interrupted", error=f"{type(err).__name__}: {err}", updated=time.time())
        raise
    seconds = time.monotonic() - t0
    peak = peak_rss_mb()
    wf_run.update(status="done", finished=time.time(), seconds=round(seconds, 3), peak_rss_mb=peak)
    emit({"event": "done", "seconds": seconds, "peak_rss_mb": peak})
    return WalkForwardResult(wf_run.run_id, wf_run.path, records, doc, seconds, peak)


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory of this process and of its largest finished child (MB; Linux reports KB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return {"self": round(own, 1), "children": round(children, 1)}


def _open_run(home: Path, run: str | None, resume: str | None) -> RunDir:
    if resume is not None:
        wf_run = RunDir(home, new_id(resume, KIND))
        if wf_run.info().kind != KIND:
            raise ConfigError(f"--resume {resume!r}: no walk-forward at {wf_run.path}")
        return wf_run
    wf_run = RunDir(home, new_id(run, KIND))
    if wf_run.path.exists():
        raise ConfigError(f"run {wf_run.run_id!r} already exists at {wf_run.path} (choose another --run)")
    return wf_run


def bars_only(full: MarketData) -> MarketData:
    """The loaded market without its features (normalized on one split: folds compute their own), so
    only the bars stay in memory."""
    empty = torch.empty(full.num_steps, full.num_assets, 0, device=full.device)
    return MarketData(
        **{
            name: getattr(full, name)
            for name in ("tickers", "timestamps", "open", "high", "low", "close", "volume", "session_id")
        },
        time_of_day=full.time_of_day,
        interval=full.interval,
        features=empty,
        feature_names=(),
        feature_spec={"windows": dict((full.feature_spec or {}).get("windows") or {})},
        tradable=full.tradable,
        listed=full.listed,
        daily_vol=full.daily_vol,
        adv=full.adv,
        expected_volume=full.expected_volume,
        half_spread=full.half_spread,
    )


def _run_record(wf_run: RunDir, config: Config, full: MarketData, plans: list[FoldPlan]) -> dict[str, Any]:
    return {
        "run_id": wf_run.run_id,
        "kind": KIND,
        "algo": config.agent.algo,
        "status": "running",
        "seeds": {"tournament": config.tournament.seed, "data": config.data.seed},
        "windows": {"span": [plans[0].dates["test"][0], plans[-1].dates["test"][1]]},
        "tickers": list(full.tickers),
        "annualization": config.backtest.annualization,
        "walkforward": {
            "settings": config.walkforward.model_dump(mode="json"),
            "folds": [p.to_dict() for p in plans],
        },
        "started": time.time(),
    }


def _check_resumed_layout(wf_run: RunDir, plans: list[FoldPlan], records: list[FoldRecord]) -> None:
    """A resumed run's data must still give the layout its folds were recorded with."""
    for record in records:
        index = record.index
        if index >= len(plans) or record.windows != plans[index].windows():
            raise PodracerError(
                f"{wf_run.path}: fold {index} was recorded on other windows than today's data gives "
                "(the bars changed since the run started)"
            )
    if [r.index for r in records] != list(range(len(records))):
        raise PodracerError(f"{wf_run.path}: the fold records are not consecutive from fold 0")


@contextmanager
def _ray_session(config: Config) -> Iterator[None]:
    """One Ray connection for every fold's tournament (the backend would start and stop a local
    cluster per tournament otherwise); left as found."""
    if config.tournament.backend != "ray":
        yield
        return
    try:
        import ray
    except ImportError:
        raise ConfigError("the ray backend needs ray: pip install 'podracer[ray]'") from None
    owns = not ray.is_initialized()
    if owns:
        ray.init(address=config.tournament.address, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if owns:
            ray.shutdown()


# --- one fold --------------------------------------------------------------------------------------


def _run_fold(
    config: Config,
    home: Path,
    wf_run: RunDir,
    plan: FoldPlan,
    records: list[FoldRecord],
    account: StitchedAccount,
    emit: Callable[[Event], None],
    planned: int,
) -> FoldRecord:
    index, bars = plan.fold.index, plan.bars
    seconds: dict[str, float] = {}
    clock = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[stage] = round(now - clock, 3)
        clock = now

    emit({"event": "stage", "index": index, "stage": "features", "windows": plan.windows()})
    data = fold_market(
        account.full,
        bars["train"][0],
        bars["test"][1],
        fit=bars["train"],
        fitted_on=plan.dates["train"],
        min_coverage=config.data.min_coverage,
    )
    lap("features")
    incumbent = _in_charge_of(wf_run, records[-1], records) if records else None
    emit({"event": "stage", "index": index, "stage": "tournament"})
    challenger = _fold_tournament(config, wf_run, plan, data, incumbent, emit)
    lap("tournament")
    emit({"event": "stage", "index": index, "stage": "gate"})
    if config.gate.rule == "book":
        del data  # the book replays on the loaded bars with each policy's own features
        gc.collect()
        gate, in_charge, step = _book_gate(config, wf_run, plan, challenger, records, account.full, planned)
    else:
        gate, step = _nightly_gate(config, wf_run, plan, data, challenger, incumbent, account.feed), None
        del data
        gc.collect()
        in_charge = _challenger_in_charge(wf_run, plan, challenger) if gate.promote else incumbent
    lap("gate")
    emit({"event": "stage", "index": index, "stage": "account"})
    account.add(plan, in_charge)
    result = account.run()
    test = segment_figures(result, *plan.dates["test"], annualization=config.backtest.annualization)
    fold_run = wf_run.fold(index)
    fields = {
        **plan.to_dict(),
        "run": fold_run.path.name,
        "pods_tried": challenger.num_trials,
        "pods_failed": fold_run.info().pods_failed,
        "env_steps": fold_run.info().env_steps,
        "challenger": _policy_label(fold_run),
        "warm_started_from": challenger.warm_started_from,
        "gate": gate,
        "promoted": gate.promote,
        "book": step,
        "in_charge": _label(in_charge),
        "before_champion": config.gate.before_champion if in_charge is None else None,
        "feature_spec": fold_run.info().feature_spec,
        "test": test,
    }
    record = FoldRecord.parse(fields, wf_run.fold_record(index))
    lap("account")
    account.report(wf_run, config, [*records, record], result=result, home=home)
    lap("report")
    record = record.model_copy(update={"seconds": {**seconds, "total": round(sum(seconds.values()), 3)}})
    wf_run.write_fold_record(index, record)
    return record


def _nightly_gate(
    config: Config,
    wf_run: RunDir,
    plan: FoldPlan,
    data: FoldMarket,
    challenger: ChallengerRun,
    incumbent: Champion | None,
    feed: str | None = None,
) -> GateResult:
    """``[gate] rule = "window"`` or ``"always"``: the retrain gate on the fold's gate window (``feed``:
    the bars' data feed, for its report)."""
    bars, start = plan.bars, data.start
    return replay_gate(
        config,
        wf_run,
        market=data.window(start, bars["gate"][1]),
        valid=(bars["valid"][0] - start, bars["valid"][1] - start),
        window=(bars["gate"][0] - start, bars["gate"][1] - start),
        challenger=challenger,
        incumbent=incumbent,
        feed=feed,
    )


def _book_gate(
    config: Config,
    wf_run: RunDir,
    plan: FoldPlan,
    challenger: ChallengerRun,
    records: list[FoldRecord],
    full: MarketData,
    planned: int,
) -> tuple[GateResult, Champion | None, BookStep]:
    """``[gate] rule = "book"``: the fold's step of the run's shadow book (``app.walkforward.book``); the
    policy in charge of the test window is the book's champion."""
    book, step = fold_book(config, wf_run, plan, challenger, full, book_settings(config, planned))
    gate = GateResult(
        promote=step.promoted is not None,
        reason=f"shadow book: {step.reason}",
        rule="book",
        window=plan.dates["gate"],
    )
    return gate, _book_in_charge(wf_run, plan, challenger, records, book.champion), step


def _fold_tournament(
    config: Config,
    wf_run: RunDir,
    plan: FoldPlan,
    data: FoldMarket,
    incumbent: Champion | None,
    emit: Callable[[Event], None],
) -> ChallengerRun:
    """Fold ``plan``'s tournament in its own run folder (resumed when it holds one), warm-started from
    the incumbent as ``app.nightly.steps.tournament_step`` does, then the ensemble step."""
    index, bars = plan.fold.index, plan.bars
    fold_run = wf_run.fold(index)
    cfg = fold_config(config, index)
    args = to_tournament_args(cfg)
    train, valid = data.window(*bars["train"]), data.window(*bars["valid"])
    round_fn: Any = pod.learner_round
    warm_from = None
    if incumbent is not None and config.nightly.warm_start_pods > 0 and not is_ensemble(incumbent.policy_dir):
        round_fn = functools.partial(
            warm_start_round,
            champion_dir=incumbent.policy_dir,
            warm_pods=config.nightly.warm_start_pods,
        )
        warm_from = incumbent.run_id
    resume = fold_run.leaderboard.is_file()
    if not resume:
        fold_run.path.mkdir(parents=True, exist_ok=True)
        fold_run.update(
            run_id=f"{wf_run.run_id}/{fold_run.path.name}",
            kind="tournament",
            algo=config.agent.algo,
            windows={k: list(plan.dates[k]) for k in ("train", "valid")},
            feature_spec=data.spec,
            annualization=config.backtest.annualization,
            walkforward={"run": wf_run.run_id, "fold": index, "warm_started_from": warm_from},
        )
    result = run_tournament(
        fold_run.path,
        train,
        valid,
        args=args,
        **tournament_settings(config),
        round_fn=round_fn,
        config_toml=config_to_toml(cfg),
        resume=resume,
        interrupted="rerun",
        on_progress=lambda snap: emit({"event": "pods", "index": index, "snapshot": snap}),
        on_status=fold_run.on_status,
    )
    warm_pods = config.nightly.warm_start_pods if warm_from else 0
    result = after_tournament(
        fold_run, result, train, valid, cfg, device=config.agent.device, warm_pods=warm_pods
    )
    if result.champion is None:
        raise PodracerError(
            f"fold {index}: the tournament produced no champion ({result.pods_failed} pods failed)"
        )
    return ChallengerRun(
        run_id=f"{wf_run.run_id}/{fold_run.path.name}",
        run_dir=fold_run.path,
        policy_dir=fold_run.champion,
        num_trials=int(result.pods_tried),
        warm_started_from=warm_from,
    )


# --- the policy in charge --------------------------------------------------------------------------


def _challenger_in_charge(wf_run: RunDir, plan: FoldPlan, challenger: ChallengerRun) -> Champion:
    return _fold_champion(wf_run, plan.fold.index, challenger.run_id, plan.dates["gate"][1])


def _book_in_charge(
    wf_run: RunDir, plan: FoldPlan, challenger: ChallengerRun, records: list[FoldRecord], champion: Any
) -> Champion | None:
    """The book's champion (``champion``: its ``ChampionTenure``, None: no champion) as the policy in
    charge of fold ``plan``'s test window."""
    if champion is None:
        return None
    fold = fold_of(champion.run_id)
    if fold == plan.fold.index:
        return _challenger_in_charge(wf_run, plan, challenger)
    run_id = f"{wf_run.run_id}/{wf_run.fold(fold).path.name}"
    return _fold_champion(wf_run, fold, run_id, records[fold].windows["gate"][1])


def _in_charge_of(wf_run: RunDir, record: FoldRecord, records: list[FoldRecord]) -> Champion | None:
    """The policy in charge after fold ``record``, None = no champion yet."""
    label = record.in_charge
    if label is None:
        return None
    run_id = f"{wf_run.run_id}/{wf_run.fold(label.fold).path.name}"
    return _fold_champion(wf_run, label.fold, run_id, records[label.fold].windows["gate"][1])


def _fold_champion(wf_run: RunDir, fold: int, run_id: str, selection_end: str) -> Champion:
    """Fold ``fold``'s challenger as the policy in charge (selected on sessions up to ``selection_end``)."""
    fold_run = wf_run.fold(fold)
    return Champion(
        run_id=run_id,
        fold=fold,
        policy_dir=str(fold_run.champion),
        info=ChampionNote(run_dir=str(fold_run.path)),
        selection_end=selection_end,
        feature_spec=fold_run.info().feature_spec,
    )


def _policy_label(fold_run: RunDir) -> dict[str, Any]:
    champion = fold_run.info().champion
    return {
        "run": fold_run.path.name,
        "pod_id": champion.pod_id if champion else None,
        "valid_sharpe": champion.sharpe_ratio if champion else None,
    }


def _label(in_charge: Champion | None) -> dict[str, Any] | None:
    if in_charge is None or in_charge.run_dir is None:
        return None
    return {"fold": in_charge.fold, "run": in_charge.run_dir.name}
