"""Data snooping on the validation window (``backtests.snooping``) against known answers: the effective
number of trials of identical, independent and grouped return series, flat trials left out, the
validation DSR's hurdle, and Hansen's SPA on a planted winner and on noise."""

from __future__ import annotations

import numpy as np
import pytest

from backtests import selection
from backtests import snooping as sn


def test_identical_series_are_one_effective_trial():
    x = np.random.default_rng(0).normal(0.0, 0.01, (45, 1))
    clusters = sn.cluster_trials(np.repeat(x, 12, axis=1))
    assert clusters.num_clusters == 1 and clusters.flat == () and len(clusters.kept) == 12
    np.testing.assert_allclose(clusters.representatives[:, 0], x[:, 0])


def test_independent_series_are_as_many_trials_and_groups_are_one_each():
    rng = np.random.default_rng(1)
    independent = rng.normal(0.0, 0.01, (250, 6))
    assert sn.cluster_trials(independent).num_clusters == 6
    # Three strategies, each copied four times with a little noise (children of one parent): rho ~0.9.
    parents = rng.normal(0.0, 0.01, (250, 3))
    children = np.repeat(parents, 4, axis=1) + rng.normal(0.0, 0.003, (250, 12))
    clusters = sn.cluster_trials(children)
    assert clusters.num_clusters == 3
    assert len({tuple(clusters.labels[i : i + 4]) for i in range(0, 12, 4)}) == 3  # one label per group


def test_flat_trials_are_left_out_and_counted():
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.normal(0, 0.01, 30), np.zeros(30), rng.normal(0, 0.01, 30), np.full(30, np.nan)])
    clusters = sn.cluster_trials(x)
    assert clusters.kept == (0, 2) and clusters.flat == (1, 3)
    assert sn.cluster_trials(np.zeros((30, 3))).num_clusters == 0


def test_the_validation_dsr_hurdle_comes_from_the_cluster_representatives():
    rng = np.random.default_rng(3)
    parents = rng.normal(0.0005, 0.01, (45, 4))
    trials = np.repeat(parents, 3, axis=1) + rng.normal(0.0, 0.002, (45, 12))
    champion = trials[:, 0]
    clusters = sn.cluster_trials(trials)
    assert clusters.num_clusters == 4
    result = sn.validation_dsr(champion, clusters)
    reps = [r.mean() / r.std(ddof=1) for r in clusters.representatives.T]
    assert result.variance == pytest.approx(np.var(reps, ddof=1))
    assert result.hurdle == pytest.approx(selection.expected_max_sharpe(4, result.variance))
    expected = selection.probabilistic_sharpe_ratio(champion, result.hurdle)
    assert result.dsr == pytest.approx(float(expected))
    # One cluster: no hurdle, the PSR against zero.
    one = sn.validation_dsr(champion, sn.cluster_trials(np.repeat(champion[:, None], 5, axis=1)))
    assert one.hurdle == 0.0 and one.dsr == pytest.approx(
        float(selection.probabilistic_sharpe_ratio(champion))
    )
    assert sn.validation_dsr(np.zeros(45), clusters).dsr is None


def test_spa_is_small_for_a_planted_winner_and_large_for_noise():
    rng = np.random.default_rng(4)
    bench = rng.normal(0.0005, 0.01, 120)
    noise = bench[:, None] + rng.normal(0.0, 0.005, (120, 20))  # 20 pods no better than the benchmark
    p_noise, block = sn.spa_test(noise, bench, replications=300, seed=0)
    assert p_noise > 0.2 and block >= 1
    planted = noise.copy()
    planted[:, 7] += 0.004  # one pod earns +0.4%/day over the benchmark
    p_planted, _ = sn.spa_test(planted, bench, replications=300, seed=0)
    assert p_planted < 0.01
    assert sn.spa_test(noise[:3], bench[:3]) == (None, None)  # too few rows


def test_the_selection_block():
    rng = np.random.default_rng(5)
    bench = rng.normal(0.0005, 0.01, 45)
    trials = np.column_stack([bench + rng.normal(0.002, 0.004, 45), np.zeros(45), bench * 0.5])
    inputs = sn.SelectionInputs(returns=trials, ids=("a", "b", "c"), champion=0, benchmark=bench)
    doc = sn.selection_diagnostics(inputs, seed=1)
    assert doc["num_trials"] == 3 and doc["trials_flat"] == 1 and doc["reason"] is None
    assert doc["effective_trials"] in (1, 2) and doc["spa_benchmark"] == "buy_and_hold"
    assert 0.0 <= doc["spa_p_value"] <= 1.0 and 0.0 <= doc["valid_dsr"] <= 1.0
    assert doc["spa_p_value_kind"] == "consistent" and doc["cluster_distance"] == sn.CLUSTER_DISTANCE
    assert sn.selection_diagnostics(None)["reason"].startswith("no validation returns")
    unknown = sn.selection_diagnostics(sn.SelectionInputs(returns=trials))
    assert (
        unknown["valid_dsr"] is None and "not among" in unknown["reason"] and unknown["spa_p_value"] is None
    )
