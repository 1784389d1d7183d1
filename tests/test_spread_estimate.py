"""data.liquidity.spread_estimate: Abdi and Ranaldo's high-low-close spread estimator, per time-of-day
bucket over trailing sessions, recovers a planted half-spread and reads only bars at or before the
decision bar."""

from __future__ import annotations

import math

import pytest
import torch

from data.liquidity import SPREAD_FLOOR, spread_estimate

SESSIONS, BARS, TICKS = 30, 390, 20
HALF = torch.tensor([2e-4, 5e-4, 1e-3])  # planted half-spreads: 2, 5 and 10 bp


def _quoted_market(seed: int = 0):
    """Minute bars of an efficient random walk (20 ticks a bar) traded through a quoted spread: the
    bar's high is a buy at the ask above its highest efficient price, its low a sell at the bid,
    its close a buy or a sell with even odds (the estimator's model)."""
    gen = torch.Generator().manual_seed(seed)
    num_steps, num_assets = SESSIONS * BARS, len(HALF)
    eff = torch.randn(num_steps * TICKS, num_assets, generator=gen, dtype=torch.float64) * (
        2e-4 / math.sqrt(TICKS)
    )
    eff = eff.cumsum(0).view(num_steps, TICKS, num_assets) + math.log(100.0)
    half = HALF.double()
    high = eff.max(1).values + half
    low = eff.min(1).values - half
    side = torch.where(torch.rand(num_steps, num_assets, generator=gen) < 0.5, 1.0, -1.0).double()
    close = eff[:, -1] + side * half
    session = torch.arange(num_steps) // BARS
    return high.exp(), low.exp(), close.exp(), session


def test_recovers_a_planted_spread_within_ten_percent():
    high, low, close, session = _quoted_market()
    est = spread_estimate(high, low, close, session)
    assert est.shape == close.shape and est.dtype == torch.float32
    settled = est[20 * BARS :].double().mean(0)  # a full 20-session window behind every row
    torch.testing.assert_close(settled, HALF.double(), rtol=0.1, atol=0.0)
    # Per bucket too (the open's bucket included): every bucket's estimate within 25%.
    by_bucket = est[25 * BARS : 26 * BARS].double()
    assert bool(((by_bucket / HALF.double() - 1).abs() < 0.25).all())


def test_reads_only_bars_at_or_before_the_decision_bar():
    high, low, close, session = _quoted_market(seed=1)
    est = spread_estimate(high, low, close, session)
    cut = 12 * BARS + 100  # a decision bar inside a session
    high2, low2, close2 = high.clone(), low.clone(), close.clone()
    high2[cut + 1 :] *= 1.01
    low2[cut + 1 :] *= 0.99
    close2[cut + 1 :] *= 1.005
    est2 = spread_estimate(high2, low2, close2, session)
    assert torch.equal(est2[: cut + 1], est[: cut + 1])
    assert not torch.equal(est2[cut + 1 :], est[cut + 1 :])


def test_the_first_session_and_a_quiet_market_read_the_floor():
    high, low, close, session = _quoted_market()
    est = spread_estimate(high, low, close, session)
    assert bool((est[: BARS - 1] == SPREAD_FLOOR).all())  # no earlier session yet
    flat = torch.full_like(close, 50.0)
    assert bool((spread_estimate(flat, flat, flat, session) == SPREAD_FLOOR).all())
    assert pytest.approx(0.25e-4) == SPREAD_FLOOR
