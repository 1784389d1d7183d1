"""The ensemble of a finished tournament's top pods, scored and recorded as one more trial
(``tournament.champion = "ensemble"`` makes it the champion). Run after every tournament: by
``podracer train --tournament`` (``app.workflows.training``), the nightly retrain and walk-forward.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import torch

from agents.ensemble import ENSEMBLE_POD, EnsemblePolicy
from agents.policy import Policy
from agents.tournament.orchestrator import TournamentArgs, TournamentResult
from agents.tournament.pod import VALID_RETURNS, score_policy, write_valid_returns
from app.runs import RunDir
from data.atomic import replace_dir
from data.market import MarketData


def ensemble_step(
    run_dir: RunDir,
    result: TournamentResult,
    valid: MarketData,
    args: TournamentArgs,
    *,
    params: Any,
    annualization: int,
    device: str | torch.device = "cpu",
) -> TournamentResult:
    """The ensemble of the board's top ``args.ensemble_size`` pods: scored on ``valid`` like a pod
    (``agents.tournament.pod.score_policy``), recorded as one more trial, saved to ``<run>/ensemble/``;
    the champion when ``args.champion == "ensemble"``. Returns the result with the trial added."""
    entries = result.leaderboard[: args.ensemble_size]  # best first; K is at most the board's size
    if not entries or result.champion is None:
        return result
    members = [Policy.load(run_dir.checkpoint(e["checkpoint"]), device=device) for e in entries]
    source = [{"pod_id": e["pod_id"], "score": e["score"]} for e in entries]
    ensemble = EnsemblePolicy(members, source)
    score, metrics, series = score_policy(
        ensemble, valid, params, fitness=args.fitness, annualization=annualization, device=device
    )
    _save_whole(ensemble, run_dir.checkpoint(ENSEMBLE_POD))
    # Its validation returns beside it, like a pod's: one more column of the PBO's trial matrix.
    write_valid_returns(run_dir.checkpoint(ENSEMBLE_POD) / VALID_RETURNS, series)
    sharpe = metrics.get("sharpe_ratio")
    summary = {
        "pod_id": ENSEMBLE_POD,
        "kind": "ensemble",
        "size": len(members),
        "members": source,
        "score": score,
        "sharpe_ratio": sharpe,
        "metrics": metrics,
        "checkpoint": ENSEMBLE_POD,
    }
    # Looked at on the validation window = one more trial, whether or not it becomes the champion. An
    # undefined Sharpe (all cash) is a trial with no Sharpe: None, never 0 (RunInfo.trials skips it).
    trial_sharpes = [*result.trial_sharpes, None if sharpe is None else float(sharpe)]
    champion = dict(result.champion)
    if args.champion == "ensemble":
        _save_whole(ensemble, run_dir.champion)
        champion = {**summary, "best_pod": result.champion}
        champion.pop("metrics")
    fields: dict[str, Any] = {
        "pods_tried": result.pods_tried + 1,
        "trial_sharpes": trial_sharpes,
        "ensemble": summary,
        "champion": champion,
    }
    run_dir.update(**fields)
    return dataclasses.replace(
        result, champion=champion, pods_tried=result.pods_tried + 1, trial_sharpes=trial_sharpes
    )


def _save_whole(policy: EnsemblePolicy, target: Path) -> None:
    """Save into a sibling staging folder and swap it in whole (never a half-written champion)."""
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    policy.save(staging)
    replace_dir(staging, target)
