"""The synthetic market's planted shapes stated as a daily rank IC: the calibration plants the IC it is
asked for, the null plants nothing, the nonlinear shape hides from every linear reading of the
features, and every shape reads only the sessions before the one it pays in."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from app.config_sections import DataConfig
from data.errors import DataError
from data.features import FEATURE_NAMES, compute_features, lookback
from data.planted import (
    DAILY_CROSS_SECTION,
    LAST_BARS,
    MINUTE_MOMENTUM,
    NONLINEAR,
    SHAPES,
    daily_drift,
    daily_predictor,
    session_bounds,
)
from data.planted_calibration import MAX_TARGET_IC, TABLE, strength_for_ic
from data.planted_ic import (
    daily_ic_series,
    panel_session_returns,
    rank_ic,
    realized_daily_ic,
    spec_session_returns,
)
from data.synthetic import SyntheticSpec, _draws, _planted_momentum, generate, planted_predictor

#: The size the calibration is stated for: 100 names, about a year of sessions.
BIG = {"num_tickers": 100, "num_sessions": 250}


def test_rank_ic_is_spearmans_correlation_row_by_row():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, (5, 30)).astype(float)  # ties on purpose
    y = x + rng.normal(0, 3, (5, 30))
    expected = [spearmanr(a, b).statistic for a, b in zip(x, y, strict=True)]
    assert rank_ic(x, y) == pytest.approx(expected, abs=1e-12)
    assert np.isnan(rank_ic(np.ones((1, 4)), np.arange(4.0)[None])).all()  # no spread, no IC


@pytest.mark.parametrize("shape", SHAPES)
def test_the_spec_path_reads_the_returns_the_bars_have(shape):
    """Without building the bars, the same session returns and the same IC as the generated panel."""
    spec = SyntheticSpec(num_tickers=6, num_sessions=8, seed=4, shape=shape, signal=0.3)
    panel = generate(spec)
    assert spec_session_returns(spec)[1:] == pytest.approx(panel_session_returns(panel)[1:], abs=1e-10)
    predictor = planted_predictor(spec)
    assert realized_daily_ic(spec) == pytest.approx(realized_daily_ic(panel, predictor), abs=1e-12)


def test_a_predictor_that_knows_the_next_session_has_ic_one():
    spec = SyntheticSpec(num_tickers=7, num_sessions=5, seed=2)
    panel = generate(spec)
    starts, counts = session_bounds(panel.grid.session_id)
    oracle = np.zeros_like(panel.close)
    oracle[(starts + counts - 1)[:-1]] = panel_session_returns(panel)[1:]  # lookahead, on purpose
    assert daily_ic_series(panel, oracle) == pytest.approx(np.ones(4))


def test_minute_momentum_is_the_default_and_a_target_ic_only_sets_its_signal():
    assert SyntheticSpec().shape == MINUTE_MOMENTUM and SyntheticSpec().strength == 1.0
    spec = SyntheticSpec(num_tickers=3, num_sessions=2, target_ic=0.05)
    same = SyntheticSpec(num_tickers=3, num_sessions=2, signal=spec.strength)
    assert np.array_equal(generate(spec).close, generate(same).close)


def test_the_calibration_is_a_rising_map_through_zero():
    assert set(TABLE) == set(SHAPES)
    assert set(DataConfig.model_fields["shape"].annotation.__args__) == set(SHAPES)
    bounds = [m.le for m in DataConfig.model_fields["target_ic"].metadata if hasattr(m, "le")]
    assert bounds == [MAX_TARGET_IC]
    for shape in SHAPES:
        strengths = [strength_for_ic(shape, ic) for ic in (0.0, 0.02, 0.03, 0.05, 0.10, MAX_TARGET_IC)]
        assert strengths[0] == 0.0 and np.all(np.diff(strengths) > 0), (shape, strengths)
    with pytest.raises(DataError, match="target_ic"):
        SyntheticSpec(target_ic=0.5)
    with pytest.raises(DataError, match="shape"):
        SyntheticSpec(shape="weekly")


@pytest.mark.parametrize(
    "shape", [pytest.param(MINUTE_MOMENTUM, marks=pytest.mark.slow), DAILY_CROSS_SECTION, NONLINEAR]
)
def test_each_shape_plants_the_ic_it_is_asked_for_and_nothing_at_zero(shape):
    """On a 100-name, 250-session market (seed 17: not a calibration seed) at the plan's levels:

    - the null (target 0: strength 0, the plain noise market) has a predictor whose daily IC is
      indistinguishable from 0 (t-statistic over the sessions under 3);
    - each target realizes within 0.025: about three standard deviations of one market's mean IC
      around its expectation (the calibration markets' null ICs: 0.007-0.010);
    - less the same market's null IC (the same shocks: most of a market's luck cancels, the
      calibration's control variate), each target realizes within 0.005."""
    null = daily_ic_series(SyntheticSpec(**BIG, seed=17, shape=shape, target_ic=0.0))
    null = null[np.isfinite(null)]
    assert len(null) >= 240 and abs(null.mean()) / (null.std(ddof=1) / np.sqrt(len(null))) < 3.0
    for target in (0.02, 0.05, 0.10):
        ic = realized_daily_ic(SyntheticSpec(**BIG, seed=17, shape=shape, target_ic=target))
        assert abs(ic - target) < 0.025, (shape, target, ic)
        assert abs(ic - null.mean() - target) < 0.005, (shape, target, ic, null.mean())


def test_the_null_is_one_market_whatever_the_shape():
    """Strength 0 plants nothing: the same bars for every shape (the power table shares its nulls)."""
    closes = [
        generate(SyntheticSpec(num_tickers=4, num_sessions=3, seed=6, shape=s, target_ic=0.0)).close
        for s in SHAPES
    ]
    assert all(np.array_equal(closes[0], c) for c in closes[1:])


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(axis=1, keepdims=True)
    y = y - y.mean(axis=1, keepdims=True)
    return (x * y).sum(axis=1) / np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))


