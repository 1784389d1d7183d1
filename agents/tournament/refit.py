"""The champion refitted on the train and validation windows, once the validation window has chosen it.

A tournament fits its pods on the train window and chooses among them on the validation window; the
held-out test window is read by neither. Once the choice is made, the validation window's sessions
are past like the train window's, and a model fitted on both has seen more of the market: on the
daily planted shapes at real-factor strength, the same fits on the two windows ranked the test
window better than on the train window alone (docs/benchmarks.md, "Refitting after selection").
The baselines refit the same way (``backtests.linear``, ``backtests.boosted``), so the champion and
the ridge it is judged against have the same past behind them.

What is refitted, and when:

- **the direct learner's champion that is its start**: a direct pod's policy is made in closed form
  from its kind and seed (``agents.linear_start``, ``agents.nonlinear_start``: a ridge, and for the
  ``open`` kind a small network fitted to its residual), and the learner's held-out margin keeps it
  unless fine-tuning beats it (``agents.direct``). When the champion's weights are its lineage's
  root start, made again on the train window, bit for bit, the refit is that recipe run on the train
  and validation windows together (the same kind and seed; its own held-out tail, the last
  ``holdout_frac`` of the joined window, chooses the penalty and epochs as on the train window);
- **a champion whose weights moved, only if it beats its start on the validation window**: a
  fine-tuned policy replaced its start on the train window's tail by the learner's margin, and the
  tournament then chose it among several pods on the validation window: two selections on short
  windows, and fine-tuned champions chosen that way tested below their start on every planted market
  where the two were compared (docs/benchmarks.md). So the lineage's start, made again on the train
  window, is backtested on the validation window beside the champion, and the fine-tuned weights stay
  only if they beat the start there by the learner's ``holdout_margin`` standard errors; otherwise
  the start takes the champion's place and is refitted as above (a refit cannot rerun a fine-tuning
  judged on the train window's tail); ``holdout_margin`` 0 sets no bar, as in the learner. What is
  compared (``[agent] refit_alpha``, off by default): the daily alpha over buy-and-hold, that is the
  paired daily difference less its beta times buy-and-hold's return (``start_alpha_t``, the HAC
  t-statistic the verdict reads, ``backtests.alpha_bootstrap.alpha_t_statistic``); with it off, the
  paired daily difference itself (``start_t``, days taken as independent). Why the alpha: a
  fine-tuning that sold most of the book beat its start's raw returns in a falling validation window
  and then tested "not significant" with a beta of 0.1 (docs/benchmarks.md, "Population backend"):
  raw returns pay a fine-tuned policy for safety bought with exposure, which the test window's
  verdict, an alpha, does not;
- **not** a PPO or SAC champion (reinforcement learning from scratch again is not a refit), an
  ensemble, nor a lineage a nightly or walk-forward run warm-started from the incumbent's weights
  (it has no closed-form start). These stay as chosen, and the run's record says why
  (``refit.reason``).

The refitted policy replaces ``<run>/champion/`` (a whole-folder swap); the chosen one is kept as
``<run>/champion_chosen/``. Its validation score is the chosen policy's (the refit has read the
validation window, so it has none of its own). The start's look at the validation window is one more
trial of the run, as the ensemble's is: :class:`Refit` carries the start's validation returns, and
``app.refit`` writes them to ``<run>/champion_start/valid_returns.parquet`` and counts the trial in
``pods_tried`` and ``trial_sharpes`` (the selection statistics read its returns beside the pods').
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from agents.args import DirectArgs
from agents.direct import paired_t
from agents.policy import Policy
from agents.population.direct import start_direct_pod
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import RoundError, ValidReturns, learner_args, score_policies
from agents.training import policy_for_env
from backtests.alpha_bootstrap import alpha_t_statistic
from backtests.bootstrap_t import t_statistic
from backtests.engine import buy_and_hold_on
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.atomic import replace_dir

#: The run's champion folder, and where the chosen champion is kept when a refit replaces it (the
#: names ``app.runs`` reads them by: ``CHAMPION``, ``CHAMPION_CHOSEN``).
CHAMPION = "champion"
CHOSEN = "champion_chosen"


@dataclass(frozen=True)
class Refit:
    """What the refit step did: ``refitted``, and why not when it did not (one line)."""

    refitted: bool
    reason: str
    pod_id: str | None = None
    root_id: str | None = None
    start_t: float | None = None
    """a fine-tuned champion: the t-statistic of its daily validation returns over its start's"""
    start_alpha_t: float | None = None
    """a fine-tuned champion: the HAC t-statistic of the alpha over buy-and-hold of the paired daily
    difference (what ``refit_alpha`` judges by)"""
    start_sharpe: float | None = None
    """a fine-tuned champion: its start's validation Sharpe ratio"""
    start_returns: ValidReturns | None = field(default=None, repr=False, compare=False)
    """a fine-tuned champion: its start's validation returns (a trial; not in :meth:`record`)"""

    @property
    def start_scored(self) -> bool:
        """Whether the start was scored on the validation window: one more trial of the run."""
        return self.start_returns is not None

    def record(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "start_returns"}


