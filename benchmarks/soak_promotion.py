"""The soak's last nights, for real: the nightly retrain (tournament, joint backtest, gate, export)
on two small synthetic markets, one with a planted signal and one of noise, each in a fresh home.

The planted challenger must be promoted (its edge significant out of sample: the fixed-window gate's
rule, ``[gate] rule = "window"``) and the noise one must not. The size is the smallest seen to find the planted
signal (``signal`` 1.3, :data:`PLANTED_SIGNAL`) on a quiet machine in well under a minute: 5 tickers,
90 sessions (train 31, validation 14, a held-out test window of 45: the verdict needs 40), one PPO pod
of 600k env-steps at 256 envs, the frictionless fill of the walk-forward's known answers
(commission and slippage on). The figures: docs/benchmarks.md, "Operations soak".

    python benchmarks/soak_promotion.py            # the two retrains alone
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config import Config, parse_config
from app.nightly.pipeline import run_retrain
from envs.execution import FRICTIONLESS

PLANTED_SIGNAL = 1.3  # data.synthetic: phi = 0.7 * signal (below 1.4)
STEPS = 600_000  # env-steps of the one pod (300k did not find the signal at this size)


def promotion_config(signal: float, seed: int) -> Config:
    """The config of one real retrain on a small synthetic market of strength ``signal``."""
    return parse_config(
        {
            "data": {
                "source": "synthetic",
                "num_tickers": 5,
                "num_sessions": 90,
                "seed": seed,
                "signal": signal,
                "train_frac": 0.35,
                "valid_frac": 0.15,
            },
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
                "pods": 1,
                "leaderboard_size": 2,
                "round_steps": STEPS,
                "budget_steps": STEPS,
                "workers": 0,
                "seed": seed,
            },
            # the fixed-window gate (one night per home: the shadow book needs sessions after the
            # challenger's creation): a first challenger promoted only if significant
            "nightly": {"tearsheet": False},
            "gate": {"rule": "window"},
        },
        source="soak promotion",
    )


def real_promotion(folder: Path, seed: int = 0) -> dict[str, Any]:
    """The two real retrains (in ``folder/planted`` and ``folder/noise``); raises AssertionError
    unless the planted challenger is promoted and the noise one is not. Returns their figures."""
    out: dict[str, Any] = {}
    for name, signal in (("planted", PLANTED_SIGNAL), ("noise", 0.0)):
        started = time.perf_counter()
        outcome = run_retrain(promotion_config(signal, seed), folder / name)
        out[name] = {
            "signal": signal,
            "verdict": outcome.verdict,
            "edge": outcome.challenger_edge,
            "wall_s": round(time.perf_counter() - started, 1),
        }
    assert out["planted"]["verdict"] == "promoted", f"the planted edge was not promoted: {out['planted']}"
    assert out["noise"]["verdict"] == "rejected", f"noise was promoted: {out['noise']}"
    return out


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="podracer-promotion-") as tmp:
        print(json.dumps(real_promotion(Path(tmp)), indent=2))
