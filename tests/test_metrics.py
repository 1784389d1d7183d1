"""backtests.metrics against empyrical-reloaded (the oracle), on random and edge-case inputs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from backtests import metrics as m

empyrical = pytest.importorskip("empyrical")

RNG = np.random.default_rng(7)

CASES_1D = {
    "empty": np.array([], dtype=float),
    "one": np.array([0.01]),
    "two": np.array([0.01, -0.02]),
    "flat_zero": np.zeros(20),
    "flat_positive": np.full(20, 0.001),
    "all_negative": -np.abs(RNG.normal(0.01, 0.005, 30)),
    "all_positive": np.abs(RNG.normal(0.01, 0.005, 30)),
    "random": RNG.normal(0.0005, 0.01, 300),
    "with_nans": np.where(RNG.random(100) < 0.2, np.nan, RNG.normal(0.0, 0.01, 100)),
    "one_value_rest_nan": np.array([np.nan, 0.02, np.nan]),
    "all_nan": np.full(5, np.nan),
    "total_loss": np.array([0.1, -1.0, 0.05]),
    "big_moves": RNG.normal(0.0, 0.2, 50),
}

CASES_2D = {
    "random": RNG.normal(0.0003, 0.01, (250, 5)),
    "with_nans": np.where(RNG.random((80, 4)) < 0.1, np.nan, RNG.normal(0.0, 0.02, (80, 4))),
    "mixed_columns": np.column_stack([np.zeros(40), np.full(40, 0.002), -np.abs(RNG.normal(0.01, 0.01, 40))]),
    "empty": np.zeros((0, 3)),
    "one_row": np.array([[0.01, -0.02, 0.0]]),
}


def _oracle(fn, returns, **kw):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(fn(returns.copy(), **kw), dtype=float)


def _close(ours: torch.Tensor, theirs: np.ndarray) -> None:
    ours_np = ours.detach().cpu().numpy().astype(float)
    theirs = np.broadcast_to(theirs, ours_np.shape)
    np.testing.assert_allclose(ours_np, theirs, rtol=1e-6, atol=1e-9, equal_nan=True)


SIMPLE = [
    ("cum_returns_final", {}),
    ("annual_return", {}),
    ("annual_return", {"period": "weekly"}),
    ("annual_return", {"annualization": 252 * 26}),
    ("annual_volatility", {}),
    ("annual_volatility", {"annualization": 12}),
    ("annual_volatility", {"alpha": 3.0}),
    ("sharpe_ratio", {}),
    ("sharpe_ratio", {"risk_free": 0.0001}),
    ("sharpe_ratio", {"period": "monthly"}),
    ("sharpe_ratio", {"annualization": 1000}),
    ("sortino_ratio", {}),
    ("sortino_ratio", {"required_return": 0.001}),
    ("sortino_ratio", {"annualization": 52}),
    ("downside_risk", {}),
    ("max_drawdown", {}),
    ("calmar_ratio", {}),
    ("calmar_ratio", {"annualization": 52}),
]


@pytest.mark.parametrize("name,kw", SIMPLE, ids=[f"{n}-{'-'.join(map(str, k.values()))}" for n, k in SIMPLE])
@pytest.mark.parametrize("case", list(CASES_1D))
def test_1d_matches_empyrical(name, kw, case):
    returns = CASES_1D[case]
    ours = getattr(m, name)(torch.as_tensor(returns), **kw)
    assert ours.shape == ()
    _close(ours, _oracle(getattr(empyrical, name), returns, **kw))


@pytest.mark.parametrize("name,kw", [s for s in SIMPLE if s[0] != "calmar_ratio"])
@pytest.mark.parametrize("case", list(CASES_2D))
def test_2d_matches_empyrical(name, kw, case):
    returns = CASES_2D[case]
    ours = getattr(m, name)(torch.as_tensor(returns), **kw)
    assert ours.shape == (returns.shape[1],)
    _close(ours, _oracle(getattr(empyrical, name), returns, **kw))


@pytest.mark.parametrize("case", list(CASES_2D))
def test_2d_calmar_matches_empyrical_per_column(case):
    # empyrical's calmar_ratio is 1-D only: compare column by column.
    returns = CASES_2D[case]
    ours = m.calmar_ratio(torch.as_tensor(returns))
    expected = np.array([_oracle(empyrical.calmar_ratio, returns[:, j]) for j in range(returns.shape[1])])
    _close(ours, expected)


def test_float32_input_is_computed_in_float64():
    returns = CASES_1D["random"]
    ours = m.sharpe_ratio(torch.as_tensor(returns, dtype=torch.float32))
    assert ours.dtype == torch.float64
    expected = _oracle(empyrical.sharpe_ratio, returns.astype(np.float32).astype(float))
    _close(ours, expected)


def test_accepts_numpy_and_lists():
    returns = [0.01, -0.02, 0.03]
    assert math.isclose(float(m.cum_returns_final(returns)), 1.01 * 0.98 * 1.03 - 1, rel_tol=1e-12)
    _close(m.sharpe_ratio(np.array(returns)), _oracle(empyrical.sharpe_ratio, np.array(returns)))


def test_cum_returns_and_drawdown_series_match():
    returns = CASES_2D["with_nans"]
    _close(m.cum_returns(torch.as_tensor(returns)), _oracle(empyrical.cum_returns, returns))
    _close(m.drawdown_series(torch.as_tensor(returns)), _oracle(empyrical.stats.drawdown_series, returns))


def test_sharpe_is_scale_invariant_and_sign_flips():
    returns = torch.as_tensor(CASES_1D["random"])
    base = float(m.sharpe_ratio(returns))
    assert math.isclose(float(m.sharpe_ratio(returns * 3.0)), base, rel_tol=1e-12)
    assert math.isclose(float(m.sharpe_ratio(-returns)), -base, rel_tol=1e-12)


def test_bad_period_and_shape_raise():
    with pytest.raises(ValueError, match="period"):
        m.sharpe_ratio([0.01, 0.02], period="hourly")
    with pytest.raises(ValueError, match=r"\(T,\)"):
        m.sharpe_ratio(torch.zeros(2, 2, 2))


def test_hit_rate_turnover_costs_exposure():
    r = torch.tensor([[0.01, 0.0], [-0.02, 0.0], [0.03, 0.0], [0.0, 0.0]], dtype=torch.float64)
    hr = m.hit_rate(r)
    assert math.isclose(float(hr[0]), 2 / 3)
    assert math.isnan(float(hr[1]))  # never active: no hits, no misses
    step_turnover = torch.tensor([[1.0, 0.0], [0.5, 0.0], [0.5, 0.0]])
    assert m.turnover(step_turnover, 2).tolist() == [1.0, 0.0]
    assert m.costs_paid(torch.tensor([[2.0], [3.0]]), 1000.0).tolist() == [0.005]
    weights = torch.tensor([[[0.5, 0.5], [0.0, 0.0]], [[0.25, 0.25], [0.0, 0.0]]])
    assert m.exposure(weights).tolist() == [0.75, 0.0]
    assert math.isnan(float(m.turnover(torch.zeros(0), 0)))


def test_aggregate_by_day_compounds_within_days():
    r = torch.tensor([[0.01, 0.0], [0.02, -0.5], [-0.01, 0.1], [0.03, 0.0]], dtype=torch.float64)
    days = torch.tensor([5, 5, 7, 7])
    daily = m.aggregate_by_day(r, days)
    expected = torch.tensor([[1.01 * 1.02 - 1, -0.5], [0.99 * 1.03 - 1, 0.1]], dtype=torch.float64)
    torch.testing.assert_close(daily, expected, rtol=1e-12, atol=1e-15)
    # Compounding is preserved: total return over days equals total over steps.
    torch.testing.assert_close(m.cum_returns_final(daily), m.cum_returns_final(r), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="non-decreasing"):
        m.aggregate_by_day(r, torch.tensor([2, 1, 1, 1]))


def test_summary_keys_and_shapes():
    r = torch.as_tensor(CASES_2D["random"])
    out = m.summary(
        r,
        step_turnover=torch.zeros(10, 5),
        step_costs=torch.zeros(10, 5),
        initial_value=1.0,
        weights=torch.zeros(10, 5, 3),
    )
    assert tuple(out) == m.SUMMARY_METRICS
    assert all(v.shape == (5,) for v in out.values())
    _close(out["sortino_ratio"], _oracle(empyrical.sortino_ratio, CASES_2D["random"]))
    assert m.to_floats(torch.tensor([1.0, math.nan, math.inf])) == [1.0, None, None]


@settings(max_examples=40, deadline=None)
@given(
    data=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=30),
        elements=st.one_of(st.floats(-0.5, 0.5), st.just(np.nan)),
    )
)
def test_random_panels_match_empyrical(data):
    returns = torch.as_tensor(data)
    for name in (
        "cum_returns_final",
        "annual_return",
        "annual_volatility",
        "sharpe_ratio",
        "sortino_ratio",
        "max_drawdown",
    ):
        _close(getattr(m, name)(returns), _oracle(getattr(empyrical, name), data))


def test_beta_alpha_and_information_ratio_match_empyrical():
    import empyrical as ep

    rng = np.random.default_rng(11)
    bench = rng.normal(0.0005, 0.01, 126)
    returns = np.column_stack([0.5 * bench + rng.normal(0.001, 0.005, 126), 1.8 * bench, bench])
    got_beta = m.beta(returns, bench).numpy()
    got_alpha = m.alpha(returns, bench).numpy()
    got_ir = m.information_ratio(returns, bench).numpy()
    for j in range(2):
        assert got_beta[j] == pytest.approx(ep.beta(returns[:, j], bench), rel=1e-9)
        assert got_alpha[j] == pytest.approx(ep.alpha(returns[:, j], bench), rel=1e-6)
        assert got_ir[j] == pytest.approx(ep.excess_sharpe(returns[:, j], bench) * np.sqrt(252), rel=1e-6)
    # A pure 1.8x tilt of the benchmark: beta 1.8, no alpha; the benchmark itself: no information ratio.
    assert got_beta[1] == pytest.approx(1.8) and got_alpha[1] == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(got_ir[2])
