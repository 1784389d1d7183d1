"""Known answers of the walk-forward: on the synthetic market with the planted signal its stitched
out-of-sample account beats buy-and-hold and equal weight; with ``signal 0`` (the control: the same
pipeline, nothing to learn) it beats neither.

The real pipeline at a small size: 10 tickers, 51 sessions (train 20, validation 10, embargo 1, two
folds of 10 test sessions), each fold's tournament 1M env-steps at 256 envs (what PPO needs to find
the planted signal at this size: docs/benchmarks.md, "Training") as two pods over four rounds of
250k, warm-started from the incumbent, the nightly gate with its defaults, one thread. The rounds
matter: each pod draws its hyper-parameters from the search space, and one pod of one 1M-step round
finds the 520-bar planted edge only where its draw suits it (2 of seeds 0-3); exploit-and-mutate
between rounds replaces a draw that does not learn, as the product's tournaments do. About 35 s per
walk-forward on a quiet 2-core machine: two of them make this test slow on purpose, it is the
product's end-to-end claim.

One seed runs by default; ``PODRACER_KNOWN_ANSWER_SEEDS=0,1,2,3`` runs more (the margins seen over
those seeds: docs/benchmarks.md, "Walk-forward").
"""

from __future__ import annotations

import os

import pytest

from app.config import parse_config
from app.walkforward.run import run_walkforward
from envs.execution import FRICTIONLESS

SEEDS = tuple(int(s) for s in os.environ.get("PODRACER_KNOWN_ANSWER_SEEDS", "1").split(","))
MARGIN = 0.05  # cumulative return over the stitched span (20 sessions) above the better baseline

pytestmark = pytest.mark.usefixtures("one_thread")


def known_answer_config(seed: int, signal: float):
    return parse_config(
        {
            "data": {
                "source": "synthetic",
                "num_tickers": 10,
                "num_sessions": 51,
                "seed": seed,
                "signal": signal,
            },
            # The frictionless fill (commission and slippage on): the question is whether the pipeline
            # finds the planted signal, not what it nets at $1M in the synthetic names' thin volume.
            "env": {
                "decision_interval": 15,
                "episode_len": 64,
                "num_envs": 256,
                "reward_scale": 100.0,
                **FRICTIONLESS,
            },
            "agent": {
                "seed": seed,
                "num_steps": 32,
                "learning_rate": 3e-3,
                "gamma": 0.9,
                "gae_lambda": 0.9,
                "rebalance_rate": 0.2,
            },
            "tournament": {
                "pods": 2,
                "leaderboard_size": 4,
                "round_steps": 250_000,
                "budget_steps": 1_000_000,
                "workers": 0,
                "seed": seed,
            },
            # The question here is whether the learner finds the planted signal through the whole
            # pipeline. The gate reads 10 validation sessions, under the verdict's minimum window, so
            # with the default gate no champion could ever take charge: each fold's challenger takes
            # charge ("always"); the default's own rule is pinned in tests/test_walkforward_run.py.
            "walkforward": {
                "gate": "always",
                "train_sessions": 20,
                "valid_sessions": 10,
                "gate_sessions": 0,  # the gate on the validation window: 21 more sessions per fold cost time
                "step_sessions": 10,
                "tearsheet": False,
            },
        },
        source="known answer",
    )


def _stitched(tmp_path, seed: int, signal: float) -> dict[str, float]:
    result = run_walkforward(known_answer_config(seed, signal), tmp_path / f"s{seed}-{signal}", run="ka")
    assert len(result.folds) == 2 and result.metrics.num_sessions == 20
    strategies = result.metrics.strategies
    out = {name: strategies[name].cum_returns_final for name in ("champion", "buy_and_hold", "equal_weight")}
    print(f"seed {seed} signal {signal}: {out}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_the_stitched_account_beats_the_baselines_with_the_signal_and_not_without(tmp_path, seed):
    planted = _stitched(tmp_path, seed, 1.0)
    assert planted["champion"] > max(planted["buy_and_hold"], planted["equal_weight"]) + MARGIN, planted
    # Without a signal the account shows no edge of the planted one's size over the better baseline
    # (at the broker profile's near-zero fees a null account can end a hair above both: -8.34% against
    # -8.39% and -9.04% was seen).
    control = _stitched(tmp_path, seed, 0.0)
    assert control["champion"] < max(control["buy_and_hold"], control["equal_weight"]) + MARGIN, control
