"""The power table's columns: the strategies each market's row judges, and their verdicts.

Every column is a policy backtested on the held-out test window under the champion's execution rules
(the env's ``EnvParams``: costs, volume cap), all of them in **one** ``backtests.engine.run_backtest``
call (rows of one batched env, each policy called on its own row, so the env's step and the
buy-and-hold and equal-weight benchmarks run once a market, not once a column), then judged one by
one as the report judges a champion (``report.metrics_document`` on that column and the benchmarks:
the alpha over buy-and-hold at the 5% level, one look, seeded):

- ``champion``: the direct tournament's champion;
- ``start``: the champion's unfine-tuned start: its lineage's root pod's start, made again from that
  pod's kind and seed (``champion_root_args``; ``agents.linear_start`` and, for the ``open`` kind,
  ``agents.nonlinear_start`` through the pod's own ``agents.population.direct.start_direct_pod``),
  before any gradient step;
- ``ridge_quintile`` / ``boosted_quintile``: the ridge (``backtests.linear``) and the LightGBM ranker
  (``backtests.boosted``), fitted once a market on the train window with the validation window's
  penalty / early stopping, each traded its own way (the top 20% held equal weight);
- ``ridge_softmax`` / ``boosted_softmax``: the same fitted scores traded the champion's way
  (:class:`ScoreSoftmax`: the direct policy's head, its softmax at the start's temperature and cash
  level, its partial rebalancing ``rebalance_rate`` and its trade window, those of the champion's
  kind); the ridge's is the champion's own network
  with its linear skip set to the ridge (``start_from_linear`` with that ridge), the boosted ranker's
  the same head on the trees' scores (tests/test_power_table.py checks the two heads agree);
- ``ppo``: the champion of a PPO tournament on the same windows (``--with-ppo``);
- ``oracle``: the planted predictor (``data.synthetic.planted_predictor``) traded the champion's way;
  ``oracle_quintile``: the same traded top 20% equal weight (the table's ``oracle`` before these
  columns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from agents.args import DirectArgs
from agents.direct import Decisions, decisions_of, start_from_linear
from agents.linear_start import LinearStart, temperature_for
from agents.policy import Policy, current_weights, raw_to_action
from agents.tournament.refit import fresh_policy, lineage_root, root_args, start_of
from backtests import engine, report
from backtests.boosted import BoostedModel
from backtests.linear import LinearModel, top_weights
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.metrics_model import ExcessFigures, OosTest
from envs.observation import FEATURES, TIME_OF_DAY, TRADABLE, split_obs

#: Every column a row can hold, in the table's order (``ppo`` only with ``--with-ppo``).
COLUMNS = (
    "champion",
    "start",
    "ridge_quintile",
    "ridge_softmax",
    "boosted_quintile",
    "boosted_softmax",
    "ppo",
    "oracle",
    "oracle_quintile",
)
#: The benchmarks each column is judged against (buy-and-hold) or shown beside (equal weight).
BENCHMARKS = ("buy_and_hold", "equal_weight")
#: What each column's entry of a row holds.
FIELDS = (
    "outcome",
    "p_value",
    "alpha_p_value",
    "alpha_per_day",
    "beta",
    "psr",
    "excess_per_day",
    "sharpe",
    "turnover",
    "costs",
    "prefers_no_asset",  # (rows written before the verdict's no-preference rule lack it)
)
#: Rows written before these columns had ``linear`` (the ridge, top 20%) and ``oracle`` (top 20%).
OLD_NAMES = {"linear": "ridge_quintile", "oracle": "oracle_quintile"}


def upgraded(row: dict) -> dict:
    """``row`` with the column names of today: a row written before the columns (no ``columns``
    list) has its ``linear`` and ``oracle`` renamed; every other column is absent from it."""
    if "columns" in row:
        return row
    out = {OLD_NAMES.get(key, key): value for key, value in row.items()}
    out["columns"] = [c for c in COLUMNS if c in out]
    return out


class ScoreSoftmax:
    """Scores traded the champion's way: the direct policy's head (``agents.policy.raw_to_action``)
    on the logits ``temperature * scores`` of the assets and ``temperature * level`` of cash, moved
    ``rebalance_rate`` of the way from the held weights. ``temperature`` and ``level`` are set as the
    champion's ridge start sets its own (``agents.linear_start``: the temperature that puts
    ``top_mass`` of the book on the top 20%, the cash logit at the scores' mean), by
    :meth:`calibrated` on the train window's fit rows."""

    def __init__(
        self,
        scores: Callable[[Tensor], Tensor],
        temperature: float,
        level: float,
        rebalance_rate: float,
        num_assets: int,
        trade_window: float = 1.0,
    ) -> None:
        self.scores, self.temperature, self.level = scores, float(temperature), float(level)
        self.rebalance_rate, self.num_assets = float(rebalance_rate), int(num_assets)
        self.trade_window = float(trade_window)

    @classmethod
    def calibrated(
        cls,
        scores: Callable[[Tensor], Tensor],
        train_scores: Tensor,
        train_tradable: Tensor,
        args: DirectArgs,
    ) -> ScoreSoftmax:
        """The head of ``scores``, its temperature and cash level from the scores ``(K, A)`` of the
        train window's fit rows (the zero model's flat scores: temperature 0, equal logits)."""
        train_scores = train_scores.to(torch.float32)
        temperature = temperature_for(train_scores, train_tradable, args.top_mass)
        level = float(train_scores.mean())
        return cls(scores, temperature, level, args.rebalance_rate, train_scores.shape[-1], args.trade_window)

    def prefers_no_asset(self) -> bool:
        """Flat scores (temperature 0): equal logits whatever it observes (the zero model's head)."""
        return self.temperature == 0.0

    def __call__(self, obs: Tensor) -> Tensor:
        s = self.scores(obs).to(torch.float32)
        cash = torch.full_like(s[:, :1], self.temperature * self.level)
        raw = torch.cat([self.temperature * s, cash], dim=-1)
        current = current_weights(obs, self.num_assets).to(raw.dtype)
        action = raw_to_action(raw, "weights", self.num_assets, current, self.rebalance_rate)
        if self.trade_window >= 1.0:
            return action
        hold = obs[:, TIME_OF_DAY] > self.trade_window  # (agents.policy.Policy.to_action)
        return torch.where(hold.unsqueeze(-1), current, action)


