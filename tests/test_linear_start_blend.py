"""The linear start's blend: the ridge averaged with the one feature that best ranks the fit rows
(``agents.linear_start.start_path``), pinned against a slow numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.args import DirectArgs
from agents.direct import Decisions
from agents.linear_start import SCREEN_SEED, fit_linear_start, screen_weights, screened_feature, start_path
from backtests.linear import PENALTIES, DecisionRows, ridge_path
from data.errors import ConfigError


def _panel(rows: int = 60, assets: int = 12, features: int = 6, edge: int = 4, seed: int = 0) -> DecisionRows:
    """Returns that load on feature ``edge`` (and a little on feature 0), some names untradable."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, assets, features, generator=gen, dtype=torch.float64)
    y = (
        0.02 * x[..., edge]
        + 0.005 * x[..., 0]
        + 0.1 * torch.randn(rows, assets, generator=gen, dtype=torch.float64)
    )
    ok = torch.rand(rows, assets, generator=gen) > 0.15
    return DecisionRows(x=x, y=y, ok=ok)


def _reference_sides(panel: DecisionRows, penalty: float) -> tuple[np.ndarray, np.ndarray]:
    """The blend's two sides the slow way (the ridge, and the screened feature's model at the ridge's
    spread): per-row demeaning over the valid names, the screen's t-statistics from per-row
    correlations, closed-form ridges, spreads over the valid entries."""
    x, y, ok = (t.numpy() for t in (panel.x, panel.y, panel.ok))
    rows, _, features = x.shape
    xd, yd = np.zeros_like(x), np.zeros_like(y)
    for k in range(rows):
        m = ok[k]
        xd[k, m] = x[k, m] - x[k, m].mean(axis=0)
        yd[k, m] = y[k, m] - y[k, m].mean()
    corr = np.zeros((rows, features))
    for k in range(rows):
        for j in range(features):
            den = np.sqrt((xd[k, :, j] ** 2).sum() * (yd[k] ** 2).sum())
            corr[k, j] = (xd[k, :, j] * yd[k]).sum() / den if den > 0 else 0.0
    t = corr.mean(axis=0) / (corr.std(axis=0, ddof=1) / np.sqrt(rows))
    j = int(np.abs(t).argmax())
    flat_x, flat_y = xd.reshape(-1, features), yd.reshape(-1)
    gram = flat_x.T @ flat_x
    ridge = np.linalg.solve(gram + penalty * gram.diagonal().mean() * np.eye(features), flat_x.T @ flat_y)
    single = np.zeros(features)
    # (its one-feature regression: only its sign survives the scaling to the ridge's spread below)
    single[j] = (flat_x[:, j] @ flat_y) / (gram[j, j] * (1.0 + penalty))

    def spread(coef: np.ndarray) -> float:
        s = x @ coef
        demeaned = np.concatenate([s[k, ok[k]] - s[k, ok[k]].mean() for k in range(rows)])
        return float(np.sqrt((demeaned**2).sum() / ok.sum()))

    return ridge, single * spread(ridge) / spread(single)


def _reference(panel: DecisionRows, penalty: float) -> np.ndarray:
    ridge, scaled = _reference_sides(panel, penalty)
    return 0.5 * (ridge + scaled)


def test_the_screen_picks_the_feature_that_ranks_the_returns():
    assert screened_feature(_panel(edge=4)) == 4
    assert screened_feature(_panel(edge=2, seed=3)) == 2


@pytest.mark.parametrize("penalty", [1e-2, 1.0, 10.0])
def test_the_blend_matches_a_slow_reference(penalty):
    panel = _panel()
    (got,) = start_path(panel, (penalty,), blend=True)
    np.testing.assert_allclose(got.numpy(), _reference(panel, penalty), rtol=1e-9, atol=1e-12)


def test_without_the_blend_the_start_is_the_ridge():
    panel = _panel()
    for got, ridge in zip(
        start_path(panel, PENALTIES, blend=False), ridge_path(panel, PENALTIES), strict=True
    ):
        assert torch.equal(got, ridge)


