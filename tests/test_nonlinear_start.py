"""The direct learner's nonlinear start (agents.nonlinear_start) and the ridge start at a trade window
(agents.linear_start.start_panels): the network finds an interaction no ridge can, the policy's logits
are exactly the fitted score times its temperature, noise leaves the ridge's start as it was, and a
windowed start's targets are the returns held to the next trade (against a loop). The pair
candidate: its units hold a product, or any quadratic, of two features (against the quadratic itself),
its form is the residual's least squares, its screen finds the planted pair, the policy plays it, and
on noise it is kept about as often as its one-standard-error bar allows. The cross-fitted judgement
reads each fold at the epoch the other folds choose (against a loop)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agents import direct
from agents.args import DirectArgs
from agents.linear_start import returns_to_next_trade, start_panels, trade_rows
from agents.networks import NetworkConfig
from agents.nonlinear_start import normalized_features
from agents.policy import Policy
from data.errors import ConfigError
from data.planted_ic import rank_ic
from envs.observation import NUM_GLOBAL

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

K, A, F = 200, 30, 4


def _decisions(signal: float, seed: int = 0, per_session: int = 1, common: float = 0.0) -> direct.Decisions:
    """Random features; each row's return ``signal * x0 * x1`` plus noise (an interaction: no
    linear score of the features has any correlation with it), the features then shifted by a
    row's ``common`` move (the same for every name: a market's)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(K, A, F, generator=gen)
    hold = 0.01 * (signal * x[..., 0] * x[..., 1] + torch.randn(K, A, generator=gen))
    x = x + common * torch.randn(K, 1, F, generator=gen)
    position = torch.arange(K) % per_session
    return direct.Decisions(
        features=x,
        tradable=torch.ones(K, A, dtype=torch.bool),
        fill_ok=torch.ones(K, A, dtype=torch.bool),
        time_of_day=(position + 1).to(torch.float32) / per_session,
        gap=torch.zeros(K, A),
        hold=hold,
    )


def _started(d: direct.Decisions, nonlinear: bool, seed: int = 0, demean: bool = False) -> Policy:
    """The start with the member networks alone (no pair candidate; judged at the shared epoch)."""
    args = DirectArgs(
        asset_layers=1,
        nonlinear_start=nonlinear,
        seed=seed,
        rebalance_rate=1.0,
        demean_features=demean,
        start_products=False,
        start_crossfit=False,
    )
    config = NetworkConfig(A, F, asset_layers=1, linear_skip=True, embed=args.embed, demean_features=demean)
    policy = Policy(config)
    direct.start_from_linear(policy, d, int(K * 0.8), args)
    return policy


def _asset_logits(policy: Policy, d: direct.Decisions, rows: torch.Tensor) -> torch.Tensor:
    held = torch.full((len(rows), A), 1.0 / A)
    obs = direct.observation(held, d, rows)
    with torch.no_grad():
        return policy.net.actor_mean(policy.obs_norm.normalize(obs))[:, :A]


def test_the_network_finds_an_interaction_the_ridge_cannot():
    d = _decisions(signal=1.0)
    tail = torch.arange(int(K * 0.8), K)
    truth = (d.features[..., 0] * d.features[..., 1])[tail].numpy()
    ridge = _asset_logits(_started(d, False), d, tail).numpy()
    network_ic = rank_ic(_asset_logits(_started(d, True), d, tail).numpy(), truth).mean()
    assert abs(np.nan_to_num(rank_ic(ridge, truth)).mean()) < 0.1  # (all nan: the ridge's zero model)
    assert network_ic > 0.5


def test_a_market_wide_move_hides_the_interaction_from_a_network_that_does_not_demean():
    """Each name's features shifted by the row's common move: the product of a name's raw features
    is no longer its interaction; the network of demeaned features still finds it."""
    d = _decisions(signal=1.0, common=2.0)
    tail = torch.arange(int(K * 0.8), K)
    truth = (d.features[..., 0] - d.features[..., 0].mean(1, keepdim=True)) * (
        d.features[..., 1] - d.features[..., 1].mean(1, keepdim=True)
    )
    ic = lambda p: np.nan_to_num(rank_ic(_asset_logits(p, d, tail).numpy(), truth[tail].numpy())).mean()  # noqa: E731
    demeaned, raw = ic(_started(d, True, demean=True)), ic(_started(d, True))
    assert demeaned > 0.5 and demeaned > raw + 0.15, (demeaned, raw)


