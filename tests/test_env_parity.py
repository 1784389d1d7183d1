"""Parity: the batched env matches the plain-Python reference env, per env, step by step."""

from __future__ import annotations

import pytest
import torch

from data.toy import toy_market, with_gaps
from envs import trading
from envs.execution import FRICTIONLESS
from envs.reference import ReferenceEnv
from envs.trading import EnvParams

RTOL = 1e-4
# Absolute floors for quantities that can be ~0 (cash after a full buy, a tiny rebalance).
# "float64": rounding only. "float32" (the default, see envs.trading): per-asset quantities are
# float32, so a share count of ~2500 carries ~2e-4 shares of rounding: $1 on a $1M book, and 1/100
# share at ~$100 prices.
TOLERANCES = {
    # precision: (dollar atol, share atol, return atol)
    "float64": (1e-6, 1e-9, 1e-12),
    "float32": (1.0, 1e-2, 1e-6),
}
OBS_ATOL = 1e-6
# The differential Sharpe ratio divides return deviations by a small running volatility, so the
# ~1e-8 return differences that float32 holdings cause (a slightly different portfolio) come out
# at up to 2e-2 relative for |reward| > 0.1 and 2.3e-4 absolute below (measured over CASES with
# Alpaca's fees; 4.4e-2 in case 5 without any fee: the smaller the fees, the smaller the returns and
# the variance they are divided by, while the value agrees to a cent); "float64" keeps it within RTOL.
DSR_FLOAT32_RTOL, DSR_FLOAT32_ATOL = 5e-2, 1e-3


def _close(batched: float, reference: float, atol: float, rtol: float = RTOL) -> bool:
    return abs(batched - reference) <= atol + rtol * abs(reference)


def _random_actions(gen: torch.Generator, mode: str, num_envs: int, num_assets: int) -> torch.Tensor:
    if mode == "weights":
        # Negative entries (clipped) and rows summing above 1 (rescaled) on purpose.
        return torch.rand(num_envs, num_assets, generator=gen) * 0.8 - 0.1
    return torch.rand(num_envs, num_assets, generator=gen) * 3.0 - 1.5


# The execution model off: the frictionless fill (slippage and commission only).
OFF = FRICTIONLESS

