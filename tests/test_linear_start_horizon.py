"""The direct learner's ridge start at a longer horizon (``DirectArgs.start_horizon``)."""

from __future__ import annotations

import pytest
import torch

import agents.linear_start as linear_start
from agents.args import DirectArgs
from agents.direct import Decisions, decisions_of
from agents.linear_start import fit_linear_start, forward_returns
from data.errors import ConfigError
from data.loader import synthetic_market


def test_forward_returns_are_the_fill_open_to_the_later_close():
    market = synthetic_market(num_tickers=4, num_sessions=5, seed=1).train
    interval = 5
    d = decisions_of(market, interval)
    for horizon in (1, 3, 7):
        got = forward_returns(d, horizon)
        assert got.shape == (d.num - horizon + 1, 4)
        for k in (0, 11, got.shape[0] - 1):  # the slow way: read the bars
            fill_open = market.open[k * interval + 1].double()
            later_close = market.close[(k + horizon) * interval].double()
            torch.testing.assert_close(got[k], later_close / fill_open - 1.0, rtol=0, atol=1e-6)


def _transient_and_slow(rows: int = 1600, assets: int = 20, horizon: int = 4, seed: int = 0) -> Decisions:
    """Two features: ``fast`` pays 1% per unit over the next decision and takes it back over the one
    after (nothing left over ``horizon`` decisions); ``slow``, constant over blocks of ``horizon``
    decisions, pays 0.1% per unit a decision. Noise 0.5% a decision; no gaps."""
    gen = torch.Generator().manual_seed(seed)
    fast = torch.randn(rows, assets, generator=gen)
    slow = torch.randn(rows // horizon + 1, assets, generator=gen).repeat_interleave(horizon, dim=0)[:rows]
    previous = torch.cat([torch.zeros(1, assets), fast[:-1]])
    hold = 0.01 * (fast - previous) + 0.001 * slow + 0.005 * torch.randn(rows, assets, generator=gen)
    ones = torch.ones(rows, assets, dtype=torch.bool)
    return Decisions(
        features=torch.stack([fast, slow], dim=-1),
        tradable=ones,
        fill_ok=ones,
        time_of_day=torch.zeros(rows),
        gap=torch.zeros(rows, assets),
        hold=hold,
    )


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a - a.mean(dim=1, keepdim=True), b - b.mean(dim=1, keepdim=True)
    return float(((a * b).sum(dim=1) / (a.norm(dim=1) * b.norm(dim=1))).mean())


def test_the_longer_horizon_start_reads_the_slow_edge_the_interval_start_misses():
    d = _transient_and_slow()
    fit_rows = 1280
    interval_start = fit_linear_start(d, fit_rows, 0.5, horizon=1)
    session_start = fit_linear_start(d, fit_rows, 0.5, horizon=4)
    slow, fast = d.features[..., 1], d.features[..., 0]
    # The next-interval ridge ranks by the transient; the 4-decision ridge by the slow edge.
    assert _corr(interval_start.scores(d.features), fast) > 0.9
    assert _corr(interval_start.scores(d.features), slow) < 0.3
    assert _corr(session_start.scores(d.features), slow) > 0.9
    assert _corr(session_start.scores(d.features), fast) < 0.3


def test_no_fit_row_reads_a_held_out_return(monkeypatch):
    d = _transient_and_slow(rows=400)
    fit_rows, horizon = 320, 4
    seen = []
    real = linear_start.ridge_path
    monkeypatch.setattr(linear_start, "ridge_path", lambda panel, p: seen.append(panel) or real(panel, p))
    fit_linear_start(d, fit_rows, 0.5, horizon=horizon)
    (panel,) = seen
    # Row fit_rows - horizon's target ends at the held-out tail's first decision bar's close.
    assert panel.y.shape[0] == fit_rows - horizon + 1
    torch.testing.assert_close(panel.y, forward_returns(d, horizon)[: fit_rows - horizon + 1])


def test_start_horizon_is_a_positive_setting():
    assert DirectArgs().start_horizon == 1
    with pytest.raises(ConfigError, match="start_horizon"):
        DirectArgs(start_horizon=0)