@pytest.mark.parametrize("demean", [False, True])
def test_the_policys_logits_are_the_fitted_score_times_its_temperature(demean):
    """Asset logits minus their mean across names = T * (ridge + network) minus its mean: the fit is
    what the policy plays, through the encoder, read-out and skip it was written into."""
    from agents.nonlinear_start import fit_nonlinear_start

    d = _decisions(signal=1.0, common=1.0 if demean else 0.0)
    fit_rows = int(K * 0.8)
    policy = _started(d, True, demean=demean)
    defaults = DirectArgs()
    ridge = direct.fit_linear_start(
        d,
        fit_rows,
        0.5,
        blend=defaults.start_blend,
        screen_draws=defaults.start_screen_draws,
        single_share=defaults.start_single_share,
    )
    fit, tail, _ = start_panels(d, fit_rows)
    network = fit_nonlinear_start(policy, fit, tail, ridge, seed=0)
    assert network is not None and network.holdout_ic > max(ridge.holdout_ic, 0.0)
    rows = torch.arange(50)
    score = ridge.scores(d.features[rows]) + network.scores(normalized_features(policy, d.features[rows]))
    logits = _asset_logits(policy, d, rows)
    centred = lambda t: t - t.mean(dim=-1, keepdim=True)  # noqa: E731
    ratio = float((centred(logits) * centred(score)).sum() / centred(score).square().sum())
    assert ratio > 0 and torch.allclose(centred(logits), ratio * centred(score), atol=1e-3)


def test_on_noise_the_start_is_the_ridges():
    d = _decisions(signal=0.0, seed=3)
    linear, nonlinear = _started(d, False), _started(d, True)
    rows = torch.arange(K)
    assert torch.allclose(_asset_logits(linear, d, rows), _asset_logits(nonlinear, d, rows), atol=1e-5)
    assert float(nonlinear.net.actor_readout.bias.detach().abs().max()) == 0.0  # the encoder is unused


def _started_with_products(d: direct.Decisions, seed: int = 0) -> Policy:
    args = DirectArgs(
        asset_layers=1, nonlinear_start=True, start_products=True, seed=seed, rebalance_rate=1.0
    )
    policy = Policy(NetworkConfig(A, F, asset_layers=1, linear_skip=True, embed=args.embed))
    direct.start_from_linear(policy, d, int(K * 0.8), args)
    return policy


def test_the_product_units_hold_the_product_of_two_features():
    from agents.nonlinear_start import PRODUCT_WIDTH, product_units

    z = torch.randn(60, 40, 5, generator=torch.Generator().manual_seed(1))
    ok = torch.ones(60, 40, dtype=torch.bool)
    for pair in ((1, 3), (2, 2)):
        weight, bias, readout = product_units(pair, z, ok)
        assert weight.shape == (PRODUCT_WIDTH, 5) and bias.shape == readout.shape == (PRODUCT_WIDTH,)
        approx = torch.relu(z @ weight.T + bias) @ readout
        exact = z[..., pair[0]] * z[..., pair[1]]
        inside = (z[..., pair[0]].abs() < 2) & (z[..., pair[1]].abs() < 2)
        corr = torch.corrcoef(torch.stack([approx[inside], exact[inside]]))[0, 1]
        assert corr > 0.98, (pair, float(corr))
        # at the knots the squares are exact: z_i = z_j = 0 gives 0
        assert float(torch.relu(torch.zeros(5) @ weight.T + bias) @ readout) == pytest.approx(0.0, abs=1e-6)


def test_the_quadratic_units_hold_a_quadratic_form_of_two_features():
    from agents.nonlinear_start import quadratic_units

    z = torch.randn(60, 40, 5, generator=torch.Generator().manual_seed(2))
    ok = torch.ones(60, 40, dtype=torch.bool)
    form = torch.tensor([[-1.0, 0.5], [0.5, 0.0]])  # z_0 z_3 - z_0^2: the last hour times the day's rest
    weight, bias, readout = quadratic_units((0, 3), form, z, ok)
    approx = torch.relu(z @ weight.T + bias) @ readout
    exact = z[..., 0] * z[..., 3] - z[..., 0].square()
    inside = (z[..., 0].abs() < 2) & (z[..., 3].abs() < 2)
    assert float(torch.corrcoef(torch.stack([approx[inside], exact[inside]]))[0, 1]) > 0.98


