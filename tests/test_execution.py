"""The execution model (spread, volume cap, square-root impact, minimum order) on a market small
enough to compute by hand: the torch step, the native C kernel, the backtest step and the plain-Python
reference all fill the same capped order at the same hand-computed price."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from helpers import flat_liquidity_market

from data import liquidity
from data.liquidity import expected_volume, trailing_liquidity
from data.toy import toy_market
from envs import trading
from envs.backtest_step import asset_prices, backtest_step
from envs.fast_step import step_kernel
from envs.kernels import native
from envs.reference import ReferenceEnv
from envs.trading import EnvParams

PRICE = 100.0
FILL_VOLUME = 1000.0  # shares at the fill bar (bar 1)
DAILY_VOL, ADV = 0.02, 1.0e4
CASH = 1.0e6  # a full-weight order is 10_000 shares: 10x the fill bar's volume
PARAMS = EnvParams(
    initial_cash=CASH,
    decision_interval=2,
    episode_len=10,
    spread="fixed",  # the constant half-spread these hand computations use (estimates: test_spread_env)
    spread_bps=2.0,
    slippage_bps=1.0,
    max_participation=0.025,
    impact_coef=0.5,
    min_order_notional=1.0,
    broker="flat",
    cost_rate=0.001,
)


@pytest.fixture(scope="module")
def flat_market():
    """Two assets at a flat $100, 1000 shares per bar, a known trailing volatility and volume."""
    return flat_liquidity_market(PRICE, FILL_VOLUME, DAILY_VOL, ADV)  # 1000 shares expected every bar


def _by_hand(params: EnvParams, shares: float) -> tuple[float, float]:
    """``(execution cost, cash after)`` of buying ``shares`` of a $100 asset, from docs/env.md."""
    frac = (params.slippage_bps + params.spread_bps) / 1e4 + params.impact_coef * DAILY_VOL * math.sqrt(
        shares / ADV
    )
    notional = shares * PRICE * (1 + frac)
    return shares * PRICE * frac, CASH - notional * (1 + params.cost_rate)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_an_order_ten_times_the_bar_volume_fills_its_cap_at_spread_plus_impact(flat_market, precision):
    params = dataclasses.replace(PARAMS, precision=precision, trade_info=precision == "float64")
    action = torch.tensor([[1.0, 0.0]])  # everything into asset 0: 10_000 shares wanted
    filled = PARAMS.max_participation * FILL_VOLUME  # 25 shares
    execution_cost, cash = _by_hand(params, filled)
    # $0.75 of spread and slippage (3 bps of $2500), $1.25 of impact (0.5 * 2% * sqrt(25 / 1e4)).
    assert execution_cost == pytest.approx(0.75 + 1.25)

    state, _ = trading.reset(flat_market, params, 1, start=0)
    eager = trading.step(flat_market, params, state, action)
    backtest = backtest_step(flat_market, params, state, action, asset_prices(flat_market, params))
    ref = ReferenceEnv(flat_market, params, 0, int(state.rng[0]))
    *_, ref_info = ref.step(action[0].tolist())
    outs = {"eager": (eager.info["shares_traded"][0].tolist(), float(eager.state.cash[0]))}
    outs["backtest"] = (backtest.shares_traded[0].tolist(), float(backtest.state.cash[0]))
    outs["reference"] = (ref_info["shares_traded"], ref.cash)
    if native.compiler() is not None and precision == "float32":
        assert step_kernel(flat_market, params, state, True) == "native"
        fast = trading.step(flat_market, params, state, action, fast=True)
        outs["native"] = (fast.info["shares_traded"][0].tolist(), float(fast.state.cash[0]))
    for name, (traded, got_cash) in outs.items():
        assert traded == pytest.approx([filled, 0.0], abs=1e-4), name
        assert got_cash == pytest.approx(cash, rel=1e-9, abs=1e-3), name
    if params.trade_info:
        fill = float(eager.info["fill_price"][0, 0])
        assert (fill - PRICE) * filled == pytest.approx(execution_cost, rel=1e-6)


def test_no_expected_volume_fills_nothing_and_dust_is_not_placed(flat_market):
    quiet = dataclasses.replace(
        flat_market, volume=torch.zeros_like(flat_market.volume), expected_volume=None
    )
    state, _ = trading.reset(quiet, PARAMS, 1, start=0)
    out = trading.step(quiet, PARAMS, state, torch.tensor([[0.5, 0.5]]))
    assert out.info["shares_traded"].abs().sum() == 0 and float(out.state.cash[0]) == CASH
    # A $0.50 order (0.005 shares of a $100 asset) is not placed.
    tiny = dataclasses.replace(PARAMS, max_participation=0.0)
    out = trading.step(flat_market, tiny, state, torch.tensor([[0.5 / CASH, 0.0]]))
    assert out.info["shares_traded"].abs().sum() == 0 and float(out.state.cash[0]) == CASH


def test_frictionless_when_every_term_is_zero(flat_market):
    off = dataclasses.replace(
        PARAMS, spread_bps=0.0, max_participation=0.0, impact_coef=0.0, min_order_notional=0.0
    )
    assert not off.execution
    state, _ = trading.reset(flat_market, off, 1, start=0)
    out = trading.step(flat_market, off, state, torch.tensor([[1.0, 0.0]]))
    bought = float(out.info["shares_traded"][0, 0])
    assert bought * PRICE * (1 + 1e-4) * (1 + off.cost_rate) == pytest.approx(CASH, rel=1e-6)


def test_liquidity_is_point_in_time():
    market = toy_market(num_steps=400, num_assets=3, num_features=2, bars_per_session=40, seed=3)
    vol, adv = trailing_liquidity(market.close, market.volume, market.session_id)
    assert torch.equal(vol, market.daily_vol) and torch.equal(adv, market.adv)
    # Changing the future changes nothing at or before bar 200.
    close, volume = market.close.clone(), market.volume.clone()
    close[201:] *= 3.0
    volume[201:] *= 7.0
    vol2, adv2 = trailing_liquidity(close, volume, market.session_id)
    assert torch.equal(vol2[:201], vol[:201]) and torch.equal(adv2[:201], adv[:201])
    # Average daily volume: ~1.05e6 shares a bar, 40 bars a session.
    assert float(adv[300].mean()) == pytest.approx(1.05e6 * 40, rel=0.02)
    # A session's realized volatility from 5 bps bar returns: 5e-4 * sqrt(40).
    assert float(vol[300].mean()) == pytest.approx(5e-4 * math.sqrt(40), rel=0.2)


def test_no_volume_cap_fills_a_zero_volume_bar_in_every_kernel(flat_market):
    """With ``max_participation`` 0 a zero-volume fill bar is no limit (the frictionless rule)."""
    quiet = dataclasses.replace(
        flat_market, volume=torch.zeros_like(flat_market.volume), expected_volume=None
    )
    params = dataclasses.replace(PARAMS, max_participation=0.0)
    state, _ = trading.reset(quiet, params, 1, start=0)
    action = torch.tensor([[0.5, 0.0]])
    eager = trading.step(quiet, params, state, action)
    assert float(eager.info["shares_traded"][0, 0]) > 4000
    if native.compiler() is not None:
        fast = trading.step(quiet, params, state, action, fast=True)
        assert step_kernel(quiet, params, state, True) == "native"
        torch.testing.assert_close(
            fast.info["shares_traded"], eager.info["shares_traded"], rtol=1e-5, atol=1e-3
        )


def _fills(market, params, state, action) -> dict[str, torch.Tensor]:
    """Each kernel's shares traded in one step from ``state``."""
    outs = {"eager": trading.step(market, params, state, action).info["shares_traded"]}
    outs["backtest"] = backtest_step(
        market, params, state, action, asset_prices(market, params)
    ).shares_traded
    if native.compiler() is not None and params.precision == "float32":
        assert step_kernel(market, params, state, True) == "native"
        outs["native"] = trading.step(market, params, state, action, fast=True).info["shares_traded"]
    return outs


