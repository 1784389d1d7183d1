"""backtests.selection.probability_of_backtest_overfitting: hand-computed cases, a slow obviously-correct
reference on random inputs, and the noise / true-edge properties of CSCV."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from backtests import selection as sel

LN2 = math.log(2.0)


# --- a slow, obviously-correct reference ---------------------------------------------------------------
def _ref_sharpe(values: np.ndarray) -> float:
    v = [float(e) for e in values if not math.isnan(e)]
    if len(v) < 2:
        return math.nan
    mean = sum(v) / len(v)
    if all(e == v[0] for e in v):  # no dispersion: +-inf by the mean's sign, 0/0 undefined
        return math.nan if mean == 0 else math.copysign(math.inf, mean)
    return mean / math.sqrt(sum((e - mean) ** 2 for e in v) / (len(v) - 1))


def _reference_pbo(returns: np.ndarray, num_splits: int) -> tuple[float | None, list[float], list[int]]:
    rows, cols = returns.shape
    splits = num_splits
    while splits >= 2 and rows // splits < 2:
        splits -= 2
    block = rows // splits
    x = returns[rows - splits * block :]
    keep = [j for j in range(cols) if not math.isnan(_ref_sharpe(x[:, j]))]
    if len(keep) < 2:
        return None, [], keep
    blocks = [x[b * block : (b + 1) * block] for b in range(splits)]
    logits = []
    for combo in itertools.combinations(range(splits), splits // 2):
        ins = np.concatenate([blocks[b] for b in combo])
        oos = np.concatenate([blocks[b] for b in range(splits) if b not in combo])
        in_sr = [_ref_sharpe(ins[:, j]) for j in keep]
        out_sr = [_ref_sharpe(oos[:, j]) for j in keep]
        in_sr = [-math.inf if math.isnan(v) else v for v in in_sr]
        out_sr = [-math.inf if math.isnan(v) else v for v in out_sr]
        best = in_sr.index(max(in_sr))
        less = sum(1 for v in out_sr if v < out_sr[best])
        equal = sum(1 for v in out_sr if v == out_sr[best])
        rank = less + (equal + 1) / 2
        w = rank / (len(keep) + 1)
        logits.append(math.log(w / (1 - w)))
    return sum(1 for v in logits if v <= 0) / len(logits), logits, keep


# --- hand-computed cases -------------------------------------------------------------------------------
def test_hand_computed_two_blocks_three_trials_ties_and_the_median():
    # T = 4, S = 2: blocks of two rows; C(2, 1) = 2 combinations. The Sharpe of a pair (a, b) is
    # ((a + b) / 2) / (|a - b| / sqrt 2): (1, 3) -> sqrt 2, (0, 2) -> 1/sqrt 2, (-1, 1) -> 0.
    #   X = 1, 3 | 0, 2     Y = 0, 2 | 1, 3     Z = -1, 1 | 0, 2
    # IS = block 0: X 1.41, Y 0.71, Z 0 -> n* = X. OOS = block 1: X 0.71, Y 1.41, Z 0.71: X ties with Z
    #   for ranks 1 and 2 -> 1.5; w = 1.5 / 4 = 0.375; logit = ln(0.375 / 0.625) = ln 0.6 < 0.
    # IS = block 1: X 0.71, Y 1.41, Z 0.71 -> n* = Y. OOS = block 0: X 1.41, Y 0.71, Z 0 -> Y rank 2;
    #   w = 2 / 4 = 0.5; logit = 0, the median: counted as overfit (logit <= 0).
    # PBO = 2 / 2 = 1.
    returns = np.array([[1, 0, -1], [3, 2, 1], [0, 1, 0], [2, 3, 2]], dtype=float)
    res = sel.probability_of_backtest_overfitting(returns, num_splits=2)
    assert res.logits.tolist() == [math.log(0.6), 0.0]
    assert res.pbo == 1.0
    assert (res.num_combinations, res.num_trials, res.num_splits, res.num_rows) == (2, 3, 2, 4)
    assert res.excluded == ()


def test_hand_computed_four_blocks_two_trials():
    # T = 8, S = 4: blocks of two rows, C(4, 2) = 6 combinations. With N = 2 the IS-best ranks 2 or 1
    # out of sample: w = 2/3 or 1/3, logit = +ln 2 or -ln 2.
    # A's blocks: G G D D with G = (3, 5), D = (-1, 1); B is (1, 3) in every block.
    # Halves (4 rows): B: mean 2, std sqrt(4/3) -> sqrt 3 = 1.73 for any half.
    #   A on GG: mean 4, std sqrt(4/3) -> 3.46; on GD: mean 2, deviations 1 3 -3 -1, std sqrt(20/3)
    #   -> 0.77; on DD: mean 0 -> 0.
    # IS {0,1} (GG): n* = A; OOS {2,3} (DD): A 0 < B -> rank 1, logit -ln 2.
    # IS {0,2} {0,3} {1,2} {1,3} (GD): n* = B; OOS GD again: B > A -> rank 2, logit +ln 2.
    # IS {2,3} (DD): n* = B; OOS {0,1} (GG): A 3.46 > B -> B rank 1, logit -ln 2.
    # PBO = 2 / 6.
    good, bad = [3.0, 5.0], [-1.0, 1.0]
    a = np.array(good + good + bad + bad)
    b = np.array([1.0, 3.0] * 4)
    res = sel.probability_of_backtest_overfitting(np.c_[a, b], num_splits=4)
    np.testing.assert_allclose(res.logits, [-LN2, LN2, LN2, LN2, LN2, -LN2], rtol=0, atol=1e-15)
    assert res.pbo == pytest.approx(2 / 6, abs=1e-15)
    assert (res.num_combinations, res.num_trials, res.num_splits) == (6, 2, 4)


def test_hand_computed_undefined_out_of_sample_sharpe_ranks_last():
    # A = 1, 3 | 0, 0 (in cash in block 1: no Sharpe there), B = 0, 2 | 1, 3.
    # IS block 0: A sqrt 2 > B 1/sqrt 2 -> n* = A; OOS block 1: A undefined -> last: rank 1, logit -ln 2.
    # IS block 1: A undefined, B sqrt 2 -> n* = B; OOS block 0: A sqrt 2 > B -> rank 1, logit -ln 2.
    returns = np.array([[1, 0], [3, 2], [0, 1], [0, 3]], dtype=float)
    res = sel.probability_of_backtest_overfitting(returns, num_splits=2)
    np.testing.assert_allclose(res.logits, [-LN2, -LN2], rtol=0, atol=1e-15)
    assert res.pbo == 1.0
    assert res.excluded == ()


# --- against the reference -----------------------------------------------------------------------------
def _random_case(seed: int) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(4, 41))
    cols = int(rng.integers(1, 7))
    splits = int(rng.choice([2, 4, 6, 8]))
    x = rng.normal(rng.normal(0, 0.003, cols), 0.01, size=(rows, cols))
    kind = seed % 5
    if kind == 1:
        x[rng.random(x.shape) < 0.15] = np.nan  # missing periods are skipped
    elif kind == 2:
        x[:, 0] = 0.0  # an all-cash trial: excluded
    elif kind == 3:
        x[: rows // 2, -1] = 0.0  # in cash for the first half: flat halves have no Sharpe
    elif kind == 4:
        x[:, -1] = np.nan  # a trial with no returns at all
    return x, splits


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_reference_on_random_inputs(seed):
    x, splits = _random_case(seed)
    pbo, logits, keep = _reference_pbo(x, splits)
    res = sel.probability_of_backtest_overfitting(x, num_splits=splits)
    assert res.num_trials == len(keep)
    assert res.excluded == tuple(j for j in range(x.shape[1]) if j not in keep)
    if pbo is None:
        assert res.pbo is None
        assert res.logits.shape == (0,)
        return
    assert res.pbo == pytest.approx(pbo, abs=1e-12)
    np.testing.assert_allclose(res.logits, logits, rtol=0, atol=1e-12)
    assert res.num_combinations == len(logits) == math.comb(res.num_splits, res.num_splits // 2)


def test_torch_input_and_default_sixteen_splits():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 0.01, size=(70, 4))
    pbo, logits, _ = _reference_pbo(x, 16)
    res = sel.probability_of_backtest_overfitting(torch.as_tensor(x, dtype=torch.float64))
    assert res.num_splits == 16 and res.num_combinations == 12_870 and res.num_rows == 64
    assert res.pbo == pytest.approx(pbo, abs=1e-12)
    np.testing.assert_allclose(res.logits, logits, rtol=0, atol=1e-12)


# --- properties ----------------------------------------------------------------------------------------
def test_pure_noise_pool_gives_pbo_near_one_half():
    # 50 skill-less trials: the IS-best is a random pick out of sample, so its OOS rank is uniform.
    values = []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        values.append(sel.probability_of_backtest_overfitting(rng.normal(0, 0.01, (250, 50))).pbo)
    assert 0.3 <= float(np.mean(values)) <= 0.7
    assert all(0.0 < v < 1.0 for v in values)


def test_one_truly_better_trial_gives_pbo_near_zero():
    for seed in range(4):
        rng = np.random.default_rng(seed)
        x = rng.normal(0, 0.01, (250, 50))
        x[:, 17] += 0.004  # per-period Sharpe 0.4: selected in sample and best out of sample
        res = sel.probability_of_backtest_overfitting(x)
        assert res.pbo < 0.1
        assert np.median(res.logits) > 0


def test_invariant_to_scaling_all_returns():
    rng = np.random.default_rng(11)
    x = rng.normal(0.0002, 0.01, (200, 12))
    base = sel.probability_of_backtest_overfitting(x, num_splits=8)
    doubled = sel.probability_of_backtest_overfitting(2.0 * x, num_splits=8)  # exact in binary
    assert doubled.pbo == base.pbo
    np.testing.assert_array_equal(doubled.logits, base.logits)
    scaled = sel.probability_of_backtest_overfitting(x * 37.3, num_splits=8)
    assert scaled.pbo == base.pbo
    np.testing.assert_allclose(scaled.logits, base.logits, rtol=0, atol=1e-12)


def test_nan_and_all_cash_trials_are_excluded_not_ranked():
    rng = np.random.default_rng(2)
    x = rng.normal(0, 0.01, (120, 6))
    base = sel.probability_of_backtest_overfitting(x, num_splits=8)
    padded = np.c_[x[:, :2], np.full(120, np.nan), x[:, 2:4], np.zeros(120), x[:, 4:]]
    res = sel.probability_of_backtest_overfitting(padded, num_splits=8)
    assert res.excluded == (2, 5)
    assert res.num_trials == 6
    assert res.pbo == base.pbo
    np.testing.assert_array_equal(res.logits, base.logits)


def test_fewer_than_two_valid_trials_has_no_pbo():
    rng = np.random.default_rng(0)
    one = sel.probability_of_backtest_overfitting(rng.normal(0, 0.01, (40, 1)), num_splits=4)
    assert one.pbo is None and one.num_trials == 1 and one.logits.shape == (0,)
    assert one.num_combinations == 0
    x = np.c_[rng.normal(0, 0.01, 40), np.zeros(40), np.full(40, np.nan)]
    res = sel.probability_of_backtest_overfitting(x, num_splits=4)
    assert res.pbo is None and res.num_trials == 1 and res.excluded == (1, 2)
    doc = res.to_dict()
    assert json.loads(json.dumps(doc))["pbo"] is None
    assert doc["logits"] == [] and doc["num_trials"] == 1


def test_remainder_rows_are_dropped_at_the_start():
    rng = np.random.default_rng(4)
    x = rng.normal(0, 0.01, (35, 5))  # S = 8 -> blocks of 4 rows, the 3 oldest rows dropped
    res = sel.probability_of_backtest_overfitting(x, num_splits=8)
    assert res.num_rows == 32
    y = x.copy()
    y[:3] = rng.normal(5.0, 3.0, (3, 5))  # anything in the dropped rows changes nothing
    np.testing.assert_array_equal(sel.probability_of_backtest_overfitting(y, num_splits=8).logits, res.logits)
    np.testing.assert_array_equal(
        sel.probability_of_backtest_overfitting(x[3:], num_splits=8).logits, res.logits
    )


def test_too_many_splits_for_the_rows_are_reduced():
    assert sel.cscv_splits(500, 16) == 16
    assert sel.cscv_splits(10, 16) == 4  # 10 rows: at most 5 blocks of 2 -> the even 4
    assert sel.cscv_splits(31, 16) == 14
    assert sel.cscv_splits(3, 16) == 0
    rng = np.random.default_rng(6)
    res = sel.probability_of_backtest_overfitting(rng.normal(0, 0.01, (10, 3)), num_splits=16)
    assert (res.num_splits, res.num_rows, res.num_combinations) == (4, 8, 6)


@pytest.mark.parametrize(
    ("returns", "splits", "match"),
    [
        (np.zeros((20, 3)), 3, "even integer"),
        (np.zeros((20, 3)), 0, "even integer"),
        (np.zeros((20, 3)), 4.0, "even integer"),
        (np.zeros((20, 3)), True, "even integer"),
        (np.zeros(20), 4, r"\(T, N\)"),
        (np.zeros((20, 3, 2)), 4, "returns must be"),
        (np.array([[0.1, 0.2], [np.inf, 0.0], [0.1, 0.3], [0.2, 0.1]]), 2, "finite"),
        (np.ones((3, 4)), 2, "at least 4 rows"),
    ],
)
def test_bad_inputs_raise(returns, splits, match):
    with pytest.raises(ValueError, match=match):
        sel.probability_of_backtest_overfitting(returns, num_splits=splits)
