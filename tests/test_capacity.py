"""backtests.capacity: the strategy and the baselines at several account sizes in one pass; bigger
accounts pay more for the same decisions, and the curve lands in metrics.json with its estimate."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from backtests import capacity, engine, report
from backtests.metrics_model import MetricsDocument
from data.toy import toy_market
from envs.trading import EnvParams

LEVELS = (1e4, 1e6, 1e8, 1e10)


def _invested(obs):
    # Fully invested in equal weights, rebalanced every decision (orders under $1 are not placed).
    return torch.full((obs.shape[0], 4), 0.25)


@pytest.fixture(scope="module")
def rising_market():
    """Three sessions of four assets drifting up ~12%: an invested book earns, so a size that the
    volume cap keeps out of the market earns less, and costs more per dollar."""
    base = toy_market(num_steps=390 * 4, num_assets=4, num_features=2, seed=4)
    drift = torch.exp(1e-4 * torch.arange(base.num_steps, dtype=torch.float32)).unsqueeze(1)
    prices = {name: getattr(base, name) * drift for name in ("open", "high", "low", "close")}
    # The window starts after a session of history, so its first decisions know the liquidity.
    return dataclasses.replace(base, **prices, daily_vol=None, adv=None).slice(390, base.num_steps)


@pytest.fixture(scope="module")
def capacity_result(rising_market):
    return capacity.run_capacity(
        rising_market, EnvParams(decision_interval=30), {"champion": _invested}, levels=LEVELS
    )


def test_every_strategy_runs_at_every_size_in_units_of_its_capital(capacity_result):
    expected = [
        engine.capacity_name(n, c) for n in ("champion", "buy_and_hold", "equal_weight") for c in LEVELS
    ]
    assert list(capacity_result.names) == expected
    assert capacity_result.initial_value == 1.0
    assert bool((capacity_result.equity > 0).all())


def test_net_return_does_not_rise_with_capital(capacity_result):
    for name in ("champion", "buy_and_hold", "equal_weight"):
        final = [
            float(capacity_result.equity[-1, capacity_result.index(engine.capacity_name(name, c))])
            for c in LEVELS
        ]
        assert all(b <= a + 1e-9 for a, b in zip(final, final[1:], strict=False)), (name, final)
        # Each dollar traded costs more on a bigger account (square-root impact; the same once every
        # fill sits at the volume cap).
        cols = [capacity_result.index(engine.capacity_name(name, c)) for c in LEVELS]
        per_dollar = [
            float(capacity_result.trade_costs[:, c].sum() / capacity_result.trades[:, c].abs().sum())
            for c in cols
        ]
        assert all(b >= a for a, b in zip(per_dollar, per_dollar[1:], strict=False)), (name, per_dollar)
        assert per_dollar[-1] > per_dollar[0], (name, per_dollar)
    # At $10B the volume cap binds: the champion's fills sit at the cap.
    sub = capacity.at_level(capacity_result, 1e10)
    participation, capped = capacity._fill_stats(sub, 0, EnvParams().max_participation)
    assert capped > 0.5 and participation <= EnvParams().max_participation * (1 + 1e-4)


def test_a_size_equals_a_plain_backtest_at_that_initial_cash(rising_market, capacity_result):
    params = EnvParams(decision_interval=30, initial_cash=1e6)
    plain = engine.run_backtest(
        rising_market, params, {"champion": _invested}, baselines=("buy_and_hold", "equal_weight")
    )
    sub = capacity.at_level(capacity_result, 1e6)
    assert sub.names == plain.names
    torch.testing.assert_close(sub.equity * 1e6, plain.equity, rtol=1e-9, atol=1e-6)
    torch.testing.assert_close(sub.costs * 1e6, plain.costs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sub.shares, plain.shares)


def test_capacity_fields_and_the_estimate(capacity_result):
    params = EnvParams(decision_interval=30)

    def document(sub):
        return report.metrics_document(sub, window="test")

    fields = capacity.capacity_fields(capacity_result, params.max_participation, document, levels=LEVELS)
    rows = fields["capacity"]
    assert [r["capital"] for r in rows] == list(LEVELS) and len(rows) >= 4
    for key in ("sharpe_ratio", "cum_returns_final", "costs_paid", "mean_participation", "capped_share"):
        assert all(key in r for r in rows)
    assert rows[0]["verdict_outcome"] == "not measurable"  # three sessions
    assert fields["estimated_capacity_rule"] in ("half_sharpe", "no_edge")
    lines = capacity.curve_lines(
        MetricsDocument.parse({"strategies": {"champion": {}}, **report.json_safe(fields)})
    )
    assert lines[0].startswith("capacity") and "$10k" in lines[2] and "estimated capacity" in lines[-1]


@pytest.mark.parametrize(
    ("outcomes", "sharpes", "want"),
    [
        (
            ["significant", "significant", "not significant", "significant"],
            [2, 1.5, 1, 1],
            (1e6, "significant"),
        ),
        (["not significant"] * 4, [2.0, 1.2, 0.9, 1.5], (1e6, "half_sharpe")),
        (["not measurable"] * 4, [-0.1, 0.5, 0.5, 0.5], (None, "no_edge")),
    ],
)
def test_estimated_capacity_rule(outcomes, sharpes, want):
    rows = [
        {"capital": c, "verdict_outcome": o, "sharpe_ratio": s}
        for c, o, s in zip(LEVELS, outcomes, sharpes, strict=True)
    ]
    got = capacity.estimate(rows)
    assert (got["estimated_capacity"], got["estimated_capacity_rule"]) == want


def test_a_policy_batch_is_refused(rising_market):
    batch = engine.PolicyBatch(("a",), _invested)
    with pytest.raises(Exception, match="mapping"):
        engine.run_backtest(rising_market, EnvParams(decision_interval=30), batch, capital=(1e4,))
    with pytest.raises(Exception, match="positive"):
        engine.run_backtest(
            rising_market,
            dataclasses.replace(EnvParams(), decision_interval=30),
            {"a": _invested},
            capital=(0.0,),
        )