def lineage_root(run_dir: Path, pod_id: str) -> Mapping[str, Any] | None:
    """The pod record at the root of ``pod_id``'s lineage (its parent's parent's ...), or None."""
    pods = {p["pod_id"]: p for p in read_pods(run_dir)}
    pod = pods.get(pod_id)
    while pod is not None and pod.get("parent_id") in pods:
        pod = pods[pod["parent_id"]]
    return pod


def root_args(base: Mapping[str, Any], root: Mapping[str, Any], train: Any, interval: int) -> DirectArgs:
    """The learner arguments the lineage started from: the root pod's kind and seed over the run's
    base ``[agent]`` settings (``agents.tournament.pod.learner_args``)."""
    raw = {**base, **(root.get("hparams") or {}), "seed": int(root["seed"])}
    return learner_args(DirectArgs, raw, train, interval)


def fresh_policy(market: Any, params: Any, args: DirectArgs) -> Policy:
    """A fresh direct pod's policy for ``market`` (``policy_for_env``, without an env), not started."""
    env = SimpleNamespace(
        market=market,
        params=params,
        num_assets=market.num_assets,
        num_features=market.num_features,
        device=market.device,
    )
    return policy_for_env(None, env, args, "direct")[0]


def start_of(market: Any, params: Any, args: DirectArgs) -> Policy:
    """A fresh direct pod's start on ``market``, as the tournament makes one (``policy_for_env`` and
    ``start_direct_pod``), before any gradient step."""
    policy = fresh_policy(market, params, args)
    start_direct_pod(policy, args, market, int(params.decision_interval))
    policy.eval()
    return policy


def same_policy(a: Policy, b: Policy) -> bool:
    """Whether two policies hold the same architecture and trading rule (their configs), weights and
    observation statistics, bit for bit."""
    sa, sb = a.state_dict(), b.state_dict()
    same = a.config == b.config and sa.keys() == sb.keys()
    return same and all(torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa)


@dataclass(frozen=True)
class StartLook:
    """A fine-tuned champion beside its start on the validation window (:func:`versus_start`)."""

    t: float
    """the paired t-statistic of the mean daily difference, chosen minus start (days independent)"""
    alpha_t: float
    """the HAC t-statistic of that difference's alpha over buy-and-hold"""
    sharpe: float | None
    """the start's validation Sharpe ratio"""
    returns: ValidReturns
    """the start's validation returns"""


def versus_start(chosen: Policy, start: Policy, valid: Any, params: Any, annualization: int) -> StartLook:
    """``chosen`` against ``start`` on ``valid``: both backtested by the env under the run's costs and
    caps in one backtest (``score_policies``), buy-and-hold under the same rules beside them. Raises
    ``RoundError`` when either's returns, or buy-and-hold's, are not finite."""
    scored = score_policies(
        {"chosen": chosen, "start": start}, valid, params, annualization=annualization, device=valid.device
    )
    for outcome in scored:
        if isinstance(outcome, RoundError):
            raise outcome
    (_, _, ours), (_, metrics, theirs) = scored
    t = float(paired_t(torch.as_tensor(ours.daily), torch.as_tensor(theirs.daily)))
    diff = np.asarray(ours.daily, dtype=np.float64) - np.asarray(theirs.daily, dtype=np.float64)
    try:
        alpha_t = difference_alpha_t(diff, buy_and_hold_daily(valid, params, theirs.dates))
    except RoundError:  # (the paired t stands without it; refit_alpha's judge reads NaN as unscored)
        alpha_t = float("nan")
    return StartLook(t, alpha_t, metrics.get("sharpe_ratio"), theirs)


def buy_and_hold_daily(valid: Any, params: Any, dates: Any) -> np.ndarray:
    """Buy-and-hold's daily returns on ``valid`` (the ``buy_and_hold`` baseline, under the run's
    execution rules) on ``dates``; raises ``RoundError`` when a date has none."""
    out = buy_and_hold_on(valid, params, dates, device=valid.device)
    if not np.isfinite(out).all():
        raise RoundError("buy-and-hold's validation returns do not line up with the pods'")
    return out