class PlantedScores:
    """The planted predictor's row at decision ``k`` (bar ``offset + k * interval``, the ``k``-th
    call: the engine calls a policy once per decision, in order), for every observation row."""

    def __init__(self, predictor: np.ndarray, offset: int, interval: int) -> None:
        self.predictor = torch.as_tensor(predictor, dtype=torch.float32)
        self.offset, self.interval, self.calls = offset, interval, 0

    def __call__(self, obs: Tensor) -> Tensor:
        bar = self.offset + self.calls * self.interval
        self.calls += 1
        return self.predictor[bar].to(obs.device).expand(obs.shape[0], -1)


class Quintile:
    """Scores traded the linear baseline's way: the top 20% of the tradable assets, equal weight."""

    def __init__(self, scores: Callable[[Tensor], Tensor], num_features: int) -> None:
        self.scores, self.num_features = scores, num_features

    def __call__(self, obs: Tensor) -> Tensor:
        s = self.scores(obs)
        _, block = split_obs(obs, s.shape[-1], self.num_features)
        return top_weights(s, block[..., TRADABLE] > 0.5)


def boosted_scores(model: BoostedModel, num_assets: int) -> Callable[[Tensor], Tensor]:
    """The boosted ranker's scores of an observation (its features and tradable flags)."""

    def scores(obs: Tensor) -> Tensor:
        _, block = split_obs(obs, num_assets, model.num_features)
        return model.scores(block[..., FEATURES], block[..., TRADABLE] > 0.5)

    return scores


def fit_rows_of(train: Any, interval: int, args: DirectArgs) -> tuple[Decisions, int]:
    """The direct learner's decisions of the train window and its fit rows (those before the
    held-out tail its early stopping reads, split as ``agents.direct.train`` splits them)."""
    decisions = decisions_of(train, interval)
    return decisions, decisions.num - max(1, int(round(decisions.num * args.holdout_frac)))


def start_policy(train: Any, params: Any, args: DirectArgs, linear: LinearModel | None = None) -> Policy:
    """A fresh direct pod as the tournament starts one on ``train`` (``agents.tournament.refit.start_of``),
    before any gradient step: with ``linear`` its skip set to that ridge instead of the one the pod
    fits (the ridge traded through the champion's own network)."""
    if linear is None:
        return start_of(train, params, args)
    policy = fresh_policy(train, params, args)
    decisions, fit_rows = fit_rows_of(train, int(params.decision_interval), args)
    scores = decisions.features[:fit_rows] @ linear.coef.to(torch.float32)
    temperature = temperature_for(scores, decisions.tradable[:fit_rows], args.top_mass)
    if temperature <= 0.0:  # the zero model: no asset preferred, the start's zero model
        coef = torch.zeros_like(linear.coef, dtype=torch.float32)
    else:
        coef = linear.coef.to(torch.float32)
    ridge = LinearStart(
        coef=coef, penalty=linear.penalty, holdout_ic=linear.valid_ic, temperature=temperature
    )
    start_from_linear(policy, decisions, fit_rows, args, ridge)
    policy.eval()
    return policy


