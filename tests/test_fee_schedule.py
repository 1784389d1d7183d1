"""The regulatory fees by date (``envs.fees``): each fill pays the SEC Section 31 rate and FINRA's TAF
in force on its session date, each fee of each order rounded up to the cent at Alpaca, in every
kernel of the env step (eager, native C, backtest step, the plain-Python reference); and the config
override of the schedules."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from app.config import parse_config, to_env_params
from data.errors import ConfigError
from data.toy import toy_market
from envs import fees, trading
from envs.backtest_step import asset_prices, backtest_step
from envs.execution import FRICTIONLESS
from envs.kernels import native
from envs.reference import ReferenceEnv
from envs.trading import EnvParams

PRICE = 100.0
# Shares mode, one asset: an action of +1 buys `max_shares`, -1 sells them; no slippage, no execution
# model, so each sale's proceeds are exactly shares * $100.
PARAMS = EnvParams(
    initial_cash=1e6,
    decision_interval=2,
    episode_len=10,
    slippage_bps=0.0,
    action_mode="shares",
    **FRICTIONLESS,
)


def _cents_up(x: float) -> float:
    """``x`` $ rounded up to the cent, by hand (``round`` drops the float noise of ``x * 100``)."""
    return math.ceil(round(x * 100, 6)) / 100


def _market_on(day: str):
    """A one-asset market at a flat $100 whose two sessions start on ``day``."""
    base = toy_market(num_steps=40, num_assets=1, num_features=2, bars_per_session=20, seed=0)
    flat = torch.full_like(base.close, PRICE)
    shift = np.datetime64(f"{day}T14:30", "ns") - base.timestamps[0]
    return dataclasses.replace(
        base,
        open=flat,
        high=flat.clone(),
        low=flat.clone(),
        close=flat.clone(),
        timestamps=base.timestamps + shift,
    )


def _sale_costs(day: str, shares: float, params: EnvParams = PARAMS) -> dict[str, float]:
    """``{kernel: fees}`` of buying ``shares`` at the first decision and selling them at the next, both
    filled on ``day``'s session; the buy pays nothing at Alpaca (checked)."""
    market = _market_on(day)
    params = dataclasses.replace(params, max_shares=shares)
    buy, sell = torch.ones(1, 1), -torch.ones(1, 1)
    state, _ = trading.reset(market, params, 1, start=0)
    ref = ReferenceEnv(market, params, 0, int(state.rng[0]))
    *_, ref_buy = ref.step([1.0])
    bought = trading.step(market, params, state, buy)
    assert float(bought.info["cost"][0]) == 0.0 and ref_buy["cost"] == 0.0
    assert float(bought.state.shares[0, 0]) == shares
    cash = float(bought.state.cash[0])
    sold = trading.step(market, params, bought.state, sell)
    out = {"eager": float(sold.info["cost"][0])}
    bt = backtest_step(market, params, bought.state, sell, asset_prices(market, params))
    out["backtest"] = cash + shares * PRICE - float(bt.state.cash[0])
    *_, ref_sell = ref.step([-1.0])
    out["reference"] = ref_sell["cost"]
    if native.compiler() is not None:
        fast = trading.step(market, params, bought.state, sell, fast=True)
        out["native"] = float(fast.info["cost"][0])
    assert float(sold.state.cash[0]) == pytest.approx(cash + shares * PRICE - out["eager"], abs=1e-6)
    return out


def test_a_sell_on_2025_06_02_pays_no_sec_fee_and_one_on_2024_06_03_pays_27_80_per_million_rounded_up():
    shares = 1234.0  # $123,400 of proceeds; TAF 1,234 * $0.000166 = $0.204844 -> $0.21
    taf = _cents_up(shares * 0.000166)
    assert taf == 0.21
    sec_2024 = _cents_up(27.80 / 1e6 * shares * PRICE)  # $3.43052 -> $3.44
    assert sec_2024 == 3.44
    for kernel, cost in _sale_costs("2024-06-03", shares).items():
        assert cost == pytest.approx(sec_2024 + taf, abs=1e-6), kernel
    for kernel, cost in _sale_costs("2025-06-02", shares).items():
        assert cost == pytest.approx(taf, abs=1e-6), kernel  # $0.00 per million from 2025-05-14


def test_a_small_sale_pays_at_least_a_cent_of_taf():
    # 10 shares: TAF $0.00166 and, in 2024, SEC fee $0.0278, each rounded up to the cent.
    for kernel, cost in _sale_costs("2025-06-02", 10.0).items():
        assert cost == pytest.approx(0.01, abs=1e-9), kernel
    for kernel, cost in _sale_costs("2024-06-03", 10.0).items():
        assert cost == pytest.approx(0.03 + 0.01, abs=1e-9), kernel
    # Without the rounding (another broker's practice) the same sale pays the fees as computed.
    unrounded = dataclasses.replace(PARAMS, round_fees=False)
    for kernel, cost in _sale_costs("2024-06-03", 10.0, unrounded).items():
        assert cost == pytest.approx(27.8e-6 * 1_000 + 10 * 0.000166, rel=1e-6), kernel


