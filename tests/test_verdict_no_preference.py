"""A strategy that prefers no asset (the zero model: an equal-weight book whatever it observes) is not
stated as having an edge: its excess over buy-and-hold is equal weight's. Known answers for the probe
on the direct policy's real start path, the engine's record, metrics.json and the verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agents import direct
from agents.ensemble import EnsemblePolicy
from agents.linear_start import LinearStart
from agents.policy import Policy
from backtests import engine, report
from backtests import oos_test as sig
from backtests.linear import fit_linear
from backtests.metrics_model import MetricsDocument
from backtests.verdict import judge
from data.loader import synthetic_market
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

MARKET = {"num_tickers": 12, "num_sessions": 12, "seed": 0, "train_frac": 0.5, "valid_frac": 0.25}


def _started(coef: torch.Tensor) -> Policy:
    """A fresh direct policy set to the linear start ``coef`` through the learner's own start path."""
    splits = synthetic_market(signal=1.0, **MARKET)
    params = EnvParams()
    env = TradingVecEnv(splits.train, params, num_envs=1, seed=0)
    args = direct.DirectArgs(total_steps=1)
    policy = direct.train(args, env).policy  # (the policy's shapes and statistics; its start is reset)
    decisions = direct.decisions_of(splits.train, params.decision_interval)
    fit_rows = decisions.num - max(1, round(decisions.num * args.holdout_frac))
    zero = not bool(coef.any())  # (the zero model's penalty and temperature as the ridge fit sets them)
    start = LinearStart(coef, math.inf if zero else 1.0, 0.0 if zero else 0.1, 0.0 if zero else 5.0)
    fresh = Policy(policy.config, policy.meta)
    direct.start_from_linear(fresh, decisions, fit_rows, args, start=start)
    return fresh


def test_the_zero_start_prefers_no_asset_and_a_fitted_start_or_a_trained_policy_does_not():
    num_features = synthetic_market(signal=1.0, **MARKET).train.num_features
    zero = _started(torch.zeros(num_features))
    assert zero.prefers_no_asset()
    fitted = _started(torch.linspace(-1.0, 1.0, num_features))
    assert not fitted.prefers_no_asset()
    assert not Policy(zero.config, zero.meta).prefers_no_asset()  # a fresh network's random weights
    assert EnsemblePolicy([zero, zero.clone()]).prefers_no_asset()
    assert not EnsemblePolicy([zero, fitted]).prefers_no_asset()


def test_the_engine_and_metrics_json_record_which_policy_prefers_no_asset():
    splits = synthetic_market(signal=1.0, **MARKET)
    num_features = splits.train.num_features
    zero = _started(torch.zeros(num_features))
    fitted = _started(torch.linspace(-1.0, 1.0, num_features))
    linear = fit_linear(splits.train, splits.valid, EnvParams().decision_interval)
    flat = type(linear)(torch.zeros_like(linear.coef), math.inf, 0.0, 0.0)
    result = engine.run_backtest(
        splits.test,
        EnvParams(),
        {"champion": zero, "fitted": fitted, "flat_ridge": flat, "plain": lambda o: zero(o)},
    )
    assert result.no_preference == frozenset({"champion", "flat_ridge"})  # (a bare callable does not say)
    last = {name: result.weights[-1, result.index(name)] for name in ("champion", "fitted")}
    spread = {name: float(w.std() / w.mean()) for name, w in last.items()}
    assert spread["champion"] < 0.05 < spread["fitted"]  # near equal weight: the drift since its last trade
    doc = report.metrics_document(result, window="test", annualization=252)
    assert doc.oos_test.strategy == "champion" and doc.oos_test.prefers_no_asset is True
    other = report.metrics_document(
        engine.run_backtest(splits.test, EnvParams(), {"fitted": fitted}), window="test", annualization=252
    )
    assert other.oos_test.prefers_no_asset is False


def _document(returns, bench, prefers_no_asset):
    oos = sig.out_of_sample_test(
        returns, {"buy_and_hold": bench}, strategy="champion", benchmark="buy_and_hold"
    )
    oos["held_out"] = True
    oos["prefers_no_asset"] = prefers_no_asset
    doc = {"window": "test", "benchmark": "buy_and_hold", "significance_level": 0.05, "oos_test": oos}
    return MetricsDocument.parse({**doc, "strategies": {"champion": {}}})


def test_a_significant_alpha_of_a_book_that_prefers_no_asset_is_not_stated_as_an_edge():
    rng = np.random.default_rng(0)
    bench = rng.normal(-0.006, 0.012, 126)
    book = 0.5 * bench + 0.002 + rng.normal(0.0, 0.002, 126)  # +0.2%/day of alpha: significant
    assert judge(_document(book, bench, False)).outcome == "significant"
    assert judge(_document(book, bench, None)).outcome == "significant"  # (a document that does not say)
    verdict = judge(_document(book, bench, True))
    assert verdict.outcome == "not significant"
    assert verdict.text.startswith("edge not significant out of sample: alpha over buy_and_hold +0.")
    assert "it prefers no asset whatever it observes (the zero model" in verdict.text
    lost = rng.normal(0.0, 0.01, 126)  # an outcome that is not "significant" stays as it is
    assert judge(_document(lost, bench, True)).text == judge(_document(lost, bench, False)).text