@pytest.mark.parametrize("mode", ["weights", "shares"])
def test_the_fill_bars_own_volume_changes_no_fill(mode):
    """The volume cap of an order sent at bar t is known at t: a fill bar's volume set to 0 or to
    1000x (the market's liquidity recomputed from it) changes no fill of that step, in any kernel."""
    market = toy_market(num_steps=400, num_assets=3, num_features=2, bars_per_session=40, seed=3)
    # A cap that binds: 1e-4 of ~1e6 shares a bar is ~100 shares, less than a $1M book's orders.
    params = EnvParams(
        action_mode=mode, decision_interval=5, episode_len=50, max_participation=1e-4, max_shares=400.0
    )
    state, _ = trading.reset(market, params, 4, torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    capped = 0
    for _ in range(12):
        action = torch.rand(4, 3, generator=gen) * (2 if mode == "shares" else 0.6) - (
            1 if mode == "shares" else 0.1
        )
        base = _fills(market, params, state, action)
        expected = market.expected_volume.index_select(0, state.t)
        capped += int((base["eager"].abs() >= params.max_participation * expected * (1 - 1e-4) - 1).sum())
        for factor in (0.0, 1000.0):
            volume = market.volume.clone()
            volume[state.t + 1] *= factor  # every env's fill bar
            changed = dataclasses.replace(
                market, volume=volume, daily_vol=None, adv=None, expected_volume=None
            )
            assert torch.equal(changed.expected_volume.index_select(0, state.t), expected)
            for name, traded in _fills(changed, params, state, action).items():
                torch.testing.assert_close(traded, base[name], rtol=0, atol=0, msg=name)
        state = trading.step(market, params, state, action).state
    assert capped > 0  # the cap bound somewhere, so the test could have seen a change


def test_expected_volume_is_the_median_of_the_same_minute_in_earlier_sessions():
    """Checked against a plain loop on uneven sessions (a short one lacks the later positions)."""
    sid = torch.tensor([0] * 3 + [1] * 4 + [2] * 4 + [3] * 2 + [4] * 4)
    vol = torch.rand(len(sid), 2, generator=torch.Generator().manual_seed(0)) * 100
    got = expected_volume(vol, sid, sessions=2)
    n = len(sid)
    pos = [0 if i == 0 or sid[i] != sid[i - 1] else None for i in range(n)]
    for i in range(n):
        pos[i] = 0 if pos[i] == 0 else pos[i - 1] + 1
    for t in range(n):
        for a in range(2):
            earlier = []
            if t + 1 < n:
                here, at = int(sid[t + 1]), pos[t + 1]
                sessions = sorted({int(sid[i]) for i in range(n) if int(sid[i]) < here and pos[i] == at})[-2:]
                earlier = sorted(
                    float(vol[i, a]) for i in range(n) if int(sid[i]) in sessions and pos[i] == at
                )
            want = earlier[(len(earlier) - 1) // 2] if earlier else float(vol[: t + 1, a].mean())
            assert float(got[t, a]) == pytest.approx(want, rel=1e-5), (t, a)


def test_expected_volume_median_is_nanmedian_bit_for_bit():
    """The median of the lags (NumPy's sort on the CPU) is the value torch.nanmedian picks, NaN
    volumes, ties and windows cut short by a run's start included."""
    gen = torch.Generator().manual_seed(4)
    group = torch.repeat_interleave(torch.arange(9), torch.randint(1, 30, (9,), generator=gen))
    for trial in range(8):
        values = torch.randint(0, 5, (len(group), 3), generator=gen).float() * 10
        values[torch.rand(values.shape, generator=gen) < 0.2 * (trial % 2)] = math.nan
        for lags in (1, 2, 5, 20):
            got = liquidity._median_of_previous(values, group, lags)
            for i in range(len(group)):
                earlier = [j for j in range(max(0, i - lags), i) if group[j] == group[i]][::-1]
                want = values[earlier].nanmedian(0).values if earlier else torch.full((3,), math.nan)
                assert torch.equal(got[i].isnan(), want.isnan()), (trial, lags, i)
                assert torch.equal(got[i].nan_to_num(-1.0), want.nan_to_num(-1.0)), (trial, lags, i)
    windows = torch.randint(0, 4, (5, 60, 7), generator=gen).float()
    windows[torch.rand(windows.shape, generator=gen) < 0.4] = math.nan
    got, want = liquidity._lower_median(windows), windows.nanmedian(-1).values
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(-1.0), want.nan_to_num(-1.0))


def _two_slices(market, params, action) -> dict[str, float]:
    """Each kernel's cash after two decisions asking for ``action``."""
    state, _ = trading.reset(market, params, 1, start=0)
    prices = asset_prices(market, params)
    eager = trading.step(market, params, trading.step(market, params, state, action).state, action)
    backtest = backtest_step(market, params, state, action, prices).state
    backtest = backtest_step(market, params, backtest, action, prices).state
    ref = ReferenceEnv(market, params, 0, int(state.rng[0]))
    ref.step(action[0].tolist())
    ref.step(action[0].tolist())
    outs = {"eager": float(eager.state.cash[0]), "backtest": float(backtest.cash[0]), "reference": ref.cash}
    if native.compiler() is not None and params.precision == "float32":
        fast = trading.step(market, params, state, action, fast=True)
        outs["native"] = float(trading.step(market, params, fast.state, action, fast=True).state.cash[0])
    return outs


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_two_same_direction_slices_pay_the_impact_of_their_sum(flat_market, precision):
    """Two decisions each buying the 25-share cap: with no decay they pay the square-root law on 50
    shares (the order), with full decay each pays it on its own 25 (two separate orders)."""
    action = torch.tensor([[1.0, 0.0]])
    half = (PARAMS.slippage_bps + PARAMS.spread_bps) / 1e4
    coef_px = PARAMS.impact_coef * DAILY_VOL / math.sqrt(ADV) * PRICE  # $ per share**1.5
    for decay, impact in ((0.0, coef_px * 50**1.5), (1.0, 2 * coef_px * 25**1.5)):
        params = dataclasses.replace(PARAMS, broker="alpaca", impact_decay=decay, precision=precision)
        cash = CASH - 50 * PRICE * (1 + half) - impact
        # $3.54 on the 50-share order against $1.25 + $1.25 on two 25-share ones: sqrt(2) times more.
        assert impact == pytest.approx(3.5355 if decay == 0 else 2.5, abs=1e-4)
        for name, got in _two_slices(flat_market, params, action).items():
            assert got == pytest.approx(cash, abs=1e-3), (decay, name)
    # The default decay (an hour's half-life on one-minute bars) remembers most of a slice 2 bars on.
    params = dataclasses.replace(PARAMS, broker="alpaca")
    assert 0.97 < params.impact_memory < 0.98