def test_an_amount_of_whole_cents_is_not_rounded_up_and_the_taf_cap_holds():
    # $1,000,000 of proceeds at $27.80 per million is $27.80 (27.8e-6 is not exact in binary).
    assert fees.round_up_cent(1e6 * 27.8e-6) == 27.80
    got = fees.round_up_cents(torch.tensor([1e6 * 27.8e-6, 0.0, 0.001, 8.30], dtype=torch.float64))
    assert got.tolist() == [27.80, 0.0, 0.01, 8.30]
    # 100,000 shares hit the $8.30 cap per trade.
    for kernel, cost in _sale_costs(
        "2025-06-02", 100_000.0, dataclasses.replace(PARAMS, initial_cash=2e7)
    ).items():
        assert cost == pytest.approx(8.30, abs=1e-6), kernel


def test_the_rates_change_on_their_effective_dates():
    days = np.array(
        ["2023-06-01", "2024-05-21", "2024-05-22", "2025-05-13", "2025-05-14"], dtype="datetime64[D]"
    )
    rates = fees.rates_on(PARAMS, days)
    # Before the first row its rates apply (the history before it is not encoded).
    assert rates[:, 0].tolist() == [27.8e-6, 27.8e-6, 27.8e-6, 27.8e-6, 0.0]
    assert rates[:, 1].tolist() == [0.000166] * 5 and rates[:, 2].tolist() == [8.30] * 5
    # The cost sensitivity's multiple scales every regulatory fee; the flat profile is its commission.
    assert fees.rates_on(dataclasses.replace(PARAMS, fee_scale=2.0), days[:1]).tolist() == [
        [55.6e-6, 0.000332, 16.6]
    ]
    flat = dataclasses.replace(PARAMS, broker="flat", cost_rate=0.001)
    assert fees.rates_on(flat, days[:1]).tolist() == [[0.001, 0.0, 0.0]]


def test_the_fee_table_has_one_row_per_bar_on_the_markets_device():
    market = _market_on("2025-05-13")  # two sessions: 2025-05-13 ($27.80/M) and 2025-05-14 ($0.00)
    table = fees.fee_table(market, PARAMS)
    assert table.shape == (market.num_steps, 3) and table.dtype == torch.float64
    assert table.device == market.device
    assert table[:20, 0].tolist() == [27.8e-6] * 20 and table[20:, 0].tolist() == [0.0] * 20


def test_another_brokers_schedule_from_the_config():
    config = parse_config(
        {
            "env": {
                "sec_fee_schedule": [["2024-01-01", 20e-6], ["2024-07-01", 10e-6]],
                "taf_schedule": [["2024-01-01", 0.0002, 5.0]],
                "round_fees": False,
            }
        }
    )
    params = to_env_params(config.env)
    assert params.sec_fee_schedule == (("2024-01-01", 20e-6), ("2024-07-01", 10e-6))
    assert fees.rates_on_date(params, "2024-07-01") == (10e-6, 0.0002, 5.0)
    for kernel, cost in _sale_costs(
        "2024-06-03", 1234.0, dataclasses.replace(params, **_shares_mode())
    ).items():
        assert cost == pytest.approx(20e-6 * 123_400 + 1234 * 0.0002, rel=1e-6), kernel
    # An old config's one rate for all dates reads as a one-row schedule.
    old = to_env_params(parse_config({"env": {"sec_fee_rate": 5e-6, "taf_max": 7.0}}).env)
    assert old.sec_fee_schedule == (("1970-01-01", 5e-6),) and old.taf_schedule == (
        ("1970-01-01", 0.000166, 7.0),
    )


@pytest.mark.parametrize(
    "schedule, why",
    [
        ([["2024-05-22", 1e-5], ["2024-01-01", 0.0]], "dates must increase"),
        ([["22 May 2024", 1e-5]], "not a YYYY-MM-DD date"),
        ([["2024-05-22", -1e-5]], "finite and >= 0"),
        ([["2024-05-22"]], "sec_fee_schedule.0.1: Field required"),
    ],
)
def test_a_bad_schedule_is_a_one_line_config_error(schedule, why):
    with pytest.raises(ConfigError, match=why):
        parse_config({"env": {"sec_fee_schedule": schedule}})


def _shares_mode() -> dict:
    """The test's trading settings (shares mode, frictionless fills, no slippage) over a config's params."""
    return {
        "initial_cash": PARAMS.initial_cash, "decision_interval": 2, "episode_len": 10, "slippage_bps": 0.0,
        "action_mode": "shares", **FRICTIONLESS,
    }  # fmt: skip
