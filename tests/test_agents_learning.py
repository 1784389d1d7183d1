"""PPO learns a known answer: where one feature says which assets drift up, the trained policy beats
buy-and-hold on bars it never saw; where that feature says nothing, it does not.

The market (:func:`regime_market`): 8 assets in 4 pairs. Each pair is in one of two regimes, asset
``k`` drifting up and asset ``k + 4`` down or the reverse (``DRIFT`` a bar, 0.3% a decision), and
switches regime with probability ``SWITCH_PROB`` a bar (about 13 decisions apart); on top, Gaussian
noise of ``VOL`` a bar. Feature 0 of an asset is the sign of its regime at the bar (what is known at
the decision bar: the drift goes on after it with probability 0.995 a bar), features 1-3 are noise.
The control market has the same prices, but its feature 0 follows an independent regime chain:
nothing the policy sees predicts the returns. Volume is the toy market's megacap liquidity, so the
execution model's participation cap and impact hardly bind; costs and spread are paid in full.

PPO (the product's defaults, partial rebalancing 0.5, ``NUM_ENVS`` envs, ``TOTAL_STEPS`` env-steps)
trains on the first ``TRAIN_SESSIONS`` sessions; its deterministic policy is then backtested on the
next ``VALID_SESSIONS`` (``agents.validation``: the backtest engine, the env's default costs and
execution) against equal-weight buy-and-hold. The check, per seed: with the signal the excess log
return is above ``MARGIN``, and on the control it is below it. What the rule "hold the assets whose
feature 0 says up" earns on those windows, and how many of seeds 0-15 pass the check
(``benchmarks/learning_seeds.py``): docs/benchmarks.md, "Training".
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agents.ppo import PPOArgs, train
from agents.validation import validation_scores
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.calendar import MINUTES_PER_SESSION
from data.market import MarketData
from data.toy import toy_market
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

SEEDS = (0, 1)
NUM_ASSETS = 8  # in pairs: asset k and asset k + NUM_ASSETS // 2 drift opposite ways
NUM_FEATURES = 4  # feature 0 shows the regime, the others are noise
TRAIN_SESSIONS, VALID_SESSIONS = 8, 16
DRIFT = 2e-4  # log return a bar in the regime's direction
VOL = 5e-4  # noise a bar
SWITCH_PROB = 1 / 200  # a pair's regime flips with this probability each bar
PARAMS = EnvParams(decision_interval=15, episode_len=32, reward_scale=100.0)
NUM_ENVS = 256
TOTAL_STEPS = 500_000
REBALANCE_RATE = 0.5
MARGIN = 0.20  # excess log return over buy-and-hold on the validation window

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def regime_market(seed: int, informative: bool = True) -> MarketData:
    """The module docstring's market, ``TRAIN_SESSIONS + VALID_SESSIONS`` sessions of minute bars;
    ``informative=False`` gives the control (same prices, feature 0 independent of them)."""
    num_steps = (TRAIN_SESSIONS + VALID_SESSIONS) * MINUTES_PER_SESSION
    gen = torch.Generator().manual_seed(seed)

    def regimes() -> torch.Tensor:  # (T, A) of +-1
        pairs = NUM_ASSETS // 2
        flips = torch.rand(num_steps, pairs, generator=gen) < SWITCH_PROB
        first = torch.where(torch.rand(1, pairs, generator=gen) < 0.5, -1.0, 1.0).double()
        sign = first * (1 - 2 * (torch.cumsum(flips.double(), dim=0) % 2))
        return torch.cat([sign, -sign], dim=1)

    regime = regimes()
    noise = torch.randn(num_steps, NUM_ASSETS, generator=gen, dtype=torch.float64)
    shown = regime if informative else regimes()
    close = 100.0 * torch.exp(torch.cumsum(DRIFT * regime + VOL * noise, dim=0))
    open_ = torch.cat([close[:1], close[:-1]])  # each bar opens at the previous close
    features = torch.randn(num_steps, NUM_ASSETS, NUM_FEATURES, generator=gen)
    features[..., 0] = shown.float()
    calendar = toy_market(num_steps, NUM_ASSETS, NUM_FEATURES, seed=seed)  # timestamps, sessions, volume
    return dataclasses.replace(
        calendar,
        open=open_.float(),
        high=(torch.maximum(open_, close) * 1.0005).float(),
        low=(torch.minimum(open_, close) * 0.9995).float(),
        close=close.float(),
        features=features,
        daily_vol=None,  # recomputed from these prices
        adv=None,
    )


def validation_excess(seed: int, informative: bool) -> float:
    """Train PPO on the train sessions; the deterministic policy's excess log return over buy-and-hold
    on the validation sessions."""
    market = regime_market(seed, informative)
    split = TRAIN_SESSIONS * MINUTES_PER_SESSION
    train_window, valid_window = market.slice(0, split), market.slice(split, market.num_steps)
    env = TradingVecEnv(train_window, PARAMS, num_envs=NUM_ENVS, seed=seed)
    result = train(PPOArgs(seed=seed, total_steps=TOTAL_STEPS, rebalance_rate=REBALANCE_RATE), env)
    return validation_scores(result.policy, valid_window, PARAMS, annualization=TRADING_DAYS_PER_YEAR)[
        "excess_log_return"
    ]


def learns(seed: int) -> tuple[bool, float, float]:
    """The check of one seed: (passed, excess with the signal, excess on the control)."""
    with_signal, control = validation_excess(seed, True), validation_excess(seed, False)
    return with_signal > MARGIN and control < MARGIN, with_signal, control


def test_the_control_shows_nothing_the_returns_follow():
    """The two markets differ only in feature 0, which tracks the drift in one and not the other."""
    signal, control = regime_market(0, True), regime_market(0, False)
    assert torch.equal(signal.close, control.close) and torch.equal(signal.open, control.open)
    next_move = torch.sign(signal.close[15:] - signal.close[:-15])  # the next decision's move
    agreement = [(m.features[:-15, :, 0] == next_move).float().mean().item() for m in (signal, control)]
    assert agreement[0] > 0.8 and abs(agreement[1] - 0.5) < 0.1, agreement


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_beats_buy_and_hold_with_the_signal_and_not_without(seed):
    passed, with_signal, control = learns(seed)
    assert passed, {"with_signal": with_signal, "control": control, "margin": MARGIN}
