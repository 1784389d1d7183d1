"""The out-of-sample test (``backtests.oos_test``) against known answers: the bootstrap p-value of
pure-noise excess returns is uniform, an obvious edge gets the smallest p-value the replications
allow, the p-value is the documented formula, and the looks deflate both tests as documented."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from backtests import bootstrap_t, selection
from backtests import oos_test as sig


def test_pure_noise_excess_gives_uniform_p_values():
    # 200 markets with no edge: the one-sided p-values spread evenly over (0, 1), so the test rejects
    # at 5% about 5% of the time. 199 replications each keeps this under a couple of seconds.
    p_values = [
        sig.excess_p_value(
            np.random.default_rng(seed).normal(0.0, 0.01, 120),
            seed=seed,
            min_replications=199,
            max_replications=199,
        ).p_value
        for seed in range(200)
    ]
    assert stats.kstest(p_values, "uniform").pvalue > 0.01
    rejected = np.mean(np.asarray(p_values) <= 0.05)
    assert 0.01 <= rejected <= 0.10
    assert 0.4 <= np.median(p_values) <= 0.6


def test_an_obvious_edge_has_no_p_value_floor():
    # +1%/day, t-stat ~ 15: no bootstrap replicate reaches it, so the analytic HAC t tail gives the
    # p-value, far below what any count of replications could (1/2001 used to be the floor).
    excess = np.random.default_rng(1).normal(0.01, 0.005, 60)
    test = sig.excess_p_value(excess, seed=0)
    assert test.replications == bootstrap_t.MAX_REPLICATIONS and test.block_length >= 1.0
    assert test.method == bootstrap_t.ANALYTIC or test.bound
    assert test.p_value < 1e-6
    # and the opposite edge the largest, decided on the first batch of replications
    worst = sig.excess_p_value(-excess, seed=0)
    assert worst.p_value == pytest.approx(1.0) and worst.replications == bootstrap_t.MIN_REPLICATIONS


def test_the_p_value_is_the_documented_formula():
    x = np.random.default_rng(7).normal(0.001, 0.01, 40)
    test = sig.excess_p_value(x, seed=11, min_replications=500, max_replications=500)
    rng = np.random.default_rng(11)
    idx = bootstrap_t.stationary_indices(rng, (1, 500), 40, test.block_length)[0]
    star = x[idx]
    t_star = (star.mean(axis=1) - x.mean()) / bootstrap_t.hac_standard_error(star)
    t_obs = x.mean() / bootstrap_t.hac_standard_error(x)
    assert test.t_stat == pytest.approx(t_obs)
    assert test.p_value == pytest.approx((1 + np.count_nonzero(t_star >= t_obs)) / 501)
    again = sig.excess_p_value(x, seed=11, min_replications=500, max_replications=500)
    assert again == test  # seeded: reproducible
    assert sig.excess_p_value(np.full(30, 0.001)) is None  # no dispersion: no test
    assert sig.excess_p_value([0.01]) is None


def test_the_hac_standard_error_is_newey_west():
    x = np.random.default_rng(3).normal(size=80)
    lags = bootstrap_t.newey_west_lags(80)
    d = x - x.mean()
    gamma = [np.sum(d[k:] * d[: len(d) - k]) / 80 for k in range(lags + 1)]
    lrv = gamma[0] + 2 * sum((1 - k / (lags + 1)) * gamma[k] for k in range(1, lags + 1))
    assert bootstrap_t.hac_standard_error(x) == pytest.approx(np.sqrt(lrv / 80))
    assert (bootstrap_t.newey_west_lags(20), bootstrap_t.newey_west_lags(252)) == (2, 4)


def test_the_stationary_bootstrap_keeps_blocks():
    idx = bootstrap_t.stationary_indices(np.random.default_rng(0), (2000,), 50, 5.0)
    steps = np.diff(idx, axis=-1)
    continued = (steps == 1) | (steps == -49)  # the next index, circularly
    assert continued.mean() == pytest.approx(0.8 + 0.2 / 50, abs=0.01)  # blocks end w.p. 1/5
    assert ((idx >= 0) & (idx < 50)).all()


def test_the_replications_continue_only_near_the_level():
    rng = np.random.default_rng(4)
    far = sig.excess_p_value(rng.normal(0.0, 0.01, 63), seed=1)  # p ~ 0.5: clear at once
    assert far.replications == bootstrap_t.MIN_REPLICATIONS and not far.bound
    # the level 500 looks demand is ~1e-4: a p-value near it keeps the replications going
    near = sig.excess_p_value(rng.normal(0.0035, 0.01, 126), looks=500, seed=1)
    assert near.replications > bootstrap_t.MIN_REPLICATIONS
    assert bootstrap_t.per_look_level(0.05, 500) == pytest.approx(1 - 0.95 ** (1 / 500))


def test_a_p_value_at_the_resolution_limit_is_a_bound():
    from backtests.verdict import prob_text

    x = np.random.default_rng(1).normal(0.01, 0.005, 60)
    capped = sig.excess_p_value(x, seed=0, min_replications=99, max_replications=99)
    # the analytic tail is far below 1/100: it is the estimate; with a huge t it underflows to a bound
    assert capped.method == bootstrap_t.ANALYTIC
    huge = sig.excess_p_value(np.random.default_rng(1).normal(0.05, 0.001, 60), seed=0, max_replications=99)
    assert huge.bound and huge.p_value == bootstrap_t.SMALLEST_P
    assert prob_text(huge.p_value, huge.bound) == "< 1.0e-16"


def test_a_series_too_short_for_the_block_length_estimate_gets_the_iid_bootstrap():
    assert sig.stationary_block_length([0.01, -0.02, 0.03, 0.0, 0.01]) == 1.0
    assert sig.stationary_block_length(np.random.default_rng(0).normal(size=250)) >= 1.0


def test_sidak_adjusts_for_the_looks():
    assert sig.sidak(0.05, 1) == pytest.approx(0.05)
    assert sig.sidak(0.05, 2) == pytest.approx(1 - 0.95**2)
    assert sig.sidak(0.01, 10) == pytest.approx(1 - 0.99**10)
    assert sig.sidak(1e-12, 500) == pytest.approx(5e-10)  # no rounding to 0
    assert sig.sidak(None, 3) is None


def test_the_looks_hurdle():
    first = sig.looks_hurdle([0.3], 63)
    assert (first.looks, first.variance, first.hurdle, first.note) == (1, None, 0.0, None)
    three = sig.looks_hurdle([0.1, None, 0.3], 63)  # an undefined look still counts in K
    assert three.looks == 3 and three.variance == pytest.approx(np.var([0.1, 0.3], ddof=1))
    assert three.hurdle == pytest.approx(selection.expected_max_sharpe(3, three.variance))
    same = sig.looks_hurdle([0.2, 0.2], 63)  # a rerun that gave the same Sharpe: no spread
    assert same.variance == pytest.approx(1 / 62) and "null variance" in same.note
    assert same.hurdle == pytest.approx(selection.expected_max_sharpe(2, 1 / 62))


def test_the_psr_after_looks_is_the_psr_then_the_dsr_over_the_looks():
    r = np.random.default_rng(3).normal(0.002, 0.01, 63)
    one = sig.psr_after_looks(r, sig.looks_hurdle([sig.sharpe_per_day(r)], 63))
    assert one == pytest.approx(float(selection.probabilistic_sharpe_ratio(r)))
    looks = [0.05, -0.1, sig.sharpe_per_day(r)]
    hurdle = sig.looks_hurdle(looks, 63)
    after = sig.psr_after_looks(r, hurdle)
    assert after == pytest.approx(float(selection.deflated_sharpe_ratio(r, 3, np.var(looks, ddof=1))))
    assert after < one


def test_the_out_of_sample_block():
    rng = np.random.default_rng(5)
    bench = rng.normal(0.0005, 0.01, 63)
    strategy = bench + rng.normal(0.004, 0.004, 63)
    doc = sig.out_of_sample_test(
        strategy,
        {"buy_and_hold": bench, "equal_weight": bench * 0.9},
        strategy="champion",
        benchmark="buy_and_hold",
        earlier_looks=[0.01],
        seed=2,
        min_replications=199,
        market="m",
    )
    assert doc["looks"] == 2 and doc["reason"] is None and doc["market"] == "m" and doc["seed"] == 2
    bh = doc["excess"]["buy_and_hold"]
    assert bh["mean_per_day"] == pytest.approx(np.mean(strategy - bench))
    assert bh["p_value_after_looks"] == pytest.approx(sig.sidak(bh["p_value"], 2))
    assert set(doc["excess"]) == {"buy_and_hold", "equal_weight"}
    assert doc["psr_after_looks"] < doc["psr"]
    cash = sig.out_of_sample_test(
        np.zeros(63), {"buy_and_hold": bench}, strategy="champion", benchmark="buy_and_hold"
    )
    assert "no Sharpe ratio" in cash["reason"] and cash["psr_after_looks"] is None
    alone = sig.out_of_sample_test(strategy, {}, strategy="champion", benchmark=None)
    assert alone["reason"] == "no benchmark to test against"
    assert math.isfinite(alone["psr"])