def _one_edge_among_many(rows: int, seed: int, assets: int = 30, features: int = 24) -> Decisions:
    """Decisions whose next-interval return loads on feature 0 alone, among ``features`` of noise."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, assets, features, generator=gen)
    hold = 0.0008 * x[..., 0] + 0.01 * torch.randn(rows, assets, generator=gen)
    ones = torch.ones(rows, assets, dtype=torch.bool)
    return Decisions(
        features=x,
        tradable=ones,
        fill_ok=ones,
        time_of_day=torch.zeros(rows),
        gap=torch.zeros(rows, assets),
        hold=hold,
    )


def _ic(coef: torch.Tensor, d: Decisions) -> float:
    s = d.features.double() @ coef.double()
    s, y = s - s.mean(dim=1, keepdim=True), d.hold.double() - d.hold.double().mean(dim=1, keepdim=True)
    return float(((s * y).sum(dim=1) / (s.norm(dim=1) * y.norm(dim=1)).clamp(min=1e-300)).mean())


def test_where_one_feature_carries_the_edge_the_blend_ranks_fresh_rows_better():
    """A simulation of the case the blend is for (few rows, many features, one that pays): over eight
    seeds the blended start's information coefficient on fresh rows beats the ridge's on average."""
    gains = []
    for seed in range(8):
        d = _one_edge_among_many(400, seed)
        fresh = _one_edge_among_many(2000, 100 + seed)
        ridge = fit_linear_start(d, 320, 0.5, blend=False)
        blend = fit_linear_start(d, 320, 0.5, blend=True)
        assert blend.blend and not ridge.blend and not blend.is_zero
        gains.append(_ic(blend.coef, fresh) - _ic(ridge.coef, fresh))
    assert np.mean(gains) > 0, gains


def test_the_blend_is_on_by_default_and_configurable():
    from app.config import Config, to_learner_args

    assert DirectArgs().start_blend
    config = Config().with_updates(agent={"algo": "direct", "start_blend": False})
    assert to_learner_args(config).start_blend is False
    shared = Config().with_updates(agent={"algo": "direct", "start_single_share": 1.0})
    assert to_learner_args(shared).start_single_share == 1.0


def test_a_start_records_its_single_share():
    """The share travels with the fitted start (``LinearStart.single_share``, what the nonlinear
    start's folds refit with); with share 1 the start is the screened feature's model alone, and a
    start without the blend keeps the default."""
    d = _one_edge_among_many(400, 0)
    alone = fit_linear_start(d, 320, 0.5, blend=True, single_share=1.0)
    assert alone.single_share == 1.0 and not alone.is_zero
    assert int((alone.coef.abs() > 0).sum()) == 1
    assert fit_linear_start(d, 320, 0.5, blend=False, single_share=1.0).single_share == 0.5


def test_the_ridge_decides_the_penalty_and_the_zero_model():
    """The blend is made at the ridge's chosen penalty; where the ridge is the zero model (no penalty
    with a positive held-out information coefficient) so is the blended start."""
    zeros = 0
    for seed in range(6):
        d = _one_edge_among_many(200, seed)
        d = Decisions(**{**d.__dict__, "hold": d.hold.roll(1, dims=1)}) if seed % 2 else d
        ridge = fit_linear_start(d, 160, 0.5, blend=False)
        blend = fit_linear_start(d, 160, 0.5, blend=True)
        assert blend.penalty == ridge.penalty and blend.is_zero == ridge.is_zero
        zeros += ridge.is_zero
    assert 0 < zeros < 6  # (both kinds of market were seen)


def test_rows_of_two_names_do_not_sway_the_screen():
    """Two names correlate at +-1 whatever they hold: such rows are left out of the screen, as the
    information coefficient leaves them out; so is a single row's undefined spread."""
    panel = _panel(rows=200, edge=4, seed=5)
    assert screened_feature(panel) == 4
    gen = torch.Generator().manual_seed(9)
    thin = torch.zeros(40, panel.ok.shape[1], dtype=torch.bool)
    thin[:, :2] = True
    x = torch.randn(40, *panel.x.shape[1:], generator=gen, dtype=torch.float64)
    y = x[..., 1].clone()  # (feature 1 is the thin rows' perfect ranker)
    mixed = DecisionRows(x=torch.cat([panel.x, x]), y=torch.cat([panel.y, y]), ok=torch.cat([panel.ok, thin]))
    assert screened_feature(mixed) == 4
    one = DecisionRows(x=panel.x[:1], y=panel.y[:1], ok=panel.ok[:1])
    assert 0 <= screened_feature(one) < panel.x.shape[-1]


