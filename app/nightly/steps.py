"""The real steps of a nightly retrain (``app.nightly.pipeline`` runs them in order).

- :func:`update_data_step`: new bars (:func:`incremental_update`), the market as ``podracer train``;
- :func:`tournament_step`: a new run ``<home>/runs/nightly-<UTC time>/`` trained on the TRAIN window
  and selected on the VALID window, the first ``nightly.warm_start_pods`` fresh pods starting from the
  current champion's weights (:func:`warm_start_round`) only when the champion's gate window ended
  before tonight's (:func:`gated_on_tonight`): otherwise tonight's gate would judge "out of sample" a
  policy whose ancestry was gated on the same sessions, and the warm start is dropped;
- :func:`score_step` (the pipeline's ``evaluate`` step): challenger and champion backtested together
  on the TEST window and scored (the champion on features normalized with its own statistics:
  ``app.nightly.normalization``), the challenger's look counted in the looks ledger and its
  out-of-sample test written in its run's ``backtest/`` report, which says its figures are the gate's
  selection figures;
- :func:`export_step` and :func:`keep_champion_copy` (on promotion): the challenger's bundle, and an
  immutable copy of its policy under ``<home>/champions/<run_id>/``.

The steps exchange :class:`DataSnapshot`, :class:`ChallengerRun` and :class:`Evaluation`;
:class:`RetrainSteps` bundles the injectable ones (tests use fakes), :func:`default_steps` the real.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
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
from app.champion import Champion
from app.config import Config, config_to_toml, to_env_params, to_tournament_args
from app.evaluation import (
    check_policy_fits,
    count_look,
    look_arguments,
    market_identity,
    policy_digest,
    selection_inputs,
)
from app.export import export_bundle
from app.gate import Evaluation, GateRule, finite
from app.nightly.normalization import champion_feature_spec, with_feature_spec, write_spec_file
from app.nightly.record import SELECTION
from app.refit import after_tournament
from app.runs import RunDir
from backtests import capacity, engine, report, scoring
from backtests.metrics_model import MetricsDocument
from backtests.verdict import stated_verdict
from data.atomic import replace_dir
from data.errors import CheckpointError, ConfigError, PodracerError
from data.loader import load_market
from data.sources.stream import fetch_to_store
from data.store import BarStore
from data.universe import resolve_tickers

log = logging.getLogger(__name__)

CHAMPIONS_DIR = "champions"
_POLICY_FILES = ("policy.safetensors", "spec.json")


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
    warm_started_from: str | None = None  # champion run id whose weights seeded the pool


@dataclass(frozen=True)
class RetrainSteps:
    """The pipeline's steps; replace any of them (tests, other data sources)."""

    update_data: Callable[[Any, Path], DataSnapshot]
    tournament: Callable[[Any, Path, DataSnapshot, Champion | None], ChallengerRun]
    evaluate: Callable[[Any, Path, DataSnapshot, ChallengerRun, Champion | None], Evaluation]
    export: Callable[[Any, Path, ChallengerRun], Path]


def default_steps() -> RetrainSteps:
    """The real pipeline."""
    return RetrainSteps(
        update_data=update_data_step,
        tournament=tournament_step,
        evaluate=score_step,
        export=export_step,
    )


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
            writer="podracer retrain (data update)",
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


def update_data_step(config: Config, home: Path) -> DataSnapshot:
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


def tournament_settings(config: Config) -> dict[str, Any]:
    """What a retrain's tournament and a walk-forward fold's read from the config besides their
    ``TournamentArgs``: the env and learner sections, the device and the annualization."""
    return {
        "env": config.env.model_dump(),
        "agent": config.agent.model_dump(),
        "device": config.agent.device,
        "annualization": config.backtest.annualization,
    }


def warm_start_round(task: Any, ctx: Any, *, champion_dir: str, warm_pods: int) -> Any:
    """The tournament's learner round, with the first ``warm_pods`` fresh pods starting from the
    champion's weights (module-level and partial-able, so worker processes can unpickle it)."""
    spec = task.spec
    if spec.parent_id is None and spec.init_checkpoint is None and spec.seq < warm_pods:
        task = dataclasses.replace(task, spec=dataclasses.replace(spec, init_checkpoint=champion_dir))
        log.info("pod %s warm-started from the champion's weights (%s)", spec.pod_id, champion_dir)
    return pod.learner_round(task, ctx)


def gated_on_tonight(champion: Champion, data: DataSnapshot) -> bool:
    """Whether the champion's gate window (``eval_end``, the last session its promotion read; its
    ancestors' gates read earlier sessions) reaches into tonight's gate window (``test``). A champion
    that records no gate window counts as gated on it (no warm start rather than a leak)."""
    tonight = data.windows.get("test")
    if tonight is None:
        return False
    gated_end = champion.eval_end
    return gated_end is None or str(gated_end) >= str(tonight[0])


