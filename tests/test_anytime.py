"""The anytime-valid promotion test (``backtests.anytime``): known answers, its size on nulls checked
every night, its power on a planted edge, and the share of the level each challenger gets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from backtests import anytime

NIGHTS = 250


def test_no_excess_no_bet_no_wealth():
    assert np.all(anytime.betting_log_wealth(np.zeros(50)) == 0.0)


def test_a_steady_gain_grows_the_wealth_and_a_steady_loss_does_not():
    gains = anytime.betting_log_wealth(np.full(60, 0.01))
    losses = anytime.betting_log_wealth(np.full(60, -0.01))
    assert gains[-1] > math.log(20) and np.all(np.diff(gains) >= 0)
    assert np.all(losses == 0.0)  # the bet is never negative: a loss stakes nothing


def test_a_nan_session_stakes_nothing():
    x = np.full(30, 0.01)
    x[20] = np.nan
    lw = anytime.betting_log_wealth(x)
    assert lw[20] == lw[19]


def test_streams_in_columns_match_streams_one_at_a_time():
    rng = np.random.default_rng(1)
    x = rng.normal(0.001, 0.01, (80, 3))
    together = anytime.betting_log_wealth(x)
    for j in range(3):
        np.testing.assert_allclose(together[:, j], anytime.betting_log_wealth(x[:, j]))


def test_the_bet_uses_only_earlier_sessions():
    rng = np.random.default_rng(2)
    x = rng.normal(0.0, 0.01, 60)
    changed = x.copy()
    changed[40:] = rng.normal(0.05, 0.01, 20)
    np.testing.assert_array_equal(
        anytime.betting_log_wealth(x)[:40], anytime.betting_log_wealth(changed)[:40]
    )


@pytest.mark.parametrize("shape", ["student_t3", "left_skewed"])
def test_size_on_fat_tailed_and_skewed_nulls_checked_every_night(shape):
    rng = np.random.default_rng(3)
    if shape == "student_t3":
        x = rng.standard_t(3, (NIGHTS, 4000)) * 0.01 / math.sqrt(3)
    else:
        x = -(rng.exponential(1.0, (NIGHTS, 4000)) - 1.0) * 0.01
    # Rejected at any of the 250 nights: the running maximum, which Ville's inequality bounds.
    rate = np.mean(anytime.first_crossing(anytime.betting_log_wealth(x), 0.05) >= 0)
    assert rate <= 0.05


def test_power_on_a_planted_edge():
    rng = np.random.default_rng(4)
    x = rng.standard_t(3, (NIGHTS, 400)) * 0.01 / math.sqrt(3) + 0.005  # daily IR 0.5
    crossing = anytime.first_crossing(anytime.betting_log_wealth(x), 0.05)
    assert np.mean(crossing >= 0) >= 0.95
    assert np.median(crossing[crossing >= 0]) < 100


def test_demotion_sees_an_edge_gone_and_keeps_an_edge_that_stays():
    rng = np.random.default_rng(5)
    gone = rng.normal(-0.005, 0.01, (NIGHTS, 200))
    stays = rng.normal(0.003, 0.01, (NIGHTS, 200))
    assert np.mean(anytime.first_crossing(anytime.demotion_log_wealth(gone), 0.05) >= 0) >= 0.95
    assert np.mean(anytime.first_crossing(anytime.demotion_log_wealth(stays), 0.05) >= 0) == 0.0


@pytest.mark.parametrize("shape", ["student_t3", "left_skewed"])
def test_the_discounted_demotion_bet_keeps_the_level_on_nulls_checked_every_night(shape):
    rng = np.random.default_rng(6)
    if shape == "student_t3":
        x = rng.standard_t(3, (NIGHTS, 4000)) * 0.01 / math.sqrt(3)
    else:  # a champion's excess whose losses have the long tail: the demotion stream's worst case
        x = (rng.exponential(1.0, (NIGHTS, 4000)) - 1.0) * 0.01
    # A champion earning exactly the margin (H0's boundary) demoted at any of the 250 nights.
    rate = np.mean(anytime.first_crossing(anytime.demotion_log_wealth(x + 0.001, 0.001), 0.05) >= 0)
    assert rate <= 0.05


def test_the_discounted_demotion_bet_uses_only_earlier_sessions():
    rng = np.random.default_rng(7)
    x = rng.normal(0.0, 0.01, 60)
    changed = x.copy()
    changed[40:] = rng.normal(-0.05, 0.01, 20)
    np.testing.assert_array_equal(
        anytime.demotion_log_wealth(x)[:40], anytime.demotion_log_wealth(changed)[:40]
    )


def test_an_edge_switched_off_after_a_long_tenure_is_demoted_within_120_sessions():
    rng = np.random.default_rng(8)
    tenure, within = 60, 120
    # Daily IR 0.56 for 60 sessions, then -0.5: the demo champion's edge turned into a loss.
    x = np.concatenate([rng.normal(0.0056, 0.01, (tenure, 200)), rng.normal(-0.005, 0.01, (within, 200))])
    crossing = anytime.first_crossing(anytime.demotion_log_wealth(x), 0.05)
    assert not np.any((crossing >= 0) & (crossing < tenure))  # never while the edge lasted
    assert np.mean(crossing >= 0) >= 0.9  # about 97% (median 65 sessions after the switch)
    # The running mean of the whole tenure must first undo the past edge: most are never demoted.
    whole = anytime.first_crossing(anytime.demotion_log_wealth(x, 0.0, anytime.BETTING), 0.05)
    assert np.mean(whole >= 0) < 0.5


def test_every_challenger_ever_entered_shares_the_level():
    shares = [anytime.challenger_level(0.05, k, per_block=10) for k in range(1, 400)]
    assert sum(shares) <= 0.05
    assert sum(shares) == pytest.approx(0.05, rel=1e-9)
    assert shares[0] == pytest.approx(0.05 / 20) and shares[10] == pytest.approx(0.05 / 40)
    assert all(a >= b for a, b in zip(shares, shares[1:], strict=False))


def test_promotion_needs_both_tests():
    bar = anytime.log_threshold(0.01)
    assert anytime.promotion(bar, bar, 0.01)
    assert not anytime.promotion(bar, bar - 1e-9, 0.01)
    assert not anytime.promotion(bar - 1e-9, bar, 0.01)
    ev = anytime.Evidence(bar + 1, bar + 2, 0.01, 60)
    assert ev.passes and ev.e_values[0] == pytest.approx(math.exp(bar + 1))


def test_relative_returns_are_the_wealth_ratio_change():
    np.testing.assert_allclose(anytime.relative_returns([0.1, -0.5], [0.0, -0.5]), [0.1, 0.0])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        anytime.Betting(max_bet=0.0)
    with pytest.raises(ValueError):
        anytime.Betting(shrink=1.5)
    with pytest.raises(ValueError):
        anytime.Betting(variance_inflation=0.9)
    with pytest.raises(ValueError):
        anytime.Betting(half_life=0.0)
    with pytest.raises(ValueError):
        anytime.challenger_level(0.05, 0)


def test_catoni_bounds_the_factor_for_every_real_argument():
    # exp(phi(y)) <= 1 + y + y^2 / 2: why each factor keeps its mean under a second-moment bound
    y = np.linspace(-50.0, 50.0, 200_001)
    assert np.all(np.exp(anytime.catoni(y)) <= 1.0 + y + 0.5 * y * y + 1e-9)
    np.testing.assert_allclose(anytime.catoni(-y), -anytime.catoni(y))


def _null(shape: str, rng: np.random.Generator, sessions: int, streams: int) -> np.ndarray:
    """Daily alpha with mean exactly 0 and scale 1% in the market shapes the test promises."""
    s = 0.01
    if shape == "lognormal_skewed":  # skewness about -6
        z = np.exp(rng.normal(0.0, 1.0, (sessions, streams)))
        return -(z - math.exp(0.5)) / math.sqrt((math.e - 1.0) * math.e) * s
    if shape == "ar1_0.4":
        e = rng.normal(0.0, s * math.sqrt(1 - 0.16), (sessions + 50, streams))
        x = np.zeros_like(e)
        for t in range(1, len(e)):
            x[t] = 0.4 * x[t - 1] + e[t]
        return x[50:]
    if shape == "garch":
        h = np.full(streams, 1.0)
        x = np.zeros((sessions + 200, streams))
        for t in range(len(x)):
            x[t] = np.sqrt(h) * rng.normal(size=streams)
            h = 0.05 + 0.1 * x[t] ** 2 + 0.85 * h
        return x[200:] * s
    raise ValueError(shape)


@pytest.mark.parametrize("shape", ["lognormal_skewed", "ar1_0.4", "garch"])
def test_size_on_market_shaped_nulls_checked_every_night(shape):
    # 4,000 streams of 250 sessions: ever crossing 1 / 0.05 within two standard errors of 5%
    x = _null(shape, np.random.default_rng(11), NIGHTS, 4000)
    rate = np.mean(anytime.first_crossing(anytime.betting_log_wealth(x), 0.05) >= 0)
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 4000)


def test_a_beta_of_one_and_a_half_with_no_alpha_is_not_an_edge():
    rng = np.random.default_rng(12)
    b = rng.normal(0.0004, 0.01, (NIGHTS, 4000))  # the market drifts up
    r = 1.5 * b + rng.normal(0.0, 0.01, (NIGHTS, 4000))
    raw = np.mean(anytime.first_crossing(anytime.betting_log_wealth(r - b), 0.05) >= 0)
    alpha = np.mean(anytime.first_crossing(anytime.betting_log_wealth(anytime.alpha_excess(r, b)), 0.05) >= 0)
    assert alpha <= 0.05 and alpha < raw


def test_the_alpha_reads_a_beta_from_earlier_sessions_only():
    rng = np.random.default_rng(13)
    b = rng.normal(0.0, 0.01, 60)
    r = 2.0 * b + 0.001
    x = anytime.alpha_excess(r, b)
    assert x[0] == pytest.approx(r[0] - b[0])  # no earlier session: beta 1
    assert np.array_equal(x[:10], r[:10] - b[:10])  # beta 1 until 10 sessions are recorded
    for t in (10, 17, 59):  # a slow reference: the shrunk regression slope of the sessions before t
        m = np.mean(b[:t] ** 2)
        beta = (np.sum(r[:t] * b[:t]) + 20.0 * m) / (np.sum(b[:t] ** 2) + 20.0 * m)
        assert x[t] == pytest.approx(r[t] - min(beta, 3.0) * b[t], rel=1e-9, abs=1e-15)
    long_b = rng.normal(0.0, 0.01, 2000)
    learned = anytime.alpha_excess(2.0 * long_b + 0.001, long_b)
    assert np.allclose(learned[-10:], 0.001, atol=2e-4)  # the slope learned: the alpha is left
    changed = r.copy()
    changed[40:] += 0.05
    np.testing.assert_array_equal(anytime.alpha_excess(changed, b)[:40], x[:40])
    np.testing.assert_array_equal(anytime.alpha_difference(r, b, b), x)  # buy-and-hold's alpha is 0
