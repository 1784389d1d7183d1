"""The linear baseline (backtests.linear): fitted on train and validation windows only, traded as a
baseline column of every backtest through the env's own step."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from backtests import capacity, engine
from backtests.linear import decision_panel, fit_linear, information_coefficient, join_panels, ridge_path
from data.loader import synthetic_market
from envs.trading import EnvParams

INTERVAL = 15


@pytest.fixture(scope="module")
def planted():
    return synthetic_market(
        num_tickers=12, num_sessions=12, seed=0, signal=1.0, train_frac=0.5, valid_frac=0.25
    )


def _with_noisy_test(splits):
    """The same market with every bar of its test window (prices, volumes, features) replaced by noise."""
    full = splits.full
    cut = full.num_steps - splits.test.num_steps
    gen = torch.Generator().manual_seed(7)

    def noisy(x):
        out = x.clone()
        out[cut:] = (torch.rand(out[cut:].shape, generator=gen) + 0.5) * x[cut:].abs().mean()
        return out

    return dataclasses.replace(
        full,
        open=noisy(full.open),
        high=noisy(full.high),
        low=noisy(full.low),
        close=noisy(full.close),
        volume=noisy(full.volume),
        features=torch.cat([full.features[:cut], torch.randn(full.features[cut:].shape, generator=gen)]),
    ), cut


def test_fit_reads_no_test_window_bar(planted) -> None:
    noisy, cut = _with_noisy_test(planted)
    assert not torch.equal(noisy.close[cut:], planted.full.close[cut:])
    train, valid, _ = noisy.split_sessions(0.5, 0.25)
    a = fit_linear(planted.train, planted.valid, INTERVAL)
    b = fit_linear(train, valid, INTERVAL)
    assert torch.equal(a.coef, b.coef)
    assert a.penalty == b.penalty and a.valid_ic == b.valid_ic


def test_fit_finds_the_planted_momentum_and_not_the_null(planted) -> None:
    model = fit_linear(planted.train, planted.valid, INTERVAL)
    assert model.valid_ic > 0.02
    # the 390-bar return carries the planted 520-bar momentum: its coefficient is the largest positive
    names = list(planted.train.feature_names)
    assert int(model.coef.argmax()) == names.index("ret_390")
    null = synthetic_market(
        num_tickers=12, num_sessions=12, seed=0, signal=0.0, train_frac=0.5, valid_frac=0.25
    )
    control = fit_linear(null.train, null.valid, INTERVAL)
    assert control.valid_ic < model.valid_ic
    if control.coef.any():  # a model chosen for a chance validation IC ranks the test window at random:
        # within 3 standard errors of a null mean IC over the test window's rows (~1 / sqrt(rows x names))
        panel = decision_panel(null.test, INTERVAL)
        bound = 3.0 / math.sqrt(panel.ok.shape[0] * (null.test.num_assets - 1))
        assert abs(information_coefficient(panel.x @ control.coef, panel)) < bound


def test_without_validation_skill_the_zero_model_holds_equal_weight(planted) -> None:
    # Penalties that all rank the validation window worse than chance leave the infinite penalty.
    model = fit_linear(planted.train, planted.valid, INTERVAL, penalties=())
    assert model.penalty == float("inf") and not model.coef.any() and model.valid_ic == 0.0
    obs = torch.zeros(2, 2 + planted.test.num_assets * (2 + planted.test.num_features))
    obs[:, 2 + 1 :: 2 + planted.test.num_features] = 1.0  # every asset tradable
    assert torch.allclose(model(obs), torch.full((2, planted.test.num_assets), 1 / planted.test.num_assets))


def test_linear_is_a_baseline_column_of_backtests_and_capacity(planted) -> None:
    model = fit_linear(planted.train, planted.valid, INTERVAL)
    # An account small enough that the volume cap never binds (it trades under the run's cap).
    params = EnvParams(decision_interval=INTERVAL, initial_cash=1e4)
    result = engine.run_backtest(planted.test, params, linear=model)
    assert result.names[-1] == "linear"
    w = result.weights[:, result.index("linear")]
    take = round(0.2 * planted.test.num_assets)
    # fully invested in its top-quintile names (drift between fill and mark aside)
    assert torch.allclose(w.sum(dim=-1), torch.ones(w.shape[0]), atol=0.02)
    assert int((w[0] > 0).sum()) == take
    assert float(result.costs[:, result.index("linear")].sum()) > 0  # it pays the env's costs
    # without a fitted model there is no such column
    assert "linear" not in engine.run_backtest(planted.test, params).names
    sizes = capacity.run_capacity(planted.test, params, {}, levels=(1e4, 1e6), linear=model)
    assert {"linear@10000", "linear@1e+06"} <= set(sizes.names)
    one = sizes.equity[-1, sizes.index("linear@10000")]
    assert float(one) == pytest.approx(
        float(result.equity[-1, result.index("linear")]) / result.initial_value, rel=0.05
    )


def test_refit_is_the_chosen_penalty_fitted_on_train_and_valid(planted) -> None:
    """The validation window chooses the penalty on the train window's fit; the refit is the ridge at
    that penalty on both windows' rows (and the figures of the choice are the train fit's)."""
    train_only = fit_linear(planted.train, planted.valid, INTERVAL, refit=False)
    model = fit_linear(planted.train, planted.valid, INTERVAL)
    assert model.refit and not train_only.refit
    assert (model.penalty, model.valid_ic, model.train_ic) == (
        train_only.penalty,
        train_only.valid_ic,
        train_only.train_ic,
    )
    both = join_panels(decision_panel(planted.train, INTERVAL), decision_panel(planted.valid, INTERVAL))
    assert torch.equal(model.coef, ridge_path(both, (model.penalty,))[0].cpu())
    assert not torch.equal(model.coef, train_only.coef)
    zero = fit_linear(planted.train, planted.valid, INTERVAL, penalties=())
    assert not zero.refit and not zero.coef.any()