def tournament_step(
    config: Config, home: Path, data: DataSnapshot, champion: Champion | None
) -> ChallengerRun:
    """Step 2: a tournament on train/valid in a new run, warm-started from the champion."""
    base_id = "nightly-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run = RunDir(home, base_id)
    suffix = 1
    while run.path.exists():  # two retrains within one second (tests): never reuse a run folder
        run = RunDir(home, f"{base_id}-{suffix}")
        suffix += 1
    run_id, run_dir = run.run_id, run.path
    splits = data.splits
    args = to_tournament_args(config)
    round_fn: Any = pod.learner_round
    warm_from = None
    if champion is not None and is_ensemble(champion.policy_dir):
        # An ensemble has no single network (nor optimizer state) to continue training from.
        log.info("champion %s is an ensemble: no warm start", champion.run_id)
    elif champion is not None and config.nightly.warm_start_pods > 0 and gated_on_tonight(champion, data):
        # Its weights were gated on sessions tonight's gate reads again: a warm-started challenger
        # would be judged "out of sample" on sessions its ancestry was selected on.
        log.info(
            "champion %s was gated on sessions up to %s, tonight's gate window starts %s: no warm start",
            champion.run_id,
            champion.eval_end,
            data.windows["test"][0],
        )
    elif champion is not None and config.nightly.warm_start_pods > 0:
        round_fn = functools.partial(
            warm_start_round,
            champion_dir=champion.policy_dir,
            warm_pods=config.nightly.warm_start_pods,
        )
        warm_from = champion.run_id
    run_dir.mkdir(parents=True)
    run.update(
        windows={k: list(v) for k, v in data.windows.items() if k != "full"},
        feature_spec=splits.full.feature_spec,
    )
    result = run_tournament(
        run_dir,
        splits.train,
        splits.valid,
        args=args,
        **tournament_settings(config),
        round_fn=round_fn,
        config_toml=config_to_toml(config),
        on_status=run.on_status,
    )
    # the ensemble of the top pods (one more trial, maybe the champion), then the refit
    warm_pods = config.nightly.warm_start_pods if warm_from else 0
    result = after_tournament(
        run, result, splits.train, splits.valid, config, device=config.agent.device, warm_pods=warm_pods
    )
    run.update(nightly={"warm_started_from": warm_from, "warm_start_pods": config.nightly.warm_start_pods})
    if result.champion is None:
        raise PodracerError(f"tournament {run_id} produced no champion ({result.pods_failed} pods failed)")
    return ChallengerRun(
        run_id=run_id,
        run_dir=run_dir,
        policy_dir=run.champion,
        num_trials=int(result.pods_tried),
        warm_started_from=warm_from,
    )


def score_step(
    config: Config,
    home: Path,
    data: DataSnapshot,
    challenger: ChallengerRun,
    champion: Champion | None,
) -> Evaluation:
    """Step 3: backtest challenger and champion together on the test window (one engine call, so the
    same bars, costs and fills), score both, count the challenger's look at the window in the looks
    ledger, and write the challenger run's ``backtest/`` report (the challenger as ``champion`` of its
    run, the incumbent as ``incumbent``) with its out-of-sample test at the gate's level
    (``app.gate.GateRule``): the verdict the gate reads; and the challenger's capacity curve
    (``backtests.capacity``: a report on the same window, the gate does not read it)."""

    device = config.agent.device
    market = data.splits.test
    params = to_env_params(config.env)
    fitness = GateRule.of_config(config).fitness
    annualization = config.backtest.annualization
    policies: dict[str, Any] = {"challenger": load_policy(challenger.policy_dir, device=device)}
    check_policy_fits(policies["challenger"], market, params)
    result = engine.run_backtest(market, params, policies, device=device, compile=config.backtest.compile)
    # The capacity curve of the report's strategy (the challenger, its run's "champion") and the
    # baselines at several account sizes, one more batched pass over the same bars.
    sizes = capacity.run_capacity(market, params, {"champion": policies["challenger"]}, device=device)
    normalization: dict[str, Any] = {"challenger": "tonight's train window (its own)"}
    if champion is not None:
        alone, normalization["champion"] = _score_incumbent(config, data, champion, params)
        result = merge_results(result, alone)
    metrics = report.compute_metrics(result, annualization=annualization)
    scores = scoring.fitness(result, fitness, annualization=annualization, nan_value=math.nan)
    for i, name in enumerate(result.names):
        metrics[name]["fitness"] = finite(float(scores[i]))
    renamed = dataclasses.replace(
        result,
        names=tuple({"challenger": "champion", "champion": "incumbent"}.get(n, n) for n in result.names),
    )
    doc = _gate_report(config, home, data, challenger, renamed, capacity_run=sizes)
    for name, how in normalization.items():
        metrics[name]["normalization"] = how
    return Evaluation(
        fitness=fitness,
        window=result.date_range(),
        challenger=metrics["challenger"],
        champion=metrics.get("champion") if champion is not None else None,
        edge=stated_verdict(doc),
        test=doc.oos_test,
    )