def _demeaned(panel: DecisionRows) -> tuple[np.ndarray, np.ndarray]:
    """Features and target less their mean over each row's valid names (invalid entries 0)."""
    x, y, ok = (t.numpy() for t in (panel.x, panel.y, panel.ok))
    xd, yd = np.zeros_like(x), np.zeros_like(y)
    for k in range(x.shape[0]):
        m = ok[k]
        xd[k, m] = x[k, m] - x[k, m].mean(axis=0)
        yd[k, m] = y[k, m] - y[k, m].mean()
    return xd, yd


def _reference_weights(panel: DecisionRows, draws: int) -> np.ndarray:
    """The bagged screen the slow way: the same resamples (the screen's seeded generator), each
    resample's screen from per-row correlations computed in loops."""
    xd, yd = _demeaned(panel)
    rows, _, features = xd.shape
    corr = np.zeros((rows, features))
    for k in range(rows):
        for j in range(features):
            den = np.sqrt((xd[k, :, j] ** 2).sum() * (yd[k] ** 2).sum())
            corr[k, j] = (xd[k, :, j] * yd[k]).sum() / den if den > 0 else 0.0
    gen = torch.Generator().manual_seed(SCREEN_SEED)
    weights = np.zeros(features)
    for _ in range(draws):
        c = corr[torch.randint(0, rows, (rows,), generator=gen).numpy()]
        t = c.mean(axis=0) / (c.std(axis=0, ddof=1) / np.sqrt(rows))
        weights[int(np.abs(t).argmax())] += 1.0 / draws
    return weights


def _near_copies(rows: int = 80, seed: int = 0) -> DecisionRows:
    """Returns that load on a factor seen through three noisy copies (features 1, 2, 3)."""
    gen = torch.Generator().manual_seed(seed)
    factor = torch.randn(rows, 20, generator=gen, dtype=torch.float64)
    x = torch.randn(rows, 20, 6, generator=gen, dtype=torch.float64)
    for j in (1, 2, 3):
        x[..., j] = factor + 0.3 * x[..., j]
    y = 0.02 * factor + 0.1 * torch.randn(rows, 20, generator=gen, dtype=torch.float64)
    return DecisionRows(x=x, y=y, ok=torch.ones(rows, 20, dtype=torch.bool))


def test_the_bagged_screen_matches_a_slow_reference():
    panel = _near_copies()
    got = screen_weights(panel, 32)
    np.testing.assert_allclose(got.numpy(), _reference_weights(panel, 32), atol=1e-12)
    assert float(got.sum()) == pytest.approx(1.0)
    assert torch.equal(got, screen_weights(panel, 32))  # (seeded: the same rows give the same weights)


def test_the_bagged_screen_spreads_its_weight_over_near_copies():
    """Where the data cannot tell three copies of a factor apart the draws pick each of them; where
    one feature carries the edge alone they pick it; without draws the weight is the plain pick."""
    copies = screen_weights(_near_copies(), 64)
    assert float(copies[[1, 2, 3]].sum()) == pytest.approx(1.0) and int((copies > 0).sum()) >= 2
    alone = screen_weights(_panel(rows=200, edge=4), 64)
    assert float(alone[4]) > 0.9
    plain = screen_weights(_near_copies(), 0)
    assert float(plain.sum()) == 1.0 and int(plain.argmax()) == screened_feature(_near_copies())