def test_the_pair_form_is_the_least_squares_quadratic_of_the_residual():
    from agents.nonlinear_start import pair_form

    gen = torch.Generator().manual_seed(4)
    z = torch.randn(80, 40, 5, generator=gen)
    ok = torch.rand(80, 40, generator=gen) > 0.1
    residual = z[..., 1] * z[..., 2] - 0.5 * z[..., 1].square() + 0.3 * z[..., 2].square()
    residual = residual + 0.1 * torch.randn(80, 40, generator=gen)
    form = pair_form((1, 2), z, residual, ok)
    assert torch.allclose(form, torch.tensor([[-0.5, 0.5], [0.5, 0.3]], dtype=torch.float64), atol=0.02)
    square = pair_form((2, 2), z, z[..., 2].square(), ok)  # (collinear columns: the minimum norm)
    assert float(square.sum()) == pytest.approx(1.0, abs=1e-6)


def test_the_product_candidate_finds_the_planted_pair_and_the_policy_plays_it():
    from agents.nonlinear_start import fit_nonlinear_start

    d = _decisions(signal=0.5, seed=1)
    fit_rows = int(K * 0.8)
    defaults = DirectArgs()
    ridge = direct.fit_linear_start(
        d, fit_rows, 0.5, blend=True, screen_draws=defaults.start_screen_draws, single_share=1.0
    )
    fit, tail, _ = start_panels(d, fit_rows)
    started = _started_with_products(d, seed=1)  # (the fit below reads its observation statistics)
    start = fit_nonlinear_start(started, fit, tail, ridge, seed=1, products=True)
    assert start is not None and start.pair == (0, 1)
    tail_rows = torch.arange(fit_rows, K)
    truth = (d.features[..., 0] * d.features[..., 1])[tail_rows].numpy()
    played = rank_ic(_asset_logits(started, d, tail_rows).numpy(), truth).mean()
    without = rank_ic(_asset_logits(_started(d, True, seed=1), d, tail_rows).numpy(), truth).mean()
    assert played > 0.6 and played >= without - 0.05, (played, without)


def test_on_noise_the_pair_candidate_is_kept_about_as_often_as_its_bar_allows():
    """The pair is screened and fitted inside each fold, so its out-of-fold rows are honest and a
    one-standard-error bar passes about 16% of noise panels: at most 6 of 16 here (P(X >= 7) = 0.008
    at 16%)."""
    from agents.nonlinear_start import _product_candidate, beats, fold_ridges, ridge_rows

    kept, defaults = 0, DirectArgs()
    for seed in range(16):
        d = _decisions(signal=0.0, seed=100 + seed)
        policy = _started(d, False)  # (its observation statistics: what the candidate reads)
        ridge = direct.fit_linear_start(
            d,
            int(K * 0.8),
            0.5,
            blend=defaults.start_blend,
            screen_draws=defaults.start_screen_draws,
            single_share=defaults.start_single_share,
        )
        fit, tail, _ = start_panels(d, int(K * 0.8))
        folds = fold_ridges(fit, ridge)
        kept += beats(
            _product_candidate(policy, fit, tail, ridge, folds)[1], ridge_rows(fit, tail, ridge, folds)
        )
    assert kept <= 6, kept


def test_crossfit_rows_read_each_fold_at_the_epoch_the_other_folds_choose():
    """Against a loop over folds and checks: fold f's rows are its curve at the check whose mean IC,
    pooled over the other folds' rows, is largest; never at its own best check when that differs."""
    from agents.nonlinear_start import crossfit_rows

    gen = torch.Generator().manual_seed(0)
    curves = [[torch.randn(7 + f, generator=gen) for _ in range(6)] for f in range(5)]
    # fold 0 alone peaks at check 5; the other folds together peak at check 2
    curves[0][5] = curves[0][5] + 10.0
    for f in range(1, 5):
        curves[f][2] = curves[f][2] + 1.0
    expected = []
    for f in range(5):
        best, best_mean = None, -math.inf
        for k in range(6):
            pooled = torch.cat([curves[g][k] for g in range(5) if g != f])
            if float(pooled.mean()) > best_mean:
                best, best_mean = k, float(pooled.mean())
        expected.append(curves[f][best])
    got = crossfit_rows(curves)
    assert torch.equal(got, torch.cat(expected))
    assert torch.equal(got[:7], curves[0][2])  # fold 0 read where the others peak, not at its own peak