def _gate_report(
    config: Config,
    home: Path,
    data: DataSnapshot,
    challenger: ChallengerRun,
    renamed: engine.BacktestResult,
    *,
    capacity_run: engine.BacktestResult,
) -> MetricsDocument:
    """The challenger run's ``backtest/`` report of the test window (its look counted in the looks
    ledger, its out-of-sample test at the gate's level), labelled as the gate's selection figures."""
    device, params, run = config.agent.device, to_env_params(config.env), RunDir.at(challenger.run_dir)
    identity = market_identity(config.data)
    counted = count_look(
        home,
        challenger.run_id,
        renamed,
        window="test",
        market=identity,
        policy=policy_digest(challenger.policy_dir),
        run_dir=run,
    )
    info = run.info()
    doc = report.write_report(
        challenger.run_dir,
        renamed,
        window="test",
        annualization=config.backtest.annualization,
        num_trials=challenger.num_trials,
        trial_returns=selection_inputs(
            run,
            data.splits.valid.to(device),
            params,
            info.champion.pod_id if info.champion is not None else None,
            device=device,
        ),
        cost_rate=params.cost_rate,
        slippage_bps=params.slippage_bps,
        execution=report.priced_settings(params, data.splits, config.data),
        significance_level=GateRule.of_config(config).significance_level,
        **look_arguments(counted),
        seed=config.tournament.seed,
        market=identity,
        tearsheet=config.nightly.tearsheet,
        capacity=capacity_run,
        max_participation=params.max_participation,
    )
    # The promotion gate decides on this window: these are selection figures (app.nightly.record).
    doc = doc.model_copy(update={"role": SELECTION, "role_note": "the nightly gate decided on this window"})
    doc.write(run.backtest_metrics)
    return doc


def _score_incumbent(
    config: Config, data: DataSnapshot, champion: Champion, params: Any
) -> tuple[engine.BacktestResult, str]:
    """The champion backtested alone on the test window, and which normalization it saw.

    Like with like: the champion sees tonight's bars through ITS OWN feature normalization (the
    statistics its bundle carries), never tonight's. A second engine call on the same bars, costs and
    fills (the engine is deterministic from the window's first bar): merged with the challenger's, the
    same as one call with per-policy features."""
    device, market = config.agent.device, data.splits.test
    champ = load_policy(champion.policy_dir, device=device)
    spec, where = champion_feature_spec(champion)
    champ_market = market
    if spec is not None:
        champ_market = with_feature_spec(data.splits.full, market, spec)
        normalization = f"its own ({where})"
    else:
        log.warning("champion %s: %s; scoring it with tonight's normalization", champion.run_id, where)
        normalization = f"tonight's ({where})"
    try:
        check_policy_fits(champ, champ_market, params)
    except CheckpointError as err:
        raise CheckpointError(f"the champion cannot trade today's data: {err}") from None
    alone = engine.run_backtest(
        champ_market,
        params,
        {"champion": champ},
        baselines=(),
        device=device,
        compile=config.backtest.compile,
    )
    return alone, normalization


def merge_results(a: engine.BacktestResult, b: engine.BacktestResult) -> engine.BacktestResult:
    """One result with the strategies of ``a`` then ``b`` (two runs over the same window's bars)."""
    if not (np.array_equal(a.timestamps, b.timestamps) and a.tickers == b.tickers):
        raise PodracerError("cannot merge backtests of different windows or tickers")
    cat = {
        name: torch.cat([getattr(a, name), getattr(b, name)], dim=1)
        for name in ("equity", "returns", "weights", "costs", "turnover", "trades", "trade_costs")
    }
    for name in ("shares", "spread_costs", "impact_costs"):  # per-fill detail, where both have it
        both = getattr(a, name) is not None and getattr(b, name) is not None
        cat[name] = torch.cat([getattr(a, name), getattr(b, name)], dim=1) if both else None
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


def export_step(config: Config, home: Path, challenger: ChallengerRun) -> Path:
    """Step 5: the challenger's onnxruntime bundle under ``<home>/exports/``."""
    return export_bundle(challenger.run_dir, home=home)


def keep_champion_copy(home: Path, challenger: ChallengerRun) -> Path:
    """An immutable copy of the challenger's policy under ``<home>/champions/<run_id>/`` (what the
    champion pointer names), with the feature spec it was trained with."""
    return _copy_policy(
        challenger.policy_dir, home / CHAMPIONS_DIR / challenger.run_id, _run_feature_spec(challenger.run_dir)
    )


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
        write_spec_file(staging, feature_spec)
    return replace_dir(staging, target)


def _run_feature_spec(run_dir: Path) -> dict[str, Any] | None:
    try:
        return RunDir.at(run_dir).info().feature_spec
    except PodracerError:
        return None
