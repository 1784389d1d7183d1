"""backtests.engine: hand-checked fills and costs, buy-and-hold, batching, termination, fitness."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from backtests import baselines, engine, scoring
from backtests import metrics as m
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.errors import DataError, PodracerError
from data.market import MarketData
from data.toy import toy_market
from envs.execution import FRICTIONLESS
from envs.trading import EnvParams


def _market(open_, close, tickers=("AAA", "BBB"), bars_per_session=390) -> MarketData:
    """A tiny MarketData from explicit (T, A) open/close prices."""
    open_t = torch.tensor(open_, dtype=torch.float32)
    close_t = torch.tensor(close, dtype=torch.float32)
    steps, assets = close_t.shape
    minute = np.arange(steps) % bars_per_session
    day = np.arange(steps) // bars_per_session
    timestamps = np.datetime64("2024-01-02T14:30", "ns") + (day * 86_400 + minute * 60).astype(
        "timedelta64[s]"
    )
    return MarketData(
        tickers=tuple(tickers),
        timestamps=timestamps.astype("datetime64[ns]"),
        open=open_t,
        high=torch.maximum(open_t, close_t),
        low=torch.minimum(open_t, close_t),
        close=close_t,
        volume=torch.ones(steps, assets),
        features=torch.zeros(steps, assets, 1),
        feature_names=("f0",),
        session_id=torch.as_tensor(day, dtype=torch.int64),
        time_of_day=torch.as_tensor((minute + 1) / bars_per_session, dtype=torch.float32),
    )


class Script:
    """A policy that plays a fixed list of weight vectors and records what it saw."""

    def __init__(self, actions):
        self.actions = [torch.tensor(a, dtype=torch.float32) for a in actions]
        self.seen: list[torch.Tensor] = []

    def __call__(self, obs):
        self.seen.append(obs.clone())
        return self.actions[len(self.seen) - 1].expand(obs.shape[0], -1)


def test_hand_checked_two_assets_five_bars():
    # Bars 0..4. Decision k is taken on bar k, fills at bar k+1's open, is marked at bar k+1's close.
    open_ = [[10, 20], [10, 20], [11, 19], [12, 20], [12, 21]]
    close = [[10, 20], [11, 19], [12, 20], [11, 21], [12, 22]]
    params = EnvParams(
        initial_cash=1000.0,
        broker="flat",
        cost_rate=0.01,
        slippage_bps=100.0,
        decision_interval=1,
        **FRICTIONLESS,
    )
    policy = Script([[0.5, 0.5], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    res = engine.run_backtest(_market(open_, close), params, {"p": policy}, baselines=())

    # d0: $500 each at bar 1's open; buys pay 1% slippage and 1% commission, so the env scales the
    # order by 1 / (1.01 * 1.01) to fit the $1000. Marked at bar 1's close (11, 19).
    scale = 1.0 / (1.01 * 1.01)
    a0, b0 = 50.0 * scale, 25.0 * scale
    e0 = a0 * 11 + b0 * 19
    commission0 = 0.01 * (a0 * 10 * 1.01 + b0 * 20 * 1.01)
    slippage0 = 0.01 * (a0 * 10 + b0 * 20)
    # d1: sell everything at bar 2's open (11, 19), receiving 99% of the price less 1% commission.
    gross1 = a0 * 11 + b0 * 19
    e1 = gross1 * 0.99 * 0.99
    cost1 = 0.01 * gross1 * 0.99 + 0.01 * gross1
    # d2: all of it into AAA at bar 3's open (12), marked at bar 3's close (11).
    a2 = e1 / (12 * 1.01 * 1.01)
    e2 = a2 * 11
    cost2 = 0.01 * a2 * 12 * 1.01 + 0.01 * a2 * 12
    # d3: same target, nothing to trade; marked at bar 4's close (12).
    e3 = a2 * 12
    expected = torch.tensor([e0, e1, e2, e3], dtype=torch.float64)

    torch.testing.assert_close(res.equity[:, 0], expected, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(
        res.costs[:, 0],
        torch.tensor([commission0 + slippage0, cost1, cost2, 0.0], dtype=torch.float64),
        rtol=1e-9,
        atol=1e-9,
    )
    torch.testing.assert_close(
        res.returns[:, 0], expected / torch.cat([torch.tensor([1000.0]), expected[:-1]]) - 1
    )
    # Signed notional at the fill price: buys at open * 1.01, sells at open * 0.99.
    assert res.trades[0, 0].tolist() == pytest.approx([a0 * 10.1, b0 * 20.2], rel=1e-6)
    assert res.trades[1, 0].tolist() == pytest.approx([-a0 * 10.89, -b0 * 18.81], rel=1e-6)
    assert float(res.trades[3, 0].abs().max()) < 1e-6
    # Weights at the marks; turnover = traded notional / value before the trade.
    assert res.weights[0, 0].tolist() == pytest.approx([a0 * 11 / e0, b0 * 19 / e0], rel=1e-6)
    assert res.weights[1, 0].tolist() == [0.0, 0.0]
    assert res.turnover[1, 0].item() == pytest.approx(gross1 * 0.99 / e0, rel=1e-9)
    # Decisions were taken on bars 0..3: the observation's time of day is that of the decision bar.
    seen_tod = [float(o[0, 1]) for o in policy.seen]
    assert seen_tod == pytest.approx([(b + 1) / 390 for b in range(4)])
    assert list(res.timestamps) == list(_market(open_, close).timestamps[1:5])


def test_buy_and_hold_is_the_equal_weight_price_relative_net_of_initial_costs(toy):
    params = EnvParams(decision_interval=15, broker="flat", cost_rate=0.002, slippage_bps=1.0, **FRICTIONLESS)
    res = engine.run_backtest(toy, params, baselines=("buy_and_hold", "cash"))
    col = res.index("buy_and_hold")
    last_bar = engine.num_decisions(toy.num_steps, 15) * 15
    relative = (toy.close[last_bar].double() / toy.open[1].double()).mean()
    expected = 1e6 * relative / ((1 + 1e-4) * (1 + 0.002))
    assert res.equity[-1, col].item() == pytest.approx(expected.item(), rel=1e-10)
    # Only the first decision trades; cash stays flat and never pays anything.
    assert float(res.costs[1:, col].abs().sum()) == 0.0
    assert float(res.trades[1:, col].abs().sum()) == 0.0
    assert res.costs[0, col].item() == pytest.approx(
        1e6 / (1.0001 * 1.002) * (0.002 * 1.0001 + 1e-4), rel=1e-9
    )
    cash = res.index("cash")
    assert torch.all(res.equity[:, cash] == 1e6)
    # Weights drift with prices (no rebalancing): they are the held shares' share of value.
    assert float(res.weights[0, col].sum()) == pytest.approx(1.0, abs=1e-6)
    assert float((res.weights[-1, col] - res.weights[0, col]).abs().max()) > 1e-5


def test_static_baselines_match_stepping_the_env(toy):
    params = engine._long_horizon(EnvParams(decision_interval=7), 200)
    static = baselines.static_weights(toy, ("buy_and_hold", "cash"))
    k = engine.num_decisions(toy.num_steps, 7)
    fast = baselines.run_static(toy, params, static, k, 0)
    slow = baselines.run_static(toy, params, static, k, 0, through_env=True)
    torch.testing.assert_close(fast.equity, slow.equity, rtol=1e-12, atol=1e-6)
    torch.testing.assert_close(fast.weights, slow.weights, rtol=1e-5, atol=1e-6)


def test_policies_are_batched_independently(toy):
    params = EnvParams(decision_interval=10)
    first = lambda obs: torch.tensor([[1.0, 0, 0, 0]]).expand(obs.shape[0], -1)  # noqa: E731
    second = lambda obs: torch.tensor([[0, 0, 0.5, 0.5]]).expand(obs.shape[0], -1)  # noqa: E731
    both = engine.run_backtest(toy, params, {"a": first, "b": second}, baselines=())
    alone_a = engine.run_backtest(toy, params, {"a": first}, baselines=())
    alone_b = engine.run_backtest(toy, params, {"b": second}, baselines=())
    torch.testing.assert_close(both.equity[:, 0], alone_a.equity[:, 0])
    torch.testing.assert_close(both.equity[:, 1], alone_b.equity[:, 0])
    assert both.names == ("a", "b")
    # A constant-weight policy rebalances: it trades a little after its first decision.
    assert float(both.costs[1:, 1].sum()) > 0


def test_objects_with_act_are_called_deterministically(toy):
    class Agent:
        calls: list[bool] = []

        def act(self, obs, deterministic=False):
            self.calls.append(deterministic)
            return torch.zeros(obs.shape[0], toy.num_assets)

    agent = Agent()
    engine.run_backtest(toy, EnvParams(decision_interval=100), {"agent": agent}, baselines=())
    assert agent.calls and all(agent.calls)


def test_terminated_strategy_is_stopped_at_its_terminal_value():
    # AAA collapses by 95% on bar 2; the all-in strategy falls under the 10% floor and stops there.
    open_ = [[100, 50]] * 2 + [[5, 50]] * 6
    close = [[100, 50], [100, 50]] + [[5, 50]] * 6
    params = EnvParams(
        initial_cash=1000.0, cost_rate=0.0, slippage_bps=0.0, decision_interval=1, **FRICTIONLESS
    )
    all_in = lambda obs: torch.tensor([[1.0, 0.0]]).expand(obs.shape[0], -1)  # noqa: E731
    res = engine.run_backtest(_market(open_, close), params, {"all_in": all_in}, baselines=("cash",))
    col = res.index("all_in")
    assert res.terminated_at == (1, -1)
    assert res.equity[1, col].item() == pytest.approx(50.0)
    assert torch.all(res.equity[1:, col] == res.equity[1, col])
    assert float(res.weights[2:, col].abs().sum()) == 0.0
    assert float(res.costs[2:, col].abs().sum()) == 0.0


def test_index_baseline_when_an_index_etf_is_present():
    base = toy_market(200, 3, 2, seed=1)
    market = MarketData(**{**base.__dict__, "tickers": ("AAA", "QQQ", "BBB")})
    res = engine.run_backtest(market, EnvParams(decision_interval=10))
    assert res.names == ("buy_and_hold", "cash", "index_QQQ", "equal_weight")
    col = res.index("index_QQQ")
    assert float(res.weights[0, col, 1]) == pytest.approx(1.0, abs=1e-6)
    # Without one the baseline is skipped.
    assert "index_QQQ" not in engine.run_backtest(base, EnvParams(decision_interval=10)).names


def test_daily_returns_compound_the_decision_returns(toy):
    res = engine.run_backtest(toy, EnvParams(decision_interval=30), baselines=("buy_and_hold",))
    dates, daily = res.daily_returns()
    assert len(dates) == daily.shape[0] == 2
    # Day 1 ends at its last mark; day 2's return is measured from there to the last mark.
    last_day1 = int(np.flatnonzero(res.session_dates == dates[0])[-1])
    assert daily[0, 0].item() == pytest.approx(res.equity[last_day1, 0].item() / 1e6 - 1, rel=1e-12)
    assert daily[1, 0].item() == pytest.approx(
        res.equity[-1, 0].item() / res.equity[last_day1, 0].item() - 1, rel=1e-9
    )
    assert res.date_range() == ("2024-01-02", "2024-01-03")
    summary = res.summary(annualization=TRADING_DAYS_PER_YEAR)
    assert tuple(summary) == m.SUMMARY_METRICS


def test_fitness_ranks_and_maps_undefined_to_minus_inf(toy):
    long_best = lambda obs: torch.full((obs.shape[0], toy.num_assets), 1.0 / toy.num_assets)  # noqa: E731
    scores = scoring.score_window(
        toy,
        EnvParams(decision_interval=15),
        {"pod": long_best},
        device="cpu",
        baselines=("cash",),
        annualization=TRADING_DAYS_PER_YEAR,
    )
    res, fit = scores.result, scores.fitness
    assert res.names == ("pod", "cash") and fit.shape == (2,)
    assert math.isfinite(fit[0].item()) and fit[1].item() == -math.inf
    assert scores.of("pod") == fit[0].item()
    torch.testing.assert_close(
        scoring.fitness(res, "sharpe", annualization=TRADING_DAYS_PER_YEAR), fit, rtol=0, atol=0
    )
    assert scoring.fitness(res, "return", annualization=TRADING_DAYS_PER_YEAR)[1].item() == 0.0
    with pytest.raises(PodracerError, match="unknown fitness"):
        scoring.fitness(res, "sortino", annualization=TRADING_DAYS_PER_YEAR)
    with pytest.raises(PodracerError, match="unknown fitness"):
        scoring.score_window(
            toy,
            EnvParams(decision_interval=15),
            {"pod": long_best},
            kind="sortino",
            annualization=TRADING_DAYS_PER_YEAR,
        )


def test_bad_inputs_are_one_line_errors(toy):
    with pytest.raises(DataError, match="too short"):
        engine.run_backtest(toy.slice(0, 10), EnvParams(decision_interval=15))
    with pytest.raises(PodracerError, match="unknown baseline"):
        engine.run_backtest(toy, EnvParams(), baselines=("momentum",))
    with pytest.raises(PodracerError, match="clash"):
        engine.run_backtest(toy, EnvParams(), {"cash": lambda o: o})
    nan_policy = lambda obs: torch.full((obs.shape[0], toy.num_assets), float("nan"))  # noqa: E731
    with pytest.raises(PodracerError, match="NaN"):
        engine.run_backtest(toy, EnvParams(decision_interval=100), {"bad": nan_policy}, baselines=())


def test_a_nan_action_after_the_first_decision_is_reported_with_its_decision(toy):
    calls = []

    def late_nan(obs):
        calls.append(1)
        value = float("nan") if len(calls) == 4 else 0.25
        return torch.full((obs.shape[0], toy.num_assets), value)

    with pytest.raises(PodracerError, match=r"'late' returned a NaN or inf action at decision 3 \(bar 30\)"):
        engine.run_backtest(toy, EnvParams(decision_interval=10), {"late": late_nan}, baselines=())


def test_num_threads_is_set_for_the_run_and_restored(toy):
    before = torch.get_num_threads()
    seen = []

    def spy(obs):
        seen.append(torch.get_num_threads())
        return torch.zeros(obs.shape[0], toy.num_assets)

    engine.run_backtest(toy, EnvParams(decision_interval=200), {"spy": spy}, baselines=(), num_threads=1)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


def test_decisions_spanning_sessions_still_give_one_return_per_session():
    # Hourly bars (7 a session) and a decision every 15 bars: most sessions have no mark. Each must
    # still be a daily return (valued at its close with the holdings in force), or 252 rows would not
    # be a year and the Sharpe ratio and annual return would be inflated.
    from data.loader import load_market
    from envs import trading

    market = load_market(None, num_tickers=3, num_sessions=12, interval="1h").full
    assert market.num_steps == 12 * 7
    gen = torch.Generator().manual_seed(0)
    actions = torch.rand(40, 1, market.num_assets, generator=gen)
    calls = iter(range(40))
    policy = lambda obs: actions[next(calls)]  # noqa: E731
    params = EnvParams(decision_interval=15)
    res = engine.run_backtest(market, params, {"p": policy}, baselines=("buy_and_hold",))
    assert res.num_steps == (84 - 1) // 15 == 5
    dates, daily = res.daily_returns()
    sessions = np.unique(market.session_dates())
    last_mark = res.num_steps * 15
    covered = sessions[: int(market.session_id[last_mark]) + 1]  # through the session of the last mark
    np.testing.assert_array_equal(dates, covered)
    assert len(dates) == 12 - 1  # the last session lies past the last mark
    # Daily returns compound to the final equity.
    growth = torch.prod(1.0 + daily, dim=0) * res.initial_value
    torch.testing.assert_close(growth, res.equity[-1], rtol=1e-10, atol=0)
    # Hand-check the policy's close of session 0 (bar 6, inside decision 0's holding period).
    p64 = engine._long_horizon(params, res.num_steps)
    state, _ = trading.reset(market, p64, 1, torch.Generator().manual_seed(0), start=0)
    state, *_ = trading.step(market, p64, state, actions[0])
    close6 = market.close[6].to(torch.float64)
    expected = float(state.cash[0] + (state.shares[0].to(torch.float64) * close6).sum())
    assert float(daily[0, 0]) == pytest.approx(expected / res.initial_value - 1.0, rel=1e-9)
    # Annualization sees every session: 11 rows, not the 5 decisions' 3 mark days.
    assert m.annual_return(daily[:, 0]).item() == pytest.approx(
        float(growth[0] / res.initial_value) ** (252 / 11) - 1.0, rel=1e-9
    )


def _equal_weight_reference(open_, close, bars_per_session, rate, cash0):
    """Plain-Python equal_weight: rebalance to 1/A at the first fill of each session (decision bar k
    fills at k+1's open), hold otherwise; sells first, buys scaled so cash stays >= 0."""
    steps, assets = len(close), len(close[0])
    cash, shares, marks = cash0, [0.0] * assets, []
    for k in range(steps - 1):
        fill = k + 1
        if k == 0 or fill // bars_per_session != k // bars_per_session:
            px = open_[fill]
            value = cash + sum(s * p for s, p in zip(shares, px, strict=True))
            diff = [value / assets / p - s for s, p in zip(shares, px, strict=True)]
            sell = sum(-d * p for d, p in zip(diff, px, strict=True) if d < 0)
            buy = sum(d * p for d, p in zip(diff, px, strict=True) if d > 0)
            available, needed = cash + sell * (1 - rate), buy * (1 + rate)
            scale = min(1.0, available / needed) if needed > 0 else 1.0
            diff = [d * scale if d > 0 else d for d in diff]
            shares = [s + d for s, d in zip(shares, diff, strict=True)]
            cash = available - needed * scale
        marks.append(cash + sum(s * p for s, p in zip(shares, close[fill], strict=True)))
    return marks


def test_equal_weight_rebalances_at_each_session_open_against_a_hand_computed_case():
    # 3 sessions of 2 bars; one decision per bar: fills at bars 1..5, rebalances at bars 1, 2 and 4
    # (bars 2 and 4 are session opens), held through bars 3 and 5.
    open_ = [[10, 20], [10, 20], [12, 18], [13, 17], [9, 22], [10, 21]]
    close = [[10, 20], [11, 19], [13, 17], [12, 18], [10, 21], [11, 20]]
    params = EnvParams(
        initial_cash=1000.0,
        broker="flat",
        cost_rate=0.01,
        slippage_bps=0.0,
        decision_interval=1,
        **FRICTIONLESS,
    )
    market = _market(open_, close, bars_per_session=2)
    res = engine.run_backtest(market, params, baselines=("equal_weight", "buy_and_hold"))
    expected = _equal_weight_reference(open_, close, 2, 0.01, 1000.0)
    col = res.index("equal_weight")
    assert res.equity[:, col].tolist() == pytest.approx(expected, rel=1e-6)
    # First rebalance by hand: $500 a side at bar 1's open, scaled by 1/1.01 for the 1% commission.
    a0, b0 = 50.0 / 1.01, 25.0 / 1.01
    assert res.equity[0, col].item() == pytest.approx(a0 * 11 + b0 * 19, rel=1e-6)
    # Trades at the rebalances only; costs on; it differs from buy-and-hold (which never rebalances).
    traded = res.trades[:, col].abs().sum(dim=-1)
    assert [bool(v > 1e-6) for v in traded] == [True, True, False, True, False]
    assert float(res.costs[:, col].sum()) > float(res.costs[:, res.index("buy_and_hold")].sum())
    assert baselines.rebalance_rows(market, 1, 5).tolist() == [0, 1, 3]
    # Weights equal right after each rebalance fill (measured at the open), then drift with prices.
    assert res.weights[1, col].sum().item() == pytest.approx(1.0, abs=0.02)


def test_max_weight_caps_the_policy_at_every_fill_not_the_baselines():
    """max_weight 0.1: a policy that asks for 100% of one asset holds at most 10% of the book at each
    fill (measured at the fill bar's open against the book's value there; drift after the fill is
    allowed); buy-and-hold and the index baseline stay uncapped (the user's own alternative)."""
    market = dataclasses.replace(toy_market(3 * 390, 3, 2, seed=4), tickers=("AAA", "BBB", "QQQ"))
    params = EnvParams(decision_interval=5, max_weight=0.1, slippage_bps=0.0, **FRICTIONLESS)

    def all_in(obs):
        action = torch.zeros(obs.shape[0], 3)
        action[:, 0] = 1.0
        return action

    result = engine.run_backtest(market, params, {"p": all_in}, baselines=("buy_and_hold", "index", "cash"))
    k, col = params.decision_interval, result.index("p")
    fills = (torch.arange(result.num_steps) * k + 1).tolist()
    opens = market.open.double()
    held = torch.zeros(3, dtype=torch.float64)
    cash = params.initial_cash
    for row, fill in enumerate(fills):
        value_open = cash + float(held @ opens[fill])
        held = held + result.trades[row, col].double() / opens[fill]  # no slippage: fills at the open
        weight_at_fill = held * opens[fill] / value_open
        assert float(weight_at_fill.max()) <= 0.1 + 1e-6, (row, weight_at_fill)
        cash = float(result.equity[row, col]) - float(held @ market.close.double()[(row + 1) * k])
    assert float(result.weights[:, col, 0].max()) > 0.09  # the cap binds: the policy sits at it
    assert float(result.weights[0, result.index("buy_and_hold")].sum()) > 0.99  # uncapped 1/3 each
    assert float(result.weights[0, result.index("index_QQQ"), 2]) > 0.99


def test_a_run_uses_one_thread_unless_told_to_leave_them(toy):
    """The default is one intra-op thread (MKL's float64 sqrt and exp run a parallel team for a
    hundred elements otherwise); ``num_threads=None`` leaves the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = []

        def spy(obs):
            seen.append(torch.get_num_threads())
            return torch.zeros(obs.shape[0], toy.num_assets)

        engine.run_backtest(toy, EnvParams(decision_interval=200), {"spy": spy}, baselines=())
        assert seen and set(seen) == {1}
        seen.clear()
        engine.run_backtest(
            toy, EnvParams(decision_interval=200), {"spy": spy}, baselines=(), num_threads=None
        )
        assert seen and set(seen) == {2}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
