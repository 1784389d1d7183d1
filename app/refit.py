"""The refit step after a tournament: its champion refitted on the train and validation windows.

Every flow that ends a tournament (``podracer train``, the demo, a nightly challenger, a walk-forward
fold) runs it after the ensemble step (:func:`after_tournament`, both): ``agents.tournament.refit.refit_champion`` replaces
``<run>/champion/`` when the champion is a direct pod that is its start, or a fine-tuned one that does
not beat its start on the validation window by the learner's margin (the chosen one kept as
``<run>/champion_chosen/``), and the run's record says what happened (``refit``: refitted, the
reason, the pod and its lineage's root, and for a fine-tuned champion ``start_t``, ``start_alpha_t``
(the alpha t of its daily difference from its start over buy-and-hold, the judge under ``[agent]
refit_alpha``) and ``start_sharpe``). A fine-tuned champion's start, scored on the validation window, is one more trial
of the run, as the ensemble is: ``pods_tried`` and ``trial_sharpes`` count it, and its returns
(``<run>/champion_start/``) join the selection statistics' trial matrix. A nightly or walk-forward
run's warm-started lineages stay as chosen. ``[tournament] refit = false`` leaves the chosen champion.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from typing import Any

from agents.tournament.orchestrator import TournamentResult
from agents.tournament.pod import VALID_RETURNS, write_valid_returns
from agents.tournament.refit import Refit, refit_champion
from app.config import Config, to_env_params, to_tournament_args
from app.ensemble import ensemble_step
from app.runs import RunDir

log = logging.getLogger(__name__)


def after_tournament(
    run: RunDir,
    result: TournamentResult,
    train: Any,
    valid: Any,
    config: Config,
    *,
    device: Any,
    warm_pods: int = 0,
) -> TournamentResult:
    """What every flow that ends a tournament does next: the ensemble of its top pods (one more
    trial, the champion if ``[tournament] champion = "ensemble"``: ``app.ensemble``), then the refit
    (:func:`refit_step`; ``warm_pods``: the run's first pods warm-started from an incumbent)."""
    result = ensemble_step(
        run,
        result,
        valid,
        to_tournament_args(config),
        params=to_env_params(config.env),
        annualization=config.backtest.annualization,
        device=device,
    )
    return refit_step(run, result, train, valid, config, warm_pods=warm_pods)


def refit_step(
    run: RunDir, result: TournamentResult, train: Any, valid: Any, config: Config, *, warm_pods: int = 0
) -> TournamentResult:
    """Refit ``result``'s champion on ``train`` joined with ``valid`` (module docstring); returns the
    result with ``champion["refit"]`` set, and with one more trial when a fine-tuned champion's start
    was scored on the validation window (recorded in ``refit`` and counted as the ensemble is)."""
    shutil.rmtree(run.champion_start, ignore_errors=True)  # (an earlier refit's look, before a resume)
    if result.champion is None:
        return result
    if not config.tournament.refit:
        shutil.rmtree(run.champion_chosen, ignore_errors=True)  # (an earlier refit's, before a resume)
        outcome = Refit(False, "[tournament] refit = false", str(result.champion.get("pod_id")))
    else:
        outcome = refit_champion(
            run.path,
            result.champion,
            train,
            valid,
            to_env_params(config.env),
            config.agent.model_dump(),
            config.backtest.annualization,
            warm_pods=warm_pods,
        )
    fields: dict[str, Any] = {"refit": outcome.record()}
    if outcome.start_scored:  # (looked at on the validation window: one more trial, its returns kept)
        write_valid_returns(run.champion_start / VALID_RETURNS, outcome.start_returns)
        sharpe = outcome.start_sharpe
        trial_sharpes = [*result.trial_sharpes, None if sharpe is None else float(sharpe)]
        result = dataclasses.replace(result, pods_tried=result.pods_tried + 1, trial_sharpes=trial_sharpes)
        fields.update(pods_tried=result.pods_tried, trial_sharpes=trial_sharpes)
    run.update(**fields)
    log.info("champion %s: %s", outcome.pod_id, outcome.reason)
    return dataclasses.replace(result, champion={**result.champion, "refit": outcome.refitted})
