"""The direct learner (agents.direct): a pod trained by the gradient of its portfolio's net return,
saved as the standard policy, ranked on the tournament's leaderboard, and a known answer: on a planted
market it scores above the linear baseline on the validation window, on the control it does not."""

from __future__ import annotations

import pytest
import torch
from helpers import ppo_market
from test_tournament_run import run_tournament

from agents import direct
from agents.policy import Policy
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import score_policy
from agents.tournament.settings import TournamentArgs
from backtests import engine
from backtests.linear import fit_linear
from data.errors import ConfigError
from data.loader import synthetic_market
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

ENV = {"decision_interval": 5, "episode_len": 16, "num_envs": 8}
AGENT = {"hidden": 8, "embed": 4, "horizon": 8, "batch_paths": 8, "holdout_every": 2, "norm_updates": 2}


def test_the_simulated_step_is_the_env_step_for_a_frictionless_fill():
    """Net returns of the differentiable simulation equal the env's own for the same weights (costs
    that scale with the traded weight; no impact, no volume cap)."""
    market = ppo_market()
    params = EnvParams(decision_interval=5, impact_coef=0.0, max_participation=0.0, min_order_notional=0.0)
    policy = direct.train(
        direct.DirectArgs(
            total_steps=64, horizon=4, batch_paths=4, **{k: AGENT[k] for k in ("hidden", "embed")}
        ),
        TradingVecEnv(market, params, num_envs=1, seed=0),
    ).policy
    decisions = direct.decisions_of(market, 5)
    with torch.no_grad():
        net, _ = direct.simulate(policy, decisions, torch.tensor([0]), 20, params)
    result = engine.run_backtest(market.slice(0, 21 * 5 + 1), params, {"pod": policy}, baselines=())
    assert torch.allclose(net[0].double(), result.returns[:20, 0], atol=2e-5)


def test_direct_pods_train_warm_start_and_save_the_standard_policy(tmp_path):
    market = ppo_market()
    train, valid, _test = market.split_sessions(0.6, 0.2)
    args = TournamentArgs(
        pods=1,
        leaderboard_size=2,
        p_fresh=0.0,
        round_steps=256,
        budget_steps=768,
        workers=0,
        seed=0,
        algo="direct",
    )
    result = run_tournament(tmp_path / "direct", train, valid, args=args, env=ENV, agent=AGENT)
    pods = read_pods(result.run_dir)
    assert [p["status"] != "failed" for p in pods] == [True, True, True]
    assert all(p["algo"] == "direct" for p in pods) and pods[2]["parent_id"] is not None
    assert all(p["score"] is not None for p in pods)
    champion = Policy.load(result.run_dir / "champion")  # what backtests, export and paper load
    assert champion.meta.algo == "direct" and champion.meta.action_mode == "weights"
    run = engine.run_backtest(valid, EnvParams(decision_interval=5), {"champion": champion})
    assert torch.isfinite(run.equity).all()


def test_the_population_backend_refuses_direct_pods():
    with pytest.raises(ConfigError, match="PPO pods only"):
        TournamentArgs(backend="population", algo="direct")


def test_bad_direct_args_are_one_line_errors():
    with pytest.raises(ConfigError, match="holdout_frac"):
        direct.DirectArgs(holdout_frac=1.0)
    with pytest.raises(ConfigError, match="objective"):
        direct.DirectArgs(objective="return")  # type: ignore[arg-type]


# The known answer: 12 tickers x 30 sessions (15 / 7 / 8), seed 0, a flat 20 bp commission, 60k env-steps.
# It holds where costs are high enough that the cost-blind linear baseline's churn costs it: at the
# broker profile's near-zero fees the linear baseline's validation Sharpe is above the learner's on this
# market (docs/agents.md, "Direct policy search").
KNOWN = {"num_tickers": 12, "num_sessions": 30, "seed": 0, "train_frac": 0.5, "valid_frac": 0.25}
BUDGET = direct.DirectArgs(
    total_steps=60_000,
    seed=0,
    rebalance_rate=1.0,
    learning_rate=0.01,
    batch_paths=32,
    horizon=16,
    weight_decay=0.0,
)


def _validation_sharpes(signal: float) -> tuple[float, float, float]:
    """``(direct, linear, equal weight)``: validation Sharpe ratios on the market of ``signal``."""
    splits = synthetic_market(signal=signal, **KNOWN)
    params = EnvParams(broker="flat", cost_rate=0.002)
    policy = direct.train(BUDGET, TradingVecEnv(splits.train, params, num_envs=1, seed=0)).policy
    score, metrics, _ = score_policy(policy, splits.valid, params)
    linear = fit_linear(splits.train, splits.valid, params.decision_interval)
    result = engine.run_backtest(splits.valid, params, linear=linear, baselines=("equal_weight", "linear"))
    sharpe = result.summary()["sharpe_ratio"]
    return (
        metrics["sharpe_ratio"],
        float(sharpe[result.index("linear")]),
        float(sharpe[result.index("equal_weight")]),
    )


def test_known_answer_planted_beats_the_linear_baseline_and_the_control_does_not():
    learner, linear, _ = _validation_sharpes(1.0)
    assert learner > linear
    learner, linear, equal = _validation_sharpes(0.0)
    assert learner < linear and learner < equal