@pytest.mark.parametrize("penalty", [1e-2, 1.0])
def test_the_bagged_blend_matches_a_slow_reference(penalty):
    """The single feature of a bagged blend: each picked feature's own regression at unit spread,
    weighted by its share of the draws; then the blend as with one pick."""
    panel = _near_copies()
    (got,) = start_path(panel, (penalty,), blend=True, screen_draws=32)
    weights = _reference_weights(panel, 32)
    x, ok = panel.x.numpy(), panel.ok.numpy()
    xd, yd = _demeaned(panel)
    flat_x, flat_y = xd.reshape(-1, x.shape[-1]), yd.reshape(-1)
    gram = flat_x.T @ flat_x
    ridge = np.linalg.solve(gram + penalty * gram.diagonal().mean() * np.eye(x.shape[-1]), flat_x.T @ flat_y)

    def spread(coef: np.ndarray) -> float:
        s = x @ coef
        demeaned = np.concatenate([s[k, ok[k]] - s[k, ok[k]].mean() for k in range(x.shape[0])])
        return float(np.sqrt((demeaned**2).sum() / ok.sum()))

    single = np.zeros(x.shape[-1])
    for j in np.nonzero(weights)[0]:
        one = np.zeros(x.shape[-1])
        one[j] = (flat_x[:, j] @ flat_y) / (gram[j, j] * (1.0 + penalty))
        single += weights[j] * one / spread(one)
    want = 0.5 * (ridge + single * spread(ridge) / spread(single))
    assert int((weights > 0).sum()) >= 2  # (the case the bagging is for)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-12)


def test_the_start_records_its_screen_and_the_default_bags_it():
    d = _one_edge_among_many(300, 1)
    start = fit_linear_start(d, 240, 0.5, blend=True, screen_draws=16)
    assert start.blend and start.screen_draws == 16 and not start.is_zero
    assert fit_linear_start(d, 240, 0.5, blend=False, screen_draws=16).screen_draws == 0
    assert DirectArgs().start_screen_draws == 64
    with pytest.raises(ConfigError, match="start_screen_draws"):
        DirectArgs(start_screen_draws=-1)


@pytest.mark.parametrize("share", [0.0, 0.75, 1.0])
def test_single_share_weighs_the_two_sides_against_the_reference(share: float) -> None:
    """``single_share``: the ridge times ``1 - share`` plus the screened feature's model (at the ridge's
    spread) times ``share``; 0 the ridge, 1 one coefficient, pinned against the slow reference."""
    panel = _panel()
    penalty = PENALTIES[2]
    coef = start_path(panel, (penalty,), True, single_share=share)[0].numpy()
    ridge, scaled = _reference_sides(panel, penalty)
    np.testing.assert_allclose(coef, (1.0 - share) * ridge + share * scaled, rtol=1e-9, atol=1e-12)
    if share == 1.0:
        assert np.flatnonzero(np.abs(coef) > 1e-12).tolist() == [screened_feature(panel)]


def test_single_share_of_a_half_is_the_equal_blend_to_the_bit() -> None:
    """``start_path``'s own default (the half, what runs before the setting computed) is the same to
    the bit as asking for it; the learner's default is the screened model alone."""
    panel = _panel(seed=3)
    penalties = tuple(PENALTIES[:3])
    for draws in (0, 16):
        default = start_path(panel, penalties, True, draws)
        for a, b in zip(default, start_path(panel, penalties, True, draws, single_share=0.5), strict=True):
            assert torch.equal(a, b)
    assert DirectArgs().start_single_share == 1.0
    with pytest.raises(ConfigError, match="start_single_share"):
        DirectArgs(start_single_share=1.5)
