"""Basic contract tests of envs.trading / envs.observation / envs.vec_env: shapes, validation, episodes, autoreset."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from data.align import align_panel, align_ticker
from data.errors import DataError, PodracerError
from data.loader import build_market
from data.toy import toy_market, with_gaps
from envs import observation, trading
from envs.execution import FRICTIONLESS
from envs.observation import obs_dim, split_obs
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

TOY_MARKET = {
    "num_steps": 300,
    "num_assets": 4,
    "num_features": 3,
    "bars_per_session": 50,
    "seed": 1,
}  # `market`


def test_reset_shapes_and_fresh_obs(market):
    params = EnvParams(decision_interval=2, episode_len=10)
    state, obs = trading.reset(market, params, 5, torch.Generator().manual_seed(0))
    assert obs.shape == (5, obs_dim(4, 3)) == (5, 2 + 4 * 5)
    assert obs.dtype == torch.float32
    glob, per = split_obs(obs, 4, 3)
    assert torch.all(glob[:, 0] == 1.0)
    assert torch.equal(glob[:, 1], market.time_of_day[state.t])
    assert torch.all(per[..., 0] == 0.0)
    assert torch.all(per[..., observation.TRADABLE] == 1.0)  # toy data: every bar tradable
    assert torch.equal(per[..., observation.FEATURES], market.features[state.t])
    assert torch.all(state.value == params.initial_cash)
    # Random starts leave room for a full episode.
    assert int(state.t.max()) <= market.num_steps - 1 - 2 * 10


def test_params_validation_names_field():
    with pytest.raises(ValueError, match="cost_rate"):
        EnvParams(cost_rate=-0.1)
    with pytest.raises(ValueError, match="action_mode"):
        EnvParams(action_mode="long_short")
    with pytest.raises(ValueError, match="decision_interval"):
        EnvParams(decision_interval=0)
    with pytest.raises(PodracerError, match="reward"):
        EnvParams(reward="sharpe")
    with pytest.raises(ValueError, match="initial_cash"):
        EnvParams(initial_cash=float("nan"))


@pytest.mark.parametrize("bad", ["nan", "inf", "shape"])
def test_bad_action_raises_before_state_changes(market, bad):
    params = EnvParams(decision_interval=1, episode_len=5)
    state, _ = trading.reset(market, params, 3, torch.Generator().manual_seed(0))
    before = dataclasses.astuple(state)
    action = torch.full((3, 4), 0.1)
    if bad == "nan":
        action[1, 2] = float("nan")
    elif bad == "inf":
        action[0, 0] = float("inf")
    else:
        action = torch.full((3, 5), 0.1)
    with pytest.raises(ValueError, match="action"):
        trading.step(market, params, state, action)
    for a, b in zip(before, dataclasses.astuple(state), strict=True):
        assert torch.equal(a, b)


def test_vec_env_roundtrip_and_truncation(market):
    params = EnvParams(decision_interval=3, episode_len=4)
    env = TradingVecEnv(market, params, num_envs=6, seed=3)
    assert env.obs_dim == obs_dim(4, 3) and env.action_dim == 4
    assert env.single_observation_space.shape == (env.obs_dim,)
    obs, info = env.reset(seed=3)
    for _ in range(4):
        t_before = env.state.t.clone()
        obs, reward, terminated, truncated, info = env.step(torch.full((6, 4), 0.25))
        assert torch.equal(info["bar_t"], t_before)
        assert reward.shape == terminated.shape == truncated.shape == (6,)
    # Every env has taken episode_len decisions: all truncated and reset in the same step.
    assert bool(truncated.all()) and not bool(terminated.any())
    assert torch.all(env.state.step_count == 0)
    assert torch.all(env.state.value == params.initial_cash)
    assert torch.equal(obs[:, 0], torch.ones(6))
    # final_obs keeps the pre-reset, fully invested observation.
    assert torch.all(info["final_obs"][:, 0] < 0.05)
    assert torch.equal(info["t"], env.state.t)


def test_fixed_start_truncates_at_end_of_data(market):
    params = EnvParams(decision_interval=7, episode_len=10_000)
    state, _ = trading.reset(market, params, 2, start=250)
    steps = 0
    while True:
        state_t = state.t.clone()
        state, obs, reward, term, trunc, info = trading.step(market, params, state, torch.full((2, 4), 0.2))
        steps += 1
        if bool(trunc.any()):
            break
        assert steps < 100
    assert bool(trunc.all())
    # The last decision's mark bar is the last bar that leaves room for nothing more.
    assert int(state_t[0]) + 7 <= market.num_steps - 1 < int(state_t[0]) + 14
    assert steps == (market.num_steps - 1 - 250) // 7


def test_start_out_of_range_and_short_market(market):
    params = EnvParams(decision_interval=5, episode_len=3)
    with pytest.raises(DataError, match="start"):
        trading.reset(market, params, 2, start=market.num_steps - 5)
    short = market.slice(0, 5)
    with pytest.raises(DataError, match="bars"):
        trading.reset(short, params, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["weights", "shares"])
def test_step_never_modifies_inputs(market, mode, dtype):
    params = EnvParams(action_mode=mode, decision_interval=2, episode_len=3, max_shares=50.0)
    state, _ = trading.reset(market, params, 4, torch.Generator().manual_seed(0))
    action = (torch.rand(4, 4, generator=torch.Generator().manual_seed(1)) * 1.5 - 0.5).to(dtype)
    action_before = action.clone()
    fields_before = [x.clone() for x in dataclasses.astuple(state)]
    for _ in range(4):  # includes a step where every env resets
        new_state, *_ = trading.step(market, params, state, action)
        assert torch.equal(action, action_before)
        for a, b in zip(fields_before, dataclasses.astuple(state), strict=True):
            assert torch.equal(a, b)
        state = new_state
        fields_before = [x.clone() for x in dataclasses.astuple(state)]


def test_huge_finite_actions_are_accepted(market):
    params = EnvParams(decision_interval=1, episode_len=5)
    state, _ = trading.reset(market, params, 2, start=3)
    # The sum overflows to inf, but every entry is finite: clipped/rescaled, not an error.
    state, obs, *_ = trading.step(market, params, state, torch.full((2, 4), 3e38))
    glob, per = split_obs(obs, 4, 3)
    torch.testing.assert_close(per[..., 0].sum(1), torch.ones(2), atol=5e-3, rtol=0)


def test_observe_rebuilds_the_returned_observation(market):
    params = EnvParams(decision_interval=2, episode_len=50)
    state, obs = trading.reset(market, params, 3, torch.Generator().manual_seed(5))
    assert torch.equal(trading.observe(market, state), obs)
    state, obs, *_ = trading.step(market, params, state, torch.full((3, 4), 0.2))
    torch.testing.assert_close(trading.observe(market, state), obs)


def test_obs_without_template_table_is_identical(market, monkeypatch):
    params = EnvParams(decision_interval=2, episode_len=3)
    actions = [torch.full((5, 4), 0.1 * i) for i in range(5)]

    def run(m):
        state, obs = trading.reset(m, params, 5, torch.Generator().manual_seed(2))
        out = [obs]
        for action in actions:
            state, obs, *_ = trading.step(m, params, state, action)
            out.append(obs)
        return out

    with_table = run(market)
    monkeypatch.setattr(observation, "OBS_TABLE_MAX_BYTES", 0)
    # Same data in new tensors, so no cached table applies (the strided fallback is used).
    fresh = dataclasses.replace(market, features=market.features.clone())
    assert observation.obs_table(fresh) is None
    for a, b in zip(with_table, run(fresh), strict=True):
        assert torch.equal(a, b)


def test_random_starts_when_window_is_shorter_than_an_episode(market):
    params = EnvParams(decision_interval=10, episode_len=1000)
    state, _ = trading.reset(market, params, 256, torch.Generator().manual_seed(0))
    last = market.num_steps - 1 - 10
    assert int(state.t.min()) >= 0 and int(state.t.max()) <= last
    assert int(state.t.max()) > last - 30  # the whole range is used


def test_spaces_describe_the_tensors(market):
    env = TradingVecEnv(market, EnvParams(action_mode="shares", decision_interval=2), num_envs=3)
    assert env.single_action_space.shape == (4,) and env.action_space.shape == (3, 4)
    env.single_action_space.seed(0)
    sample = env.single_action_space.sample()
    assert env.single_action_space.contains(sample)
    assert not env.single_action_space.contains(sample + 3.0)
    obs, _ = env.reset()
    assert env.observation_space.contains(obs) and obs.shape == env.observation_space.shape
    obs, *_ = env.step(torch.as_tensor(np.stack([sample] * 3)))
    assert obs.shape == (3, env.obs_dim)


def _minute_bars(ticker: str, day: str, start: str, price: float) -> pd.DataFrame:
    """One bar a minute from ``start`` (New York) to the close of ``day``, all at ``price``."""
    ts = pd.date_range(f"{day} {start}", f"{day} 15:59", freq="1min", tz="America/New_York").tz_convert("UTC")
    n = len(ts)
    return pd.DataFrame(
        {
            "timestamp": ts,
            "ticker": ticker,
            "open": price,
            "high": price,
            "low": price,
            "close": price,
            "volume": 100.0,
        }
    ).iloc[:n]


def test_a_ticker_first_trading_at_0935_cannot_be_bought_before_at_yesterdays_close():
    """The issue's scenario: BBB's first trade of day 2 is at 09:35, 4.2% above day 1's close. The
    aligned panel forward-fills 09:30-09:34 with day 1's close; an order for BBB filling on those
    bars is skipped (cash kept), and the first fill is at 09:35's real open."""
    days = ("2024-01-02", "2024-01-03", "2024-01-04")
    frames = {
        "AAA": pd.concat([_minute_bars("AAA", d, "09:30", 20.0) for d in days]),
        "BBB": pd.concat(
            [
                _minute_bars("BBB", days[0], "09:30", 100.0),
                _minute_bars("BBB", days[1], "09:35", 104.2),
                _minute_bars("BBB", days[2], "09:30", 104.2),
            ]
        ),  # fmt: skip
    }
    aligned = {t: align_ticker(f, "1m").frame for t, f in frames.items()}
    market = build_market(align_panel(aligned, "1m"), train_frac=0.34, valid_frac=0.33).full
    b = market.tickers.index("BBB")
    stamps = pd.DatetimeIndex(market.timestamps).tz_localize("UTC").tz_convert("America/New_York")
    open_day2 = int(np.flatnonzero(stamps.date == pd.Timestamp(days[1]).date())[0])  # 09:30 of day 2
    assert not market.tradable[open_day2 : open_day2 + 5, b].any() and market.tradable[open_day2 + 5, b]
    assert float(market.open[open_day2 + 1, b]) == 100.0  # the stale price an order must not get
    params = EnvParams(decision_interval=1, episode_len=100, cost_rate=0.0, slippage_bps=0.0, **FRICTIONLESS)
    state, _ = trading.reset(market, params, 1, start=open_day2 - 1)  # day 1's last bar
    want = torch.zeros(1, 2)
    want[0, b] = 1.0
    for minute in range(5):  # fills at 09:30 .. 09:34: skipped
        state, *_ = trading.step(market, params, state, want)
        assert float(state.shares[0, b]) == 0.0 and float(state.cash[0]) == params.initial_cash, minute
    state, *_ = trading.step(market, params, state, want)  # fills at 09:35
    assert float(state.shares[0, b]) == pytest.approx(params.initial_cash / 104.2, rel=1e-6)


