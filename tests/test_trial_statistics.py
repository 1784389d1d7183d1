"""Trial statistics a user can trust: PBO wired into metrics.json, undefined Sharpes kept as nulls, the
minimum validation window, Calmar without drawdown, annualized figures withheld on short windows, and
the costs printed in captions."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import long_positive_first_feature

from agents.tournament import orchestrator, pod
from app import render
from app.cli import main
from app.config import Config
from app.evaluation import MIN_VALID_SESSIONS
from app.workflows.training import check_valid_sessions
from backtests import engine, report, scoring, selection
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.errors import ConfigError
from data.toy import toy_market
from envs.trading import EnvParams

# Long the assets whose first feature is positive: trades every decision, deterministic.
MOMENTUM = long_positive_first_feature(num_assets=4, num_features=8)


@pytest.fixture(scope="module")
def short_result():
    market = toy_market(num_steps=390 * 4, num_assets=4, num_features=8, seed=2)
    return engine.run_backtest(market, EnvParams(decision_interval=30), {"champion": MOMENTUM})


# --- PBO ------------------------------------------------------------------------------------------------
def test_metrics_document_has_pbo_over_the_trials_returns(short_result):
    rng = np.random.default_rng(0)
    returns = rng.normal(0.0, 0.01, size=(40, 6))
    doc = report.metrics_document(
        short_result, window="test", num_trials=6, trial_returns=returns, annualization=TRADING_DAYS_PER_YEAR
    )
    expected = selection.probability_of_backtest_overfitting(returns, num_splits=16)
    assert doc.pbo == pytest.approx(expected.pbo)
    assert doc.pbo_num_splits == expected.num_splits == 16
    assert doc.pbo_logits == pytest.approx(list(expected.logits))
    assert len(doc.pbo_logits) == math.comb(16, 8)
    keys = list(type(doc).model_fields)
    assert keys.index("pbo") == keys.index("num_trials") + 1  # next to num_trials, at the top


def test_pbo_is_null_with_one_pod_or_none(short_result):
    one = report.metrics_document(
        short_result,
        window="test",
        trial_returns=np.zeros((20, 1)) + 0.001,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    none = report.metrics_document(short_result, window="test", annualization=TRADING_DAYS_PER_YEAR)
    for doc in (one, none):
        assert doc.pbo is None and doc.pbo_logits == [] and doc.pbo_num_splits is None


def test_valid_returns_round_trip_into_one_matrix(tmp_path):
    dates = np.array(["2024-01-02", "2024-01-03", "2024-01-04"], dtype="datetime64[D]")
    stamps = np.array(["2024-01-02T14:30", "2024-01-02T14:45"], dtype="datetime64[ns]")
    for i, pod_id in enumerate(("p0", "p1")):
        series = pod.ValidReturns(
            dates, np.array([0.01, -0.02, 0.03]) * (i + 1), stamps, np.array([0.1, 0.2])
        )
        (tmp_path / pod_id).mkdir()
        pod.write_valid_returns(tmp_path / pod_id / pod.VALID_RETURNS, series)
    index, matrix, ids = pod.read_valid_returns_matrix(tmp_path, ["p0", "p1", "never-scored"])
    assert ids == ["p0", "p1"]
    np.testing.assert_allclose(matrix, [[0.01, 0.02], [-0.02, -0.04], [0.03, 0.06]])
    assert list(index.astype("datetime64[D]")) == list(dates)
    _, decision, _ = pod.read_valid_returns_matrix(tmp_path, ["p0"], period="decision")
    np.testing.assert_allclose(decision[:, 0], [0.1, 0.2])


def test_score_policy_returns_the_validation_series():
    market = toy_market(num_steps=390 * 3, num_assets=4, num_features=8, seed=1)
    score, metrics, series = pod.score_policy(
        MOMENTUM, market, EnvParams(decision_interval=30), annualization=TRADING_DAYS_PER_YEAR
    )
    assert len(series.daily) == 3 and len(series.decision) == len(series.decision_timestamps)
    # The series is what the score was computed from.
    sharpe = float(np.mean(series.daily) / np.std(series.daily, ddof=1) * math.sqrt(252))
    assert metrics["sharpe_ratio"] == pytest.approx(sharpe, rel=1e-9)
    assert np.prod(1 + series.daily) == pytest.approx(np.prod(1 + series.decision), rel=1e-9)


# --- undefined Sharpes ----------------------------------------------------------------------------------
def test_undefined_sharpes_stay_null_in_the_run_record():
    assert orchestrator._sharpe_or_none(None) is None
    assert orchestrator._sharpe_or_none(float("nan")) is None
    assert orchestrator._sharpe_or_none(1.5) == 1.5
    # A cash policy's Sharpe is undefined in score_policy's metrics (never 0).
    market = toy_market(num_steps=390 * 2, num_assets=4, num_features=8, seed=1)
    cash = lambda obs: torch.zeros(obs.shape[0], 4)  # noqa: E731
    score, metrics, _ = pod.score_policy(
        cash, market, EnvParams(decision_interval=30), annualization=TRADING_DAYS_PER_YEAR
    )
    assert metrics["sharpe_ratio"] is None and score == 0.0


def test_the_selection_block_counts_flat_trials_and_the_verdict_line_follows(short_result):
    rng = np.random.default_rng(1)
    returns = np.column_stack([rng.normal(0.0, 0.01, (40, 3)), np.zeros((40, 2))])
    doc = report.metrics_document(
        short_result, window="test", num_trials=5, trial_returns=returns, annualization=TRADING_DAYS_PER_YEAR
    )
    assert doc.selection.num_trials == 5 and doc.selection.trials_flat == 2
    assert doc.selection.effective_trials == 3  # independent noise: one cluster each
    assert doc.verdict_diagnostics.endswith(f"PBO {doc.pbo:.2f} (ranking among pods)")


# --- minimum validation sessions ------------------------------------------------------------------------
def test_training_refuses_a_validation_window_under_the_minimum():
    config = Config().with_updates(data={"num_sessions": 20})
    splits = SimpleNamespace(valid=SimpleNamespace(num_sessions=4), full=SimpleNamespace(num_sessions=20))
    with pytest.raises(ConfigError, match=f"at least {MIN_VALID_SESSIONS} are needed") as err:
        check_valid_sessions(splits, config)
    assert "num_sessions >= 48" in str(err.value) and "\n" not in str(err.value)
    check_valid_sessions(SimpleNamespace(valid=SimpleNamespace(num_sessions=10), full=None), config)


def test_demo_on_the_six_session_real_sample_refuses_in_one_line(home, capsys):
    rc = main(["--home", str(home), "demo", "--data", "real-sample", "--run", "rs", "--workers", "0"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"at least {MIN_VALID_SESSIONS} are needed" in err and "Traceback" not in err


# --- Calmar without drawdown ----------------------------------------------------------------------------
def _fake(daily):
    return SimpleNamespace(daily_returns=lambda: (None, torch.tensor(daily, dtype=torch.float64).T))


def test_calmar_fitness_ranks_a_never_losing_pod_first_ordered_by_return():
    strategies = [
        [0.01, 0.01, 0.01, 0.01],  # never loses, +4%
        [0.001, 0.001, 0.001, 0.001],  # never loses, +0.4%
        [0.05, -0.001, 0.05, 0.05],  # a tiny drawdown, big return: huge but finite Calmar
        [0.01, -0.02, 0.01, 0.01],  # a real drawdown
        [0.0, 0.0, 0.0, 0.0],  # flat (cash): undefined
    ]
    fit = scoring.fitness(
        _fake(strategies), "calmar", nan_value=-math.inf, annualization=TRADING_DAYS_PER_YEAR
    )
    order = torch.argsort(fit, descending=True).tolist()
    assert order == [0, 1, 2, 3, 4]
    assert fit[2] <= scoring.CALMAR_CAP < fit[1] < fit[0] < 2 * scoring.CALMAR_CAP
    assert fit[4] == -math.inf


# --- annualized figures on short windows ----------------------------------------------------------------
def test_annualized_figures_are_null_below_63_sessions(short_result):
    doc = report.metrics_document(short_result, window="test", annualization=TRADING_DAYS_PER_YEAR)
    assert doc.num_sessions == 4 and doc.annualized_min_sessions == 63
    for row in doc.strategies.values():
        assert row.annual_return is None and row.calmar_ratio is None
    assert doc.strategies["champion"].cum_returns_final is not None
    assert doc.strategies["champion"].sharpe_ratio is not None
    table = render.backtest_table(doc, "t")
    labels = list(table.columns[0].cells)
    assert "Annual return (n/a: window under 63 sessions)" in labels


def test_annualized_figures_are_kept_from_63_sessions():
    market = toy_market(num_steps=390 * 63, num_assets=2, num_features=1, seed=3)
    res = engine.run_backtest(market, EnvParams(decision_interval=390), baselines=("buy_and_hold",))
    doc = report.metrics_document(res, window="test", annualization=TRADING_DAYS_PER_YEAR)
    assert doc.num_sessions == 63
    assert doc.strategies["buy_and_hold"].annual_return is not None


# --- costs in captions ----------------------------------------------------------------------------------
def test_metrics_record_costs_and_captions_print_them(short_result):
    doc = report.metrics_document(
        short_result, window="test", cost_rate=0.002, slippage_bps=1.0, annualization=TRADING_DAYS_PER_YEAR
    )
    assert (doc.cost_rate, doc.slippage_bps) == (0.002, 1.0)
    caption = render._caption(doc)
    assert "costs 0.20% + 1 bp" in caption and "costs on" not in caption
    footer = render.demo_footer({"document": doc, "timings": {"total_s": 1.0}})
    assert "costs 0.20% + 1 bp" in footer
    assert report.costs_label(0.0005, 2.5) == "costs 0.05% + 2.5 bp"
    json.dumps(doc.to_json())  # JSON-able as written


def test_backtest_uses_the_recorded_annualization(tmp_path, capsys):
    from agents.networks import NetworkConfig
    from agents.policy import Policy, PolicyMeta
    from app.config import write_config
    from data.loader import load_market

    home = tmp_path / "home"
    cfg = Config().with_updates(data={"num_tickers": 4, "num_sessions": 6}, env={"decision_interval": 30})
    run = home / "runs" / "r1"
    run.mkdir(parents=True)
    write_config(cfg, run / "config.toml")
    market = load_market(cfg.data, home=home).full
    Policy(
        NetworkConfig(market.num_assets, market.num_features),
        PolicyMeta(tickers=market.tickers, feature_names=market.feature_names),
    ).save(run / "champion")
    record = {"pods_tried": 3, "trial_sharpes": [None, 0.5, 1.5], "annualization": 12}
    (run / "run.json").write_text(json.dumps(record))
    assert main(["--home", str(home), "backtest", "r1", "--json", "--no-tearsheet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # Trained with 12 periods a year (not today's 252): the per-day variance divides by 12.
    assert doc["annualization"] == 12
    assert doc["pbo"] is None and "equal_weight" in doc["strategies"]
    # The default broker, Alpaca: no commission, its regulatory fees recorded beside.
    assert doc["broker"] == "alpaca" and doc["cost_rate"] == 0.0 and doc["slippage_bps"] == 1.0
    assert doc["sec_fee_schedule"] == [["2024-05-22", 27.8e-6], ["2025-05-14", 0.0]]
    assert doc["taf_schedule"] == [["2024-01-01", 0.000166, 8.30]] and doc["round_fees"] is True
    # What was priced: the bars' feed and the volume scale the execution model read.
    assert doc["data_feed"] == "synthetic" and doc["volume_scale"] == 1.0
