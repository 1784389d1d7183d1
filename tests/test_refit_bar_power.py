"""The bars' simulation (benchmarks/refit_bar_power.py) against the Student t it should follow, and its
t against the learner's own."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

from agents.direct import paired_t
from benchmarks import refit_bar_power as bars


def test_its_t_is_the_learners_paired_t() -> None:
    rng = np.random.default_rng(3)
    start, tuned = rng.standard_normal((2, 5, 45))
    expected = paired_t(torch.as_tensor(tuned), torch.as_tensor(start)).numpy()
    np.testing.assert_allclose(bars.paired_t(tuned - start), expected, rtol=1e-10)
    assert bars.paired_t(np.ones((1, 45)))[0] == 0.0  # (a constant difference: no standard error)


def test_the_kept_share_follows_the_noncentral_t_with_and_without_a_gain() -> None:
    rng = np.random.default_rng(0)
    draws, days = 40_000, 45
    for gain, rho in ((0.0, 0.8), (2.0, 0.8), (4.0, 0.95)):
        s = bars.daily_sharpe_of_difference(gain, rho)
        share = bars.kept(rng, days, s, draws, 2.0).mean()
        exact = stats.nct.sf(2.0, days - 1, s * math.sqrt(days)) if s else stats.t.sf(2.0, days - 1)
        assert abs(share - exact) < 4 * math.sqrt(exact * (1 - exact) / draws) + 1e-9, (
            gain,
            rho,
            share,
            exact,
        )


def test_choosing_the_best_pod_on_the_window_that_judges_it_inflates_the_bars_size() -> None:
    rng = np.random.default_rng(1)
    alone = bars.selected_size(rng, 45, 1, 20_000, 2.0)
    assert abs(alone - stats.t.sf(2.0, 44)) < 0.006
    assert bars.selected_size(rng, 45, 16, 20_000, 2.0) > 3 * alone
