"""Learning is real: PPO finds the planted signal of the synthetic market, and finds nothing without it.

The synthetic market (``data.synthetic``) plants a cross-sectional momentum: an asset's idiosyncratic
return over the last session predicts its drift over the next hundreds of bars (feature ``ret_390``).
PPO trains on the TRAIN window only; its deterministic policy is then backtested on the VALIDATION
window (``backtests.scoring`` through ``agents.validation``, 0.2% costs) against equal-weight
buy-and-hold. With the signal it must beat buy-and-hold over 3 seeds; with ``signal=0`` (the
control: same pipeline, nothing to learn) it must not claim an edge.

Settings fit a CPU budget: 20 tickers, 40 sessions (valid = 8 sessions), the product's default 256
envs, 1M env-steps per seed (~9 s a run on one core since the issue-21 speed-ups), partial
rebalancing 0.2. One short validation window is a noisy judge (even the causal top-20% momentum
oracle gets +0.12..+0.30 there, and a random concentrated policy can gain or lose ~0.1), so the claim
is made on the 3-seed mean, with at least 2 of 3 seeds ahead, and the control must stay below.

Why 1M env-steps at 256 envs (it was 300k at 64 envs): training outcomes are chaotic in the numerics,
and at the old budget PPO found the signal on about half of the seeds, so the 3-seed verdict was a
coin flip under any float-level change. Measured over seeds 0-15 at the old settings: mean excess
+0.024 (9/16 ahead) before the speed-ups, +0.006 (7/16) after, the same within noise. At 1M x 256
(seeds 0-7, after): signal +0.172 / +0.212 / +0.111 / +0.303 / +0.066 / +0.220 / +0.291 / +0.050
(mean +0.178, 8/8 ahead); signal 0: mean -0.050, 0/8 ahead; the code before the speed-ups at these
settings: signal mean +0.135, 7/8 ahead. Re-measured 2026-11-26 (``_valid_excess(seed, 1.0)``, VM):
seeds 0-7 -0.079 / +0.376 / +0.147 / +0.330 / +0.177 / +0.108 / +0.233 / -0.004 (mean +0.161, 6/8
ahead), seeds 8-15 +0.120 / -0.062 / -0.097 / -0.021 / +0.027 / -0.030 / +0.013 / -0.143 (mean
-0.024, 3/8): the edge is found on about half of the seeds at this budget, so the 3-seed verdict
still turns on which seeds run: drawing the minibatch orders from sorted uniform keys instead of
``randperm`` (the same distribution, other numbers) gives seeds 0-15 a mean of +0.017 (8/16 ahead)
and fails this test on seeds 0-2.
"""

from __future__ import annotations

import pytest

from agents.ppo import PPOArgs, train
from agents.validation import validation_scores
from data.loader import synthetic_market
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

SEEDS = (0, 1, 2)
MARGIN = 0.03  # mean log-return edge over buy-and-hold on the validation window (8 sessions)
# A short horizon and a high learning rate: the edge pays out within tens of decisions, and the
# small init of the actor's read-out needs large steps to move the logits.
ARGS = {
    "total_steps": 1_000_000,
    "learning_rate": 3e-3,
    "gamma": 0.9,
    "gae_lambda": 0.9,
    "num_steps": 32,
    "rebalance_rate": 0.2,
}


pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def _valid_excess(seed: int, signal: float) -> dict[str, float]:
    splits = synthetic_market(num_tickers=20, num_sessions=40, seed=seed, signal=signal)
    params = EnvParams(decision_interval=15, episode_len=64, reward_scale=100.0)
    env = TradingVecEnv(splits.train, params, num_envs=256, seed=seed)
    result = train(PPOArgs(seed=seed, **ARGS), env)
    return validation_scores(result.policy, splits.valid, params)


@pytest.mark.slow
def test_ppo_beats_buy_and_hold_on_validation_with_signal_and_not_without():
    with_signal = [_valid_excess(seed, 1.0)["excess_log_return"] for seed in SEEDS]
    control = [_valid_excess(seed, 0.0)["excess_log_return"] for seed in SEEDS]
    mean_signal, mean_control = sum(with_signal) / 3, sum(control) / 3
    assert mean_signal > MARGIN, with_signal
    assert sum(x > 0 for x in with_signal) >= 2, with_signal
    assert mean_control < MARGIN, control  # no edge claimed without a signal
    assert mean_control < mean_signal - 0.05, (with_signal, control)