def difference_alpha_t(diff: np.ndarray, bench: np.ndarray) -> float:
    """The HAC t-statistic of the alpha of ``diff`` over ``bench`` (``alpha_t_statistic``); 0 where
    ``diff`` is 0 on every day (a chosen policy that trades as its start). Where no beta can be taken
    out (``bench`` does not vary, or under three sessions, which a line through fits exactly) it is
    the HAC t of ``diff``'s mean."""
    if not np.any(diff):
        return 0.0
    if len(diff) >= 3 and np.ptp(bench) > 0:
        t = alpha_t_statistic(diff, bench)
        if np.isfinite(t):
            return t
    return float(t_statistic(diff))


def _judged(
    chosen: Policy,
    start: Policy,
    valid: Any,
    params: Any,
    annualization: int,
    args: DirectArgs,
    ids: tuple[str, str],
) -> Refit:
    """A fine-tuned champion against its start on ``valid``: ``refitted`` when the start is to replace
    it (refitted on both windows), else why the champion stays."""
    margin = float(args.holdout_margin)
    if margin <= 0:  # (as the learner's margin: 0 keeps any fine-tuned step that scored better)
        return Refit(False, "fine-tuned; holdout_margin = 0: stays as chosen", *ids)
    try:
        look = versus_start(chosen, start, valid, params, annualization)
    except RoundError as err:
        return Refit(False, f"fine-tuned; its start could not be scored on validation ({err})", *ids)
    t, what = (look.alpha_t, "alpha t") if args.refit_alpha else (look.t, "t")
    if not np.isfinite(t):
        return Refit(False, "fine-tuned; buy-and-hold could not be scored on validation", *ids)
    figures = (look.t, look.alpha_t, look.sharpe, look.returns)
    if t > margin:
        reason = f"fine-tuned, beats its start on validation ({what} {t:.2f} > {margin:g})"
        return Refit(False, reason, *ids, *figures)
    reason = f"fine-tuned, not {margin:g} SE over its start on validation ({what} {t:.2f})"
    return Refit(True, reason, *ids, *figures)


def refit_champion(
    run_dir: Path,
    champion: Mapping[str, Any] | None,
    train: Any,
    valid: Any,
    params: Any,
    agent: Mapping[str, Any],
    annualization: int = TRADING_DAYS_PER_YEAR,
    warm_pods: int = 0,
) -> Refit:
    """Refit ``run_dir``'s champion on the train and validation windows joined (in time order) when
    it is a direct pod equal to its lineage's start on ``train``, or a fine-tuned one that does not beat
    that start on ``valid`` by the learner's margin (module docstring); ``agent``: the run's
    ``[agent]`` settings; ``warm_pods``: the run's first pods started from an incumbent's weights
    (a nightly or walk-forward warm start), whose lineages have no closed-form start to go back to.
    Replaces ``<run>/champion/`` when it refits."""
    # (a chosen champion kept by an earlier refit of this run, before a resume chose again, is stale)
    shutil.rmtree(Path(run_dir) / CHOSEN, ignore_errors=True)
    if champion is None:
        return Refit(False, "no champion")
    pod_id = str(champion.get("pod_id"))
    if agent.get("algo", "direct") != "direct":
        return Refit(False, f"a {agent.get('algo')} champion is not refitted", pod_id)
    root = lineage_root(run_dir, pod_id)
    if root is None:
        return Refit(False, "not a pod of the board (an ensemble)", pod_id)
    ids = (pod_id, str(root["pod_id"]))
    if int(root.get("seq", 0)) < warm_pods:
        return Refit(False, "a lineage warm-started from the incumbent's weights: stays as chosen", *ids)
    interval = int(params.decision_interval)
    args = root_args(agent, root, train, interval)
    if not args.linear_start:
        return Refit(False, "no closed-form start (linear_start is off)", *ids)
    target = Path(run_dir) / CHAMPION
    chosen, start = Policy.load(target, device=train.device), start_of(train, params, args)
    outcome = Refit(True, "refitted on the train and validation windows", *ids)
    if not same_policy(chosen, start):
        outcome = _judged(chosen, start, valid, params, annualization, args, ids)
        if not outcome.refitted:
            return outcome
        outcome = dataclasses.replace(outcome, reason=f"{outcome.reason}: the start, refitted")
    both = train.join(valid)
    refitted = start_of(both, params, root_args(agent, root, both, interval))
    shutil.copytree(target, Path(run_dir) / CHOSEN)
    staging = target.with_name(f".{target.name}.refit")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(target, staging)
    refitted.save(staging)
    replace_dir(staging, target)
    return outcome
