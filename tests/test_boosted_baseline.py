"""The boosted baseline (backtests.boosted): LightGBM on the ridge's problem, fitted on the train window
and early-stopped on the validation window only, deterministic, traded as a baseline column."""

from __future__ import annotations

import pytest
import torch

from app import render
from backtests import engine, report
from backtests.boosted import BoostedSettings, fit_boosted, fit_panels
from backtests.linear import PENALTIES, DecisionRows, information_coefficient, ridge_path
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.loader import synthetic_market
from envs.trading import EnvParams
from tests.test_linear_baseline import INTERVAL, _with_noisy_test


@pytest.fixture(scope="module")
def planted_market():
    return synthetic_market(
        num_tickers=12, num_sessions=12, seed=0, signal=1.0, train_frac=0.5, valid_frac=0.25
    )


def _interaction_panel(seed: int, decisions: int = 200, assets: int = 20) -> DecisionRows:
    """Returns driven by the product of the first two of three features (no linear part), plus noise."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(decisions, assets, 3, generator=gen, dtype=torch.float64)
    noise = torch.randn(decisions, assets, generator=gen, dtype=torch.float64)
    y = 0.01 * x[..., 0] * x[..., 1] + 0.01 * noise
    return DecisionRows(x=x, y=y, ok=torch.ones(decisions, assets, dtype=torch.bool))


def test_it_recovers_a_planted_interaction_the_ridge_cannot() -> None:
    fit, valid, test = _interaction_panel(0), _interaction_panel(1, 100), _interaction_panel(2, 100)
    model = fit_panels(fit, valid)
    assert 0 < model.num_trees <= BoostedSettings().num_trees
    # The product's share of the return's variance is a half: a perfect ranker's IC is about 0.7.
    assert information_coefficient(model.scores(test.x, test.ok), test) > 0.4
    # Every penalty of the ridge ranks the test window at chance: the interaction has no linear part.
    for coef in ridge_path(fit, PENALTIES):
        assert abs(information_coefficient(test.x @ coef, test)) < 0.1


def test_without_validation_skill_it_is_the_zero_model() -> None:
    # The validation window's returns run against the train window's (the sign of the edge flips):
    # the trees rank it worse than chance, so the zero model (equal weight) is kept.
    fit, valid = _interaction_panel(0), _interaction_panel(1, 100)
    flipped = DecisionRows(x=valid.x, y=-valid.y, ok=valid.ok)
    model = fit_panels(fit, flipped)
    assert model.booster is None and model.num_trees == 0 and model.valid_ic == 0.0
    assert model.model_text() == ""
    obs = torch.zeros(2, 2 + 20 * (2 + 3))
    obs[:, 2 + 1 :: 2 + 3] = 1.0  # every asset tradable
    assert torch.allclose(model(obs), torch.full((2, 20), 1 / 20))
    # The same fit judged on the unflipped window keeps its trees.
    assert fit_panels(fit, valid).booster is not None


def test_fit_reads_no_test_window_bar_and_is_deterministic(planted_market) -> None:
    noisy, cut = _with_noisy_test(planted_market)
    assert not torch.equal(noisy.close[cut:], planted_market.full.close[cut:])
    train, valid, _ = noisy.split_sessions(0.5, 0.25)
    a = fit_boosted(planted_market.train, planted_market.valid, INTERVAL)
    b = fit_boosted(train, valid, INTERVAL)
    assert a.booster is not None and a.num_trees > 0  # a real model, not the zero model
    assert a.model_text() == b.model_text()
    assert (a.num_trees, a.valid_ic, a.train_ic) == (b.num_trees, b.valid_ic, b.train_ic)
    scores = a.scores(planted_market.test.features, planted_market.test.tradable)
    torch.testing.assert_close(
        scores, b.scores(planted_market.test.features, planted_market.test.tradable), rtol=0, atol=0
    )


def test_boosted_is_a_column_of_backtests_and_metrics(planted_market) -> None:
    model = fit_boosted(planted_market.train, planted_market.valid, INTERVAL)
    params = EnvParams(decision_interval=INTERVAL, initial_cash=1e4)  # the volume cap seldom binds
    num_assets = planted_market.test.num_assets

    def half(obs):
        return torch.full((obs.shape[0], num_assets), 0.5 / num_assets)

    result = engine.run_backtest(planted_market.test, params, {"champion": half}, boosted=model)
    assert result.names[-1] == "boosted"
    w = result.weights[:, result.index("boosted")]
    # invested in its top-quintile names (but where a thin bar's volume cap cut a buy), costs paid
    invested = w.sum(dim=-1)
    assert float((invested > 0.98).to(torch.float64).mean()) > 0.9 and float(invested.max()) < 1.02
    assert int((w[0] > 0).sum()) == round(0.2 * planted_market.test.num_assets)
    assert float(result.costs[:, result.index("boosted")].sum()) > 0
    doc = report.metrics_document(
        result, window="test", benchmark="buy_and_hold", seed=0, annualization=TRADING_DAYS_PER_YEAR
    )
    assert "boosted" in doc.strategies and doc.strategies["boosted"].sharpe_ratio is not None
    assert "boosted" in doc.oos_test.excess  # the champion's excess over it, a figure
    (line,) = render.ranker_lines(doc)  # printed under the verdict (no linear column in this run)
    assert line.startswith("excess over the boosted baseline ") and "not a condition of it" in line
    table = render.backtest_table(doc, "t")
    assert "boosted" in [str(c.header) for c in table.columns]
    assert "boosted" not in engine.run_backtest(planted_market.test, params).names  # only when handed


def test_refit_grows_the_kept_trees_again_on_train_and_valid() -> None:
    """The validation window chooses the number of trees (and judges) on the train window's fit; the
    refit grows that many on both windows' rows, and ranks the test window at least about as well."""
    fit, valid, test = _interaction_panel(0), _interaction_panel(1, 100), _interaction_panel(2, 100)
    train_only = fit_panels(fit, valid, refit=False)
    model = fit_panels(fit, valid)
    assert model.refit and not train_only.refit
    assert (model.num_trees, model.valid_ic, model.train_ic) == (
        train_only.num_trees,
        train_only.valid_ic,
        train_only.train_ic,
    )
    assert model.booster.current_iteration() == model.num_trees
    scores, before = model.scores(test.x, test.ok), train_only.scores(test.x, test.ok)
    assert not torch.equal(scores, before)
    assert information_coefficient(scores, test) > information_coefficient(before, test) - 0.05