CASES = [
    # (seed, action_mode, reward, extra params)
    (0, "weights", "log_return", OFF),
    (1, "weights", "return", {**OFF, "drawdown_penalty": 0.5, "reward_scale": 100.0}),
    (2, "weights", "diff_sharpe", {**OFF, "sharpe_eta": 0.05}),
    (3, "shares", "log_return", {**OFF, "max_shares": 4000.0}),  # buys exceed cash: scaled and floored
    (4, "shares", "return", {**OFF, "max_shares": 50.0, "slippage_bps": 5.0}),
    (5, "shares", "diff_sharpe", {**OFF, "max_shares": 3000.0, "drawdown_penalty": 0.1}),
    (
        6,
        "weights",
        "return",
        {**OFF, "bust_frac": 0.998, "cost_rate": 0.01, "broker": "flat"},
    ),  # terminations happen
    (7, "weights", "log_return", {**OFF, "episode_len": 1000}),  # runs into the end of the data
    # Risk limits: the weight cap binds (actions up to 0.7 against 0.2), the turnover penalty.
    (8, "weights", "log_return", {**OFF, "max_weight": 0.2, "turnover_penalty": 0.5}),
    (9, "shares", "return", {**OFF, "max_shares": 3000.0, "max_weight": 0.15, "turnover_penalty": 0.1}),
    # Untradable bars (data.toy.with_gaps: filled bars, a late joiner, a leaver sold when it goes).
    (10, "weights", "log_return", {**OFF, "gaps": True}),
    (11, "shares", "return", {**OFF, "gaps": True, "max_shares": 3000.0, "max_weight": 0.5}),
    # The execution model, one term at a time, then together (toy bars trade ~1e6 shares at ~$100).
    (12, "weights", "log_return", {**OFF, "spread_bps": 5.0}),
    (13, "weights", "return", {**OFF, "max_participation": 5e-4}),  # the volume cap binds
    (14, "weights", "log_return", {**OFF, "impact_coef": 50.0}),  # ~10 bps on a $300k order
    (15, "shares", "return", {**OFF, "max_shares": 100.0, "min_order_notional": 5000.0}),  # dust dropped
    (16, "weights", "log_return", {**OFF, "min_order_notional": 20_000.0}),
    # Buys capped at 2000 shares, then scaled for cash (initial_cash 2e5) and floored.
    (
        17,
        "shares",
        "log_return",
        {"max_shares": 4000.0, "max_participation": 2e-3, "impact_coef": 20.0, "initial_cash": 2e5},
    ),
    (18, "weights", "diff_sharpe", {}),  # the defaults
    (19, "weights", "log_return", {"gaps": True, "max_participation": 3e-4}),  # EXIT is not capped
    (20, "shares", "return", {"gaps": True, "max_shares": 3000.0, "max_participation": 2e-3}),
]


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize(("seed", "mode", "reward", "extra"), CASES)
def test_batched_matches_reference(seed, mode, reward, extra, precision):
    market = toy_market(num_steps=160, num_assets=4, num_features=3, bars_per_session=40, seed=seed)
    extra = dict(extra)
    if extra.pop("gaps", False):
        market = with_gaps(market, 0.3, seed)
    kwargs = {"decision_interval": 3, "episode_len": 9, **extra}
    params = EnvParams(action_mode=mode, reward=reward, precision=precision, **kwargs)
    dollar_atol, share_atol, return_atol = TOLERANCES[precision]
    reward_rtol = RTOL
    if (precision, reward) == ("float32", "diff_sharpe"):
        reward_rtol, return_atol = DSR_FLOAT32_RTOL, DSR_FLOAT32_ATOL
    num_envs = 5
    gen = torch.Generator().manual_seed(100 + seed)
    state, obs = trading.reset(market, params, num_envs, gen)
    refs = [ReferenceEnv(market, params, int(state.t[i]), int(state.rng[i])) for i in range(num_envs)]
    for i, ref in enumerate(refs):
        assert torch.allclose(
            obs[i].double(), torch.tensor(ref.observation(), dtype=torch.float64), atol=1e-6
        )

    dones = terminations = 0
    for _ in range(80):
        action = _random_actions(gen, mode, num_envs, market.num_assets)
        state, obs, rew, term, trunc, info = trading.step(market, params, state, action)
        for i, ref in enumerate(refs):
            r_obs, r_rew, r_term, r_trunc, r_info = ref.step(action[i].tolist())
            where = f"env {i} bar {r_info['bar_t']}"
            assert int(info["bar_t"][i]) == r_info["bar_t"], where
            assert bool(term[i]) == r_term and bool(trunc[i]) == r_trunc, where
            # A return is relative to a $1M book: $1 of slack is 1e-6 of return (times the scale).
            r_atol = return_atol * params.reward_scale
            assert _close(float(rew[i]), r_rew, r_atol, reward_rtol), (where, float(rew[i]), r_rew)
            assert _close(float(info["value"][i]), r_info["value"], dollar_atol), where
            assert _close(float(info["cost"][i]), r_info["cost"], dollar_atol), where
            for a in range(market.num_assets):
                assert _close(float(info["shares_traded"][i, a]), r_info["shares_traded"][a], share_atol), (
                    where
                )
            # State after (possibly) resetting.
            assert int(state.t[i]) == ref.t == r_info["t"], where
            assert _close(float(state.cash[i]), ref.cash, dollar_atol), (
                where,
                float(state.cash[i]),
                ref.cash,
            )
            assert _close(float(state.value[i]), ref.value, dollar_atol), where
            for a in range(market.num_assets):
                assert _close(float(state.shares[i, a]), ref.shares[a], share_atol), where
            assert torch.allclose(
                obs[i].double(), torch.tensor(r_obs, dtype=torch.float64), rtol=RTOL, atol=OBS_ATOL
            )
            assert torch.allclose(
                info["final_obs"][i].double(),
                torch.tensor(r_info["final_obs"], dtype=torch.float64),
                rtol=RTOL,
                atol=1e-6,
            )
            dones += r_term or r_trunc
            terminations += r_term
    assert dones > 0  # every case exercises autoreset
    if "bust_frac" in extra:
        assert terminations > 0