def test_held_asset_gone_for_good_is_sold_at_its_last_real_price():
    market = with_gaps(toy_market(300, 3, 2, seed=3), frac=0.0)  # asset 2 leaves at bar 200
    assert not bool(market.listed[200:, 2].any()) and bool(market.listed[199, 2])
    last_real = float(market.close[199, 2])
    params = EnvParams(decision_interval=5, episode_len=100, slippage_bps=0.0, broker="flat", **FRICTIONLESS)
    state, _ = trading.reset(market, params, 1, start=185)
    want = torch.tensor([[0.0, 0.0, 0.5]])
    state, *_ = trading.step(market, params, state, want)  # fills at 186: bought
    held = float(state.shares[0, 2])
    assert held > 0
    state, *_ = trading.step(market, params, state, want)  # fills at 191: tradable, kept at 50%
    state, *_ = trading.step(market, params, state, want)  # fills at 196
    cash_before = float(state.cash[0])
    held = float(state.shares[0, 2])
    state, _, _, _, _, info = trading.step(market, params, state, want)  # fills at 201: gone, sold
    assert float(state.shares[0, 2]) == 0.0
    proceeds = held * last_real * (1 - params.cost_rate)
    assert float(state.cash[0]) == pytest.approx(cash_before + proceeds, rel=1e-6)
    assert float(info["traded_notional"][0]) == pytest.approx(held * last_real, rel=1e-6)
