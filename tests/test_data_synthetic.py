"""Synthetic generator: calendar, determinism, the planted signal and its signal=0 control."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from data.errors import DataError
from data.features import DEFAULT_WINDOWS, lookback
from data.loader import synthetic_market
from data.synthetic import MOMENTUM_LOOKBACK, SyntheticSpec, generate, to_frame


def test_bars_follow_the_xnas_calendar_with_early_closes():
    # 2024-11-27 .. 2024-12-02: Thanksgiving (closed) and the early close on Friday 11-29.
    panel = generate(SyntheticSpec(num_tickers=3, num_sessions=3, start="2024-11-27"))
    dates = [str(d.date()) for d in panel.grid.sessions]
    assert dates == ["2024-11-27", "2024-11-29", "2024-12-02"]
    counts = np.bincount(panel.grid.session_id)
    assert counts.tolist() == [390, 210, 390]
    ts = pd.DatetimeIndex(panel.grid.timestamps, tz="UTC").tz_convert("America/New_York")
    first_bar = ts[np.r_[True, panel.grid.session_id[1:] != panel.grid.session_id[:-1]]]
    assert all(t.strftime("%H:%M") == "09:30" for t in first_bar)
    assert ts[389].strftime("%H:%M") == "15:59" and ts[390 + 209].strftime("%H:%M") == "12:59"
    assert panel.grid.time_of_day[389] == pytest.approx(1.0) and panel.grid.time_of_day[599] == pytest.approx(
        1.0
    )


def test_bars_are_valid_ohlcv():
    panel = generate(SyntheticSpec(num_tickers=5, num_sessions=4, seed=3))
    assert np.isfinite(panel.close).all() and (panel.low > 0).all()
    assert (panel.high >= np.maximum(panel.open, panel.close)).all()
    assert (panel.low <= np.minimum(panel.open, panel.close)).all()
    assert (panel.volume >= 1).all()
    from data.schema import validate

    validate(to_frame(panel), source="synthetic")  # the bar schema accepts its own generator's output


def test_intraday_volume_is_u_shaped():
    panel = generate(SyntheticSpec(num_tickers=20, num_sessions=5, seed=1))
    minute = np.arange(len(panel.grid)) % 390
    mean_by_minute = np.array([panel.volume[minute == k].mean() for k in range(390)])
    edges = np.r_[mean_by_minute[:30], mean_by_minute[-30:]].mean()
    middle = mean_by_minute[165:225].mean()
    assert edges > 2 * middle


def test_same_seed_same_bars_other_seed_other_bars():
    a = synthetic_market(num_tickers=4, num_sessions=5, seed=7, signal=1.0)
    b = synthetic_market(num_tickers=4, num_sessions=5, seed=7, signal=1.0)
    c = synthetic_market(num_tickers=4, num_sessions=5, seed=8, signal=1.0)
    for name in ("open", "high", "low", "close", "volume", "features"):
        assert torch.equal(getattr(a.full, name), getattr(b.full, name)), name
    assert not torch.equal(a.full.close, c.full.close)
    assert a.full.feature_spec == b.full.feature_spec


def test_invalid_spec_is_a_data_error():
    with pytest.raises(DataError, match="signal"):
        SyntheticSpec(signal=5.0)
    with pytest.raises(DataError, match="ticker"):
        SyntheticSpec(num_tickers=0)
    with pytest.raises(DataError, match="lookback"):
        SyntheticSpec(lookback=0)


def test_no_feature_is_the_planted_predictor():
    """The planted drift follows the last ``MOMENTUM_LOOKBACK`` bars: no feature has that window, and
    none reaches back that far, so a policy has to learn the edge from features that see part of it."""
    assert MOMENTUM_LOOKBACK not in DEFAULT_WINDOWS.values()
    assert lookback(DEFAULT_WINDOWS) < MOMENTUM_LOOKBACK
    assert SyntheticSpec().lookback == MOMENTUM_LOOKBACK


def test_the_lookback_sets_the_planted_drift():
    """Same seed and shocks, another lookback: other bars once the recursion has something to sum."""
    short, planted = (
        generate(SyntheticSpec(num_tickers=3, num_sessions=2, lookback=k)) for k in (5, MOMENTUM_LOOKBACK)
    )
    assert np.array_equal(short.close[:1], planted.close[:1]) and not np.allclose(short.close, planted.close)


def _momentum_minus_buy_and_hold(seed: int, signal: float) -> float:
    """Log growth of a causal top-20% rule on ret_390 (decide at bar t, fill at t+1's open, rebalance
    every 15 bars, 0.2% proportional costs) minus equal-weight buy-and-hold, on the test window."""
    market = synthetic_market(num_tickers=30, num_sessions=30, seed=seed, signal=signal).test
    opens = market.open.double().numpy()
    score = market.features[..., market.feature_names.index("ret_390")].numpy()
    num_steps, num_assets = opens.shape
    k, every, cost = num_assets // 5, 15, 0.002
    log_growth, held, t = 0.0, np.zeros(num_assets), 0
    while t + 1 + every < num_steps:
        target = np.zeros(num_assets)
        target[np.argsort(-score[t])[:k]] = 1.0 / k
        log_growth += np.log(1 - cost * np.abs(target - held).sum())
        growth = opens[t + 1 + every] / opens[t + 1]
        port = float((target * growth).sum())
        log_growth += np.log(port)
        held = target * growth / port
        t += every
    buy_and_hold = np.log(1 - cost) + np.log(np.mean(opens[t + 1] / opens[1]))
    return log_growth - buy_and_hold


def test_planted_signal_beats_buy_and_hold_net_of_costs_and_vanishes_at_zero():
    with_signal = [_momentum_minus_buy_and_hold(seed, 1.0) for seed in range(3)]
    without = [_momentum_minus_buy_and_hold(seed, 0.0) for seed in range(3)]
    # Measured: roughly +0.1..+0.3 log-excess with signal, and a loss (costs, no edge) without.
    assert min(with_signal) > 0.05, with_signal
    assert max(without) < 0.0, without
