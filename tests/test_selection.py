"""backtests.selection: PSR/DSR worked examples, oracles and the deflation property."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from backtests import selection as sel


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def test_worked_example_bailey_lopez_de_prado_2014():
    # The paper's numerical example: annualized SR 2.5 over 5 years of daily returns (T = 1250,
    # 250 days a year), 100 trials whose annualized Sharpe ratios have variance 0.5, skew -3,
    # kurtosis 10. The paper reports E[max SR] ~ 0.1132 per day and DSR ~ 0.9004.
    sr = 2.5 / math.sqrt(250)
    variance = sel.trial_sharpe_variance([], 250)  # fewer than two trials -> unknown
    assert variance is None
    sr0 = sel.expected_max_sharpe(100, 0.5 / 250)
    # By hand: Phi^-1(0.99) = 2.326348, Phi^-1(1 - 1/(100 e)) = 2.680210 (tables).
    by_hand_sr0 = math.sqrt(0.002) * ((1 - 0.5772156649) * 2.326348 + 0.5772156649 * 2.680210)
    assert sr0 == pytest.approx(by_hand_sr0, abs=1e-6)
    assert sr0 == pytest.approx(0.1132, abs=1e-4)
    dsr = float(sel.psr_from_stats(sr, 1250, skew=-3.0, kurtosis=10.0, sharpe_benchmark=sr0))
    by_hand = _phi((sr - by_hand_sr0) * math.sqrt(1249) / math.sqrt(1 + 3 * sr + 9 / 4 * sr**2))
    assert dsr == pytest.approx(by_hand, abs=1e-6)
    assert dsr == pytest.approx(0.9004, abs=1e-4)


def test_psr_normal_case_by_hand():
    # Skew 0, kurtosis 3: PSR = Phi(SR sqrt(T-1) / sqrt(1 + SR^2 / 2)).
    sr, n = 0.1, 101
    expected = _phi(0.1 * 10 / math.sqrt(1 + 0.005))
    assert float(sel.psr_from_stats(sr, n)) == pytest.approx(expected, abs=1e-12)
    assert float(sel.psr_from_stats(0.0, n)) == pytest.approx(0.5, abs=1e-12)
    assert math.isnan(float(sel.psr_from_stats(0.1, 1)))


def test_return_moments_match_scipy():
    from scipy import stats  # a dependency of the product (backtests.snooping)

    rng = np.random.default_rng(3)
    r = rng.standard_t(4, size=(500, 3)) * 0.01 + 0.0005
    sharpe, skew, kurt, n = sel.return_moments(torch.as_tensor(r))
    np.testing.assert_allclose(sharpe.numpy(), r.mean(0) / r.std(0, ddof=1), rtol=1e-10)
    np.testing.assert_allclose(skew.numpy(), stats.skew(r, axis=0), rtol=1e-10)
    np.testing.assert_allclose(kurt.numpy(), stats.kurtosis(r, axis=0, fisher=True) + 3, rtol=1e-10)
    assert n.tolist() == [500, 500, 500]
    psr = sel.probabilistic_sharpe_ratio(torch.as_tensor(r))
    expected = [float(sel.psr_from_stats(sharpe[j], 500, skew[j], kurt[j])) for j in range(3)]
    np.testing.assert_allclose(psr.numpy(), expected, rtol=1e-12)


def test_single_trial_is_not_deflated():
    rng = np.random.default_rng(1)
    r = torch.as_tensor(rng.normal(0.001, 0.01, 200))
    assert sel.expected_max_sharpe(1, 0.5) == 0.0
    assert float(sel.deflated_sharpe_ratio(r, 1)) == pytest.approx(float(sel.probabilistic_sharpe_ratio(r)))


def test_trial_sharpe_variance_converts_annualized_units():
    values = [1.0, 2.0, 3.0]
    assert sel.trial_sharpe_variance(values, 252) == pytest.approx(1.0 / 252)
    assert sel.trial_sharpe_variance([1.0, float("nan"), 3.0]) == pytest.approx(2.0)


def test_trial_sharpe_variance_skips_trials_with_no_sharpe():
    # An all-cash pod has no Sharpe ratio (None in metrics, NaN in tensors): it is left out, not a 0.
    assert sel.trial_sharpe_variance([1.0, None, 3.0, float("nan")]) == pytest.approx(2.0)
    assert sel.trial_sharpe_variance([1.0, 3.0, 0.0]) == pytest.approx(7.0 / 3.0)  # a real 0 counts
    assert sel.trial_sharpe_variance([1.0, float("inf"), 3.0, float("-inf")]) == pytest.approx(2.0)
    assert sel.trial_sharpe_variance([None, None, 2.0]) is None
    assert sel.trial_sharpe_variance([None, float("nan")]) is None
    assert sel.trial_sharpe_variance(np.array([1.0, np.nan, 3.0]), 4) == pytest.approx(0.5)
    for bad in (0.0, -252.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="annualization"):
            sel.trial_sharpe_variance([1.0, 2.0], bad)


def test_trial_sharpe_variance_is_in_the_periodicity_of_the_tested_sharpe():
    # The trials' Sharpe ratios as podracer records them (backtests.metrics.sharpe_ratio of daily
    # returns, annualized with 252) give, once converted, the variance of the per-day Sharpe ratios that
    # deflated_sharpe_ratio tests.
    from backtests import metrics

    rng = np.random.default_rng(7)
    daily = torch.as_tensor(rng.normal(rng.normal(0.0, 0.002, 9), 0.01, (120, 9)))
    annualized = metrics.sharpe_ratio(daily, annualization=252).tolist()
    per_day, _, _, _ = sel.return_moments(daily)
    expected = float(np.var(per_day.numpy(), ddof=1))
    assert sel.trial_sharpe_variance(annualized, 252) == pytest.approx(expected, rel=1e-12)
    dsr = sel.deflated_sharpe_ratio(daily[:, 0], 9, sel.trial_sharpe_variance(annualized, 252))
    sharpe, skew, kurt, n = sel.return_moments(daily[:, 0])
    by_hand = sel.psr_from_stats(sharpe, n, skew, kurt, sel.expected_max_sharpe(9, expected))
    assert float(dsr) == pytest.approx(float(by_hand), rel=1e-12)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="num_trials"):
        sel.expected_max_sharpe(0, 0.1)
    with pytest.raises(ValueError, match="sharpe_variance"):
        sel.expected_max_sharpe(3, -1.0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mean=st.floats(0.0, 0.003),
    variance=st.floats(1e-5, 1e-2),
    trials=st.lists(st.integers(1, 10_000), min_size=2, max_size=6, unique=True),
)
def test_dsr_falls_as_trials_grow(seed, mean, variance, trials):
    rng = np.random.default_rng(seed)
    r = torch.as_tensor(rng.normal(mean, 0.01, 250))
    trials = sorted(trials)
    sr0 = [sel.expected_max_sharpe(n, variance) for n in trials]
    dsr = [float(sel.deflated_sharpe_ratio(r, n, variance)) for n in trials]
    assert all(a < b for a, b in zip(sr0, sr0[1:], strict=False))  # the hurdle rises strictly
    assert all(a >= b for a, b in zip(dsr, dsr[1:], strict=False))  # so the DSR never rises
    assert dsr[0] > dsr[-1] or dsr[-1] < 1e-12 or dsr[0] > 1 - 1e-12  # and falls unless saturated