def test_the_crossfit_networks_still_find_the_interaction_and_leave_noise_to_the_ridge():
    """Judged at the other folds' epochs (``start_crossfit``), the networks are kept on a planted
    interaction and the policy plays it; on noise the start is the ridge's."""

    def started(d: direct.Decisions) -> Policy:
        args = DirectArgs(
            asset_layers=1,
            nonlinear_start=True,
            start_crossfit=True,
            start_products=False,
            rebalance_rate=1.0,
        )
        policy = Policy(NetworkConfig(A, F, asset_layers=1, linear_skip=True, embed=args.embed))
        direct.start_from_linear(policy, d, int(K * 0.8), args)
        return policy

    d = _decisions(signal=1.0)
    tail = torch.arange(int(K * 0.8), K)
    truth = (d.features[..., 0] * d.features[..., 1])[tail].numpy()
    assert rank_ic(_asset_logits(started(d), d, tail).numpy(), truth).mean() > 0.5
    noise = _decisions(signal=0.0, seed=3)
    rows = torch.arange(K)
    assert torch.allclose(
        _asset_logits(_started(noise, False), noise, rows),
        _asset_logits(started(noise), noise, rows),
        atol=1e-5,
    )


@pytest.mark.parametrize("crossfit", [False, True])
def test_the_crossfit_setting_reaches_the_start(monkeypatch, crossfit):
    """``start_from_linear`` hands ``DirectArgs.start_crossfit`` (and ``start_products``) to the fit."""
    seen = {}

    def fake(*args, **kwargs):
        seen.update(kwargs)
        return None

    monkeypatch.setattr(direct, "fit_nonlinear_start", fake)
    d = _decisions(signal=0.0, seed=3)
    args = DirectArgs(asset_layers=1, nonlinear_start=True, start_crossfit=crossfit, rebalance_rate=1.0)
    assert args.start_products and DirectArgs().start_crossfit  # (both on by default)
    policy = Policy(NetworkConfig(A, F, asset_layers=1, linear_skip=True, embed=args.embed))
    direct.start_from_linear(policy, d, int(K * 0.8), args)
    assert seen["crossfit"] is crossfit and seen["products"] is True


def test_windowed_targets_are_the_returns_held_to_the_next_trade():
    d = _decisions(signal=0.5, seed=1, per_session=6)
    d = direct.Decisions(**{**d.__dict__, "gap": 0.001 * torch.randn(K, A)})
    trade = trade_rows(d.time_of_day, 0.2)  # the first of each 6 rows
    rows, y = returns_to_next_trade(d, trade)
    assert rows.tolist() == list(range(0, K - 6, 6))
    for i, k in enumerate(rows.tolist()[:5]):
        growth = torch.ones(A, dtype=torch.float64)
        for j in range(k, k + 6):  # hold of each row, then the gap to the next row's fill
            growth *= 1 + d.hold[j].double()
            if j < k + 5:
                growth *= 1 + d.gap[j + 1].double()
        assert torch.allclose(y[i], growth - 1, atol=1e-12)
    fit, tail, trades = start_panels(d, 200, window=0.2)
    assert fit.x.shape[0] == len(trades) == 200 // 6 and bool((trades < 200).all())  # targets end by 200
    assert tail.x.shape[0] == len([k for k in rows.tolist() if k >= 200])
    assert trade_rows(d.time_of_day, 1.0).all()


def test_the_nonlinear_start_needs_a_one_layer_encoder_and_the_linear_start():
    with pytest.raises(ConfigError, match="asset_layers = 1"):
        DirectArgs(nonlinear_start=True)
    with pytest.raises(ConfigError, match="asset_layers = 1"):
        DirectArgs(nonlinear_start=True, asset_layers=1, linear_start=False)
    with pytest.raises(ConfigError, match="demean_features"):
        DirectArgs(demean_features=True)
    with pytest.raises(ValueError, match="demean_features"):
        NetworkConfig(A, F, demean_features=True)
    assert math.isfinite(DirectArgs(nonlinear_start=True, asset_layers=1).top_mass)
    assert NUM_GLOBAL == 2
