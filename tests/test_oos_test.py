"""The out-of-sample test (``backtests.oos_test``) against known answers: the bootstrap p-value of
pure-noise excess returns is uniform, an obvious edge gets the smallest p-value the replications
allow, the p-value is the documented formula, and the looks deflate both tests as documented."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from backtests import oos_test as sig
from backtests import selection


def test_pure_noise_excess_gives_uniform_p_values():
    # 200 markets with no edge: the one-sided p-values spread evenly over (0, 1), so the test rejects
    # at 5% about 5% of the time. 199 replications each keeps this under a couple of seconds.
    p_values = [
        sig.bootstrap_p_value(
            np.random.default_rng(seed).normal(0.0, 0.01, 120), replications=199, seed=seed
        )[0]
        for seed in range(200)
    ]
    assert stats.kstest(p_values, "uniform").pvalue > 0.01
    rejected = np.mean(np.asarray(p_values) <= 0.05)
    assert 0.01 <= rejected <= 0.10
    assert 0.4 <= np.median(p_values) <= 0.6


def test_an_obvious_edge_gets_the_smallest_p_value():
    excess = np.random.default_rng(1).normal(0.01, 0.005, 60)  # +1%/day, t-stat ~ 15
    p, block = sig.bootstrap_p_value(excess, replications=999, seed=0)
    assert p == pytest.approx(1 / 1000) and block >= 1.0
    # and the opposite edge the largest
    assert sig.bootstrap_p_value(-excess, replications=999, seed=0)[0] == pytest.approx(1.0)


def test_the_p_value_is_the_documented_formula():
    from arch.bootstrap import StationaryBootstrap

    x = np.random.default_rng(7).normal(0.001, 0.01, 40)
    p, block = sig.bootstrap_p_value(x, replications=500, seed=11)
    means = StationaryBootstrap(block, x, seed=11).apply(np.mean, 500)[:, 0]
    count = np.count_nonzero(means - x.mean() >= x.mean())
    assert p == pytest.approx((1 + count) / 501)
    assert sig.bootstrap_p_value(x, replications=500, seed=11) == (p, block)  # seeded: reproducible
    assert sig.bootstrap_p_value(np.full(30, 0.001)) == (None, None)  # no dispersion: no test
    assert sig.bootstrap_p_value([0.01]) == (None, None)


def test_a_series_too_short_for_the_block_length_estimate_gets_the_iid_bootstrap():
    assert sig.stationary_block_length([0.01, -0.02, 0.03, 0.0, 0.01]) == 1.0
    assert sig.stationary_block_length(np.random.default_rng(0).normal(size=250)) >= 1.0


def test_sidak_adjusts_for_the_looks():
    assert sig.sidak(0.05, 1) == pytest.approx(0.05)
    assert sig.sidak(0.05, 2) == pytest.approx(1 - 0.95**2)
    assert sig.sidak(0.01, 10) == pytest.approx(1 - 0.99**10)
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
        replications=199,
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
