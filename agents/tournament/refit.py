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
  only if their daily returns there beat the start's by the learner's ``holdout_margin`` standard
  errors of the paired daily difference (``start_t``); otherwise the start takes the champion's place
  and is refitted as above (a refit cannot rerun a fine-tuning judged on the train window's tail);
  (``holdout_margin`` 0 sets no bar, as in the learner);
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

import torch

from agents.args import DirectArgs
from agents.direct import paired_t
from agents.policy import Policy
from agents.population.direct import start_direct_pod
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import RoundError, ValidReturns, learner_args, score_policies
from agents.training import policy_for_env
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
    """Whether two policies hold the same weights and observation statistics, bit for bit."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa)


def versus_start(
    chosen: Policy, start: Policy, valid: Any, params: Any, annualization: int
) -> tuple[float, float | None, ValidReturns]:
    """``(t, the start's validation Sharpe, the start's validation returns)``: the paired t-statistic
    of the mean of ``chosen``'s daily returns on ``valid`` over ``start``'s (the same sessions, both
    backtested by the env under the run's costs and caps, in one backtest: ``score_policies``; days taken
    as independent). Raises ``RoundError`` when either's returns are not finite."""
    scored = score_policies(
        {"chosen": chosen, "start": start}, valid, params, annualization=annualization, device=valid.device
    )
    for outcome in scored:
        if isinstance(outcome, RoundError):
            raise outcome
    (_, _, ours), (_, metrics, theirs) = scored
    t = float(paired_t(torch.as_tensor(ours.daily), torch.as_tensor(theirs.daily)))
    return t, metrics.get("sharpe_ratio"), theirs


def _judged(
    chosen: Policy,
    start: Policy,
    valid: Any,
    params: Any,
    annualization: int,
    margin: float,
    ids: tuple[str, str],
) -> Refit:
    """A fine-tuned champion against its start on ``valid``: ``refitted`` when the start is to replace
    it (refitted on both windows), else why the champion stays."""
    if margin <= 0:  # (as the learner's margin: 0 keeps any fine-tuned step that scored better)
        return Refit(False, "fine-tuned; holdout_margin = 0: stays as chosen", *ids)
    try:
        t, sharpe, returns = versus_start(chosen, start, valid, params, annualization)
    except RoundError as err:
        return Refit(False, f"fine-tuned; its start could not be scored on validation ({err})", *ids)
    if t > margin:
        reason = f"fine-tuned, beats its start on validation (t {t:.2f} > {margin:g})"
        return Refit(False, reason, *ids, t, sharpe, returns)
    reason = f"fine-tuned, not {margin:g} SE over its start on validation (t {t:.2f})"
    return Refit(True, reason, *ids, t, sharpe, returns)


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
        margin = float(args.holdout_margin)
        outcome = _judged(chosen, start, valid, params, annualization, margin, ids)
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