def champion_root_args(
    base: DirectArgs, run_dir: Any, champion: Mapping[str, Any] | None, train: Any, interval: int
) -> DirectArgs:
    """The learner arguments the champion's lineage started from: its root pod's kind and seed over
    the run's ``base`` arguments (``agents.tournament.pod.learner_args``), so ``start`` is that
    pod's unfine-tuned start and the ``_softmax`` columns trade as its kind does (trade window,
    rebalance rate). ``base`` when the board holds no such pod."""
    root = lineage_root(run_dir, str(champion.get("pod_id"))) if run_dir is not None and champion else None
    return base if root is None else root_args(dataclasses.asdict(base), root, train, interval)


def column_policies(
    splits: Any,
    params: Any,
    args: DirectArgs,
    fitted: Mapping[str, Any],
    predictor: np.ndarray,
) -> dict[str, Any]:
    """Every column's policy but the tournaments' champions: ``fitted`` holds the ridge
    (``"linear"``) and the boosted ranker (``"boosted"``), each fitted once for the market and shared
    by its two columns; ``args`` the champion's root pod's (:func:`champion_root_args`)."""
    train, test = splits.train, splits.test
    linear_way = dataclasses.replace(args, nonlinear_start=False, demean_features=False, asset_layers=0)
    interval = int(params.decision_interval)
    decisions, fit_rows = fit_rows_of(train, interval, args)
    features, tradable = decisions.features[:fit_rows], decisions.tradable[:fit_rows]
    linear, boosted = fitted["linear"], fitted["boosted"]
    offset = splits.full.num_steps - test.num_steps  # the test window is the market's tail
    planted_train = torch.as_tensor(predictor[: fit_rows * interval : interval], dtype=torch.float32)
    boosted_of = boosted_scores(boosted, test.num_assets)
    return {
        "start": start_policy(train, params, args),
        "ridge_quintile": linear,
        "ridge_softmax": start_policy(train, params, linear_way, linear),
        "boosted_quintile": boosted,
        "boosted_softmax": ScoreSoftmax.calibrated(
            boosted_of, boosted.scores(features, tradable), tradable, args
        ),
        "oracle": ScoreSoftmax.calibrated(
            PlantedScores(predictor, offset, interval), torch.nan_to_num(planted_train), tradable, args
        ),
        "oracle_quintile": Quintile(PlantedScores(predictor, offset, interval), test.num_features),
    }


def verdicts(test: Any, params: Any, policies: Mapping[str, Any], seed: int) -> dict[str, dict[str, Any]]:
    """Each policy's verdict on the test window: one batched backtest of them all beside the
    benchmarks, then each column judged alone (:func:`only`) as the report judges a champion."""
    result = engine.run_backtest(test, params, dict(policies), baselines=BENCHMARKS)
    return {name: verdict_of(only(result, name), name, seed) for name in policies}


def only(result: engine.BacktestResult, name: str) -> engine.BacktestResult:
    """``result`` cut to the column ``name`` followed by the benchmarks (the report judges the first
    column that is not a baseline)."""
    keep = [result.index(name)] + [i for i, n in enumerate(result.names) if n in BENCHMARKS]
    index = torch.tensor(keep)
    cut: dict[str, Any] = {"names": tuple(result.names[i] for i in keep)}
    cut["terminated_at"] = tuple(result.terminated_at[i] for i in keep)
    for key in ("equity", "returns", "weights", "costs", "turnover", "trades", "trade_costs"):
        cut[key] = getattr(result, key).index_select(1, index)
    for key in ("day_equity", "shares", "spread_costs", "impact_costs"):
        value = getattr(result, key)
        cut[key] = None if value is None else value.index_select(1, index)
    return dataclasses.replace(result, **cut)


def verdict_of(result: engine.BacktestResult, name: str, seed: int) -> dict[str, Any]:
    """``name``'s entry of a row: ``outcome`` is the verdict's, which tests the alpha over
    buy-and-hold (``alpha_p_value``, after the looks); ``p_value`` is the mean excess's, a figure
    beside it; ``costs`` the costs paid, a fraction of the initial cash."""
    doc = report.metrics_document(
        result, window="test", benchmark="buy_and_hold", seed=seed, annualization=TRADING_DAYS_PER_YEAR
    )
    oos = doc.oos_test or OosTest()
    excess = oos.excess.get("buy_and_hold") or ExcessFigures()
    strategy = doc.strategies[name]
    return {
        "outcome": doc.verdict_outcome,
        "p_value": excess.p_value_after_looks,
        "alpha_p_value": excess.alpha_p_value_after_looks,
        "alpha_per_day": excess.alpha_per_day,
        "beta": excess.beta,
        "psr": oos.psr_after_looks,
        "excess_per_day": excess.mean_per_day,
        "sharpe": strategy.sharpe_ratio,
        "turnover": strategy.turnover,
        "costs": strategy.costs_paid,
        "prefers_no_asset": oos.prefers_no_asset,  # (the verdict's no-preference rule applied when true)
    }