def _closing_features(panel) -> np.ndarray:
    """``(S, A, F)``: the product's features at each session's last bar, each computed from the bars
    the last row depends on (``data.features.lookback``), all sessions and names as one batch."""
    starts, counts = session_bounds(panel.grid.session_id)
    last = (starts + counts - 1)[2:]  # sessions with a full lookback behind their close
    span = lookback()
    rows = last[:, None] - np.arange(span)[::-1][None, :]  # (S, span)
    close = torch.as_tensor(panel.close[rows].transpose(1, 0, 2).reshape(span, -1))
    volume = torch.as_tensor(panel.volume[rows].transpose(1, 0, 2).reshape(span, -1))
    feats = compute_features(close, volume)[-1].numpy()
    return feats.reshape(len(last), panel.close.shape[1], -1)


@pytest.mark.slow
def test_the_nonlinear_shape_has_no_linear_correlation_with_any_feature():
    """The interaction's predictor at the close against each feature at the close: mean cross-sectional
    correlation under 0.05 for all of them (one session's has a standard deviation near 0.1; 58
    sessions), while the reversal's predictor correlates with the return features, and the product of
    the nonlinear shape's two inputs read from the features (the last hour, ``ret_60``, and the rest of
    the day, ``ret_390 - ret_60``) carries the predictor: the edge is there for a model of the
    interaction."""
    found = {}
    for shape in (NONLINEAR, DAILY_CROSS_SECTION):
        spec = SyntheticSpec(num_tickers=100, num_sessions=60, seed=19, shape=shape, target_ic=0.10)
        panel = generate(spec)
        feats = _closing_features(panel)
        starts, counts = session_bounds(panel.grid.session_id)
        predictor = planted_predictor(spec)[(starts + counts - 1)[2:]]
        found[shape] = {
            n: float(np.mean(_pearson(predictor, feats[..., i]))) for i, n in enumerate(FEATURE_NAMES)
        }
        if shape == NONLINEAR:
            last_hour = feats[..., FEATURE_NAMES.index(f"ret_{LAST_BARS}")]
            rest = feats[..., FEATURE_NAMES.index("ret_390")] - last_hour
            z = [(x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True) for x in (last_hour, rest)]
            interaction = float(np.mean(_pearson(predictor, z[0] * z[1])))
    assert max(abs(c) for c in found[NONLINEAR].values()) < 0.05, found[NONLINEAR]
    assert interaction > 0.5, interaction
    assert found[DAILY_CROSS_SECTION]["ret_390"] < -0.2, found[DAILY_CROSS_SECTION]


@pytest.mark.parametrize("shape", [DAILY_CROSS_SECTION, NONLINEAR])
def test_a_daily_shape_reads_only_the_sessions_before_the_one_it_pays_in(shape):
    """Change every shock from session 6 on: the drift paid in sessions 0..6 and the predictor up to
    session 5's close (which already names session 6's drift) stay the same."""
    d = _draws(SyntheticSpec(num_tickers=9, num_sessions=12, seed=5))
    sid, sigma, regime = d["sid"], d["idio"], d["regime"]
    rng = np.random.default_rng(1)
    eps = rng.normal(0, 1e-3, (len(sid), 9))
    changed = eps.copy()
    cut = int(np.flatnonzero(sid == 6)[0])
    changed[cut:] = rng.normal(0, 1e-3, changed[cut:].shape)
    (ret_a, score_a), (ret_b, score_b) = (
        daily_drift(e, sid, sigma, regime, shape, 0.3) for e in (eps, changed)
    )
    paid_until = int(np.flatnonzero(sid == 7)[0])
    # the drift of sessions 0..6 (to rounding: it is read back as returns less shocks)
    assert np.allclose((ret_a - eps)[:paid_until], (ret_b - changed)[:paid_until], rtol=0, atol=1e-15)
    assert not np.allclose((ret_a - eps)[paid_until:], (ret_b - changed)[paid_until:], rtol=0, atol=1e-15)
    assert np.array_equal(score_a[:7], score_b[:7]) and not np.array_equal(score_a[7:], score_b[7:])
    pred_a, pred_b = (daily_predictor(s, sid, sigma) for s in (score_a, score_b))
    assert np.array_equal(pred_a[:cut], pred_b[:cut]) and not np.array_equal(pred_a[cut:], pred_b[cut:])


def test_minute_momentum_reads_only_the_bars_before():
    rng = np.random.default_rng(3)
    eps = rng.normal(0, 1e-3, (800, 4))
    changed = eps.copy()
    changed[600:] += 1e-3
    a, b = (_planted_momentum(e, 0.5, 520) for e in (eps, changed))
    assert np.array_equal(a[:600], b[:600]) and not np.array_equal(a[600:], b[600:])
    # bar 600's drift reads bars < 600 only (to rounding: read back as returns less shocks)
    assert np.allclose((a - eps)[:601], (b - changed)[:601], rtol=0, atol=1e-15)


def test_the_data_config_and_the_loader_take_the_shape():
    from data.loader import load_market

    config = DataConfig(num_tickers=5, num_sessions=12, shape="nonlinear", target_ic=0.05)
    splits = load_market(config)
    spec = SyntheticSpec(num_tickers=5, num_sessions=12, shape="nonlinear", target_ic=0.05)
    assert np.allclose(splits.full.close.double().numpy(), generate(spec).close, rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        DataConfig(shape="weekly")
    with pytest.raises(ValueError, match="target_ic"):
        DataConfig(target_ic=0.3)
