"""backtests.capacity: the strategy and the baselines at several account sizes in one pass; bigger
accounts pay more for the same decisions, and the curve lands in metrics.json with its estimate."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from backtests import capacity, engine, report
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.metrics_model import MetricsDocument
from data.toy import toy_market
from envs.execution import FRICTIONLESS
from envs.observation import FEATURES, split_obs
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
    costs = [
        capacity.cost_name(engine.capacity_name(n, 1e6), level)
        for level in capacity.COST_LEVELS
        for n in ("champion", "buy_and_hold", "equal_weight")
    ]
    assert list(capacity_result.names) == expected + costs
    assert capacity.capacity_levels(capacity_result) == list(LEVELS)
    assert capacity_result.initial_value == 1.0
    assert bool((capacity_result.equity > 0).all())


def test_net_return_does_not_rise_with_capital(capacity_result):
    for name in ("champion", "buy_and_hold", "equal_weight"):
        final = [
            float(capacity_result.equity[-1, capacity_result.index(engine.capacity_name(name, c))])
            for c in LEVELS
        ]
        # From $1M up the costs per dollar grow with the size. Below, Alpaca's rounding of each fee up
        # to the cent (at most two cents per sale: SEC fee and TAF) weighs more on a small account:
        # the $10k account nets at most that much less than the $1M one.
        assert all(b <= a + 1e-9 for a, b in zip(final[1:], final[2:], strict=False)), (name, final)
        sales = int(
            (
                capacity_result.shares[:, capacity_result.index(engine.capacity_name(name, LEVELS[0]))] < 0
            ).sum()
        )
        assert final[0] <= final[1] + 1e-9 or final[1] - final[0] <= sales * 0.02 / LEVELS[0], (name, final)
        # Each dollar traded costs more on a bigger account (square-root impact; the same once every
        # fill sits at the volume cap).
        cols = [capacity_result.index(engine.capacity_name(name, c)) for c in LEVELS]
        per_dollar = [
            float(capacity_result.trade_costs[:, c].sum() / capacity_result.trades[:, c].abs().sum())
            for c in cols
        ]
        assert all(b >= a for a, b in zip(per_dollar[1:], per_dollar[2:], strict=False)), (name, per_dollar)
        # (the $10k account's excess per dollar again within its cents of rounding; trades in units of capital)
        traded = float(capacity_result.trades[:, cols[0]].abs().sum())
        assert per_dollar[0] <= per_dollar[1] + sales * 0.02 / LEVELS[0] / traded, (name, per_dollar)
        assert per_dollar[-1] > per_dollar[1], (name, per_dollar)
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
        return report.metrics_document(sub, window="test", annualization=TRADING_DAYS_PER_YEAR)

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
        # fixed per-order costs eat the smallest account's edge: the run starts at the first significant size
        (
            ["not significant", "significant", "significant", "not significant"],
            [-0.2, 1.7, 1.2, 0.7],
            (1e8, "significant"),
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


INTERVAL = 30  # bars per decision in the foresight market's tests


@pytest.fixture(scope="module")
def foresight_market():
    """Three sessions of four assets whose one feature is the asset's return over the coming decision
    period (bar t + 1's open, the fill, to bar t + 30's close, the mark): not causal, a test device
    that hands a policy a known edge before costs. Log returns are 8x the toy market's (~0.4% a
    minute), so picking the best asset earns ~2% a period, well above the costs of a small account."""
    base = toy_market(num_steps=390 * 4, num_assets=4, num_features=1, seed=7)
    prices = {n: 100.0 * (getattr(base, n) / 100.0) ** 8 for n in ("open", "high", "low", "close")}
    forward = torch.zeros(base.num_steps, 4)
    t = torch.arange(base.num_steps - INTERVAL)
    forward[t] = prices["close"][t + INTERVAL] / prices["open"][t + 1] - 1.0
    market = dataclasses.replace(
        base, **prices, features=100.0 * forward.unsqueeze(-1), daily_vol=None, adv=None
    )
    return market.slice(390, base.num_steps)  # decisions at bars 0, 30, ... of the window


def _all_in(sign: float):
    """The whole book in the asset whose coming return is the highest (``sign`` 1: an edge before
    costs) or the lowest (-1: a loss before costs), rebalanced every decision."""

    def policy(obs):
        _, per_asset = split_obs(obs, 4, 1)
        forward = per_asset[..., FEATURES][..., 0] * sign
        return torch.nn.functional.one_hot(forward.argmax(-1), 4).to(obs.dtype)

    return policy


@pytest.fixture(scope="module")
def foresight_result(foresight_market):
    policies = {"oracle": _all_in(1.0), "loser": _all_in(-1.0)}
    return capacity.run_capacity(foresight_market, EnvParams(decision_interval=INTERVAL), policies)


def _net_returns(result, name: str) -> list[float]:
    cols = [result.index(engine.capacity_name(name, c)) for c in capacity.CAPITAL_LEVELS]
    return [float(result.equity[-1, c]) - 1.0 for c in cols]


def _return_before_costs(market, policy) -> float:
    free = EnvParams(decision_interval=INTERVAL, cost_rate=0.0, slippage_bps=0.0, **FRICTIONLESS)
    result = engine.run_backtest(market, free, {"policy": policy}, baselines=())
    return float(result.equity[-1, 0]) / result.initial_value - 1.0


def _turnover(result, name: str, capital: float) -> float:
    """Dollars traded over the window, in units of the starting capital."""
    return float(result.trades[:, result.index(engine.capacity_name(name, capital))].abs().sum())


def test_an_edge_nets_less_at_every_bigger_size(foresight_market, foresight_result):
    assert _return_before_costs(foresight_market, _all_in(1.0)) > 0.5  # the edge before costs
    net = _net_returns(foresight_result, "oracle")
    # Known answer on this market: +66.7%, +66.2%, +64.6%, +11.2%, +1.1% from $10k to $100M.
    assert net[0] > 0.5
    assert all(b <= a for a, b in zip(net, net[1:], strict=False)), net
    # From $10M the volume cap holds most fills: the book cannot follow the signal, the edge is gone.
    assert net[-1] < 0.1 * net[0], net
    largest = capacity.at_level(foresight_result, capacity.CAPITAL_LEVELS[-1])
    _, capped = capacity._fill_stats(largest, largest.names.index("oracle"), EnvParams().max_participation)
    assert capped > 0.5


def test_a_loser_loses_less_where_the_volume_cap_stops_it_trading(foresight_market, foresight_result):
    """The curve of a strategy that loses before costs rises with capital: not because size helps
    but because the volume cap keeps the big account out of the market. Every size stays below
    cash, and the estimate says there is no edge to scale."""
    assert _return_before_costs(foresight_market, _all_in(-1.0)) < -0.5
    net = _net_returns(foresight_result, "loser")
    # Known answer on this market: -63.6%, -63.7%, -63.9%, -33.5%, -3.4% from $10k to $100M.
    assert all(r < 0 for r in net), net  # below cash at every size
    assert net[-1] > net[0] + 0.5, net  # ... yet the curve rises
    smallest, largest = capacity.CAPITAL_LEVELS[0], capacity.CAPITAL_LEVELS[-1]
    assert _turnover(foresight_result, "loser", largest) < 0.1 * _turnover(
        foresight_result, "loser", smallest
    )
    # The estimate: the net Sharpe at the smallest size is negative, so nothing to scale.
    rows = []
    for c in capacity.CAPITAL_LEVELS:
        doc = report.metrics_document(
            capacity.at_level(foresight_result, c), window="test", annualization=TRADING_DAYS_PER_YEAR
        )
        rows.append(
            {
                "capital": c,
                "verdict_outcome": doc.verdict_outcome,
                "sharpe_ratio": doc.strategies["loser"].sharpe_ratio,
            }
        )
    assert rows[0]["sharpe_ratio"] < 0
    assert capacity.estimate(rows) == {"estimated_capacity": None, "estimated_capacity_rule": "no_edge"}


def test_every_strategy_replays_at_0x_1x_2x_the_cost_model(rising_market, capacity_result):
    # 1x is the env's own costs at its own account size: the plain backtest.
    plain = engine.run_backtest(
        rising_market,
        EnvParams(decision_interval=30),
        {"champion": _invested},
        baselines=("buy_and_hold", "equal_weight"),
    )
    at_1x = capacity.at_cost_level(capacity_result, 1.0)
    assert at_1x.names == plain.names
    torch.testing.assert_close(at_1x.equity * 1e6, plain.equity.to(at_1x.equity.dtype), rtol=1e-5, atol=1e-2)
    # Free trading earns the most and double costs the least, for every strategy.
    finals = {
        level: capacity.at_cost_level(capacity_result, level).equity[-1] for level in capacity.COST_LEVELS
    }
    assert bool((finals[0.0] > finals[1.0]).all()) and bool((finals[1.0] > finals[2.0]).all())
    doc = report.metrics_document(plain, window="test", annualization=TRADING_DAYS_PER_YEAR)
    rows = capacity.cost_sensitivity_fields(
        capacity_result,
        lambda sub: report.metrics_document(sub, window="test", annualization=TRADING_DAYS_PER_YEAR),
    )
    assert [row["level"] for row in rows] == [0.0, 1.0, 2.0]
    assert rows[1]["strategies"]["champion"]["sharpe_ratio"] == pytest.approx(
        doc.strategies["champion"].sharpe_ratio, rel=1e-4
    )
    sharpes = [row["strategies"]["champion"]["sharpe_ratio"] for row in rows]
    assert sharpes[0] > sharpes[1] > sharpes[2]
    assert set(rows[0]["strategies"]) == {"champion", "buy_and_hold", "equal_weight"}
    full = MetricsDocument.parse(report.json_safe({**doc.model_dump(), "cost_sensitivity": rows}))
    line = capacity.sensitivity_line(full)
    assert line.startswith("cost sensitivity") and "0x Sharpe" in line and "2x Sharpe" in line


def test_each_size_shows_its_alpha_and_p_value_and_the_estimate_names_what_it_reads(capacity_result):
    params = EnvParams(decision_interval=30)
    # Each size's document carries an out-of-sample test whose alpha over the benchmark is known.
    alphas = {c: (1e-4 * (5 - i), 0.01 * (i + 1)) for i, c in enumerate(LEVELS)}

    sizes = iter(LEVELS)  # capacity_fields documents the sizes in order

    def document(sub):
        alpha, p = alphas[next(sizes)]
        block = {"alpha_per_day": alpha, "alpha_p_value": p}
        doc = report.metrics_document(sub, window="test", annualization=TRADING_DAYS_PER_YEAR)
        return doc.updated(oos_test={"benchmark": "buy_and_hold", "excess": {"buy_and_hold": block}})

    fields = capacity.capacity_fields(capacity_result, params.max_participation, document, levels=LEVELS)
    rows = fields["capacity"]
    assert [(r["alpha_per_day"], r["alpha_p_value"]) for r in rows] == [alphas[c] for c in LEVELS]
    doc = MetricsDocument.parse(
        {"strategies": {"champion": {}}, **report.json_safe(fields), "estimated_capacity_rule": "half_sharpe"}
    )
    lines = capacity.curve_lines(doc)
    assert "alpha/day" in lines[1] and "alpha p" in lines[1]
    first = lines[2]  # $10k: alpha 5e-4 a day is +0.050%, p 0.010
    assert "$10k" in first and "+0.050%" in first and "0.010" in first
    assert "estimated capacity" in lines[-1] and "read on the Sharpe column" in lines[-1]
    significant = doc.updated(estimated_capacity_rule="significant")
    assert "the alpha's p-value after the looks" in capacity.capacity_rule_text(significant)
    # a significant run that starts above the smallest size says where it starts
    outcomes = ["not significant", "significant", "significant", "not significant"]
    later = doc.updated(
        estimated_capacity_rule="significant",
        estimated_capacity=1e8,
        capacity=[
            row.model_copy(update={"verdict_outcome": o})
            for row, o in zip(doc.capacity, outcomes, strict=True)
        ],
    )
    text = capacity.capacity_rule_text(later)
    assert text.startswith("$100M") and "from $1M: not significant below it" in text
    assert "from $" not in capacity.capacity_rule_text(significant)
