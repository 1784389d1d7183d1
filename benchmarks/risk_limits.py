"""Risk limits vs what PPO learns: the planted-signal market with ``max_weight`` / ``turnover_penalty``.

    python benchmarks/risk_limits.py [--steps 300000] [--seeds 0,1,2] [--signal 1.0] [--json]

The planted-signal synthetic market (20 tickers, 40 sessions, PPO on the train window,
deterministic backtest on the validation window with 0.2% costs vs equal-weight buy-and-hold), once
per risk-limit setting and seed. Prints per setting: the mean validation excess log return over
buy-and-hold, costs paid (fraction of capital), the largest position weight held at a mark, and the
mean number of names above 5%. docs/env.md quotes it to justify the defaults.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from agents.ppo import PPOArgs, train
from backtests import engine
from data.loader import synthetic_market
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

SETTINGS = {
    "max_weight=1.0": {},
    "max_weight=0.25": {"max_weight": 0.25},
    "max_weight=0.1": {"max_weight": 0.1},
    "turnover_penalty=0.1": {"turnover_penalty": 0.1},
    "max_weight=0.25,tp=0.1": {"max_weight": 0.25, "turnover_penalty": 0.1},
}
ARGS = {"learning_rate": 3e-3, "gamma": 0.9, "gae_lambda": 0.9, "num_steps": 32, "rebalance_rate": 0.2}


def run(setting: dict, seed: int, steps: int, signal: float) -> dict[str, float]:
    splits = synthetic_market(num_tickers=20, num_sessions=40, seed=seed, signal=signal)
    params = EnvParams(decision_interval=15, episode_len=64, reward_scale=100.0, **setting)
    env = TradingVecEnv(splits.train, params, num_envs=64, seed=seed)
    policy = train(PPOArgs(seed=seed, total_steps=steps, **ARGS), env).policy
    with torch.no_grad():
        result = engine.run_backtest(splits.valid, params, {"p": policy}, baselines=("buy_and_hold",))
    col, bh = result.index("p"), result.index("buy_and_hold")
    final = result.equity[-1].double()
    w = result.weights[:, col]
    return {
        "excess_log_return": float(torch.log(final[col] / final[bh])),
        "costs": float(result.costs[:, col].sum()) / result.initial_value,
        "max_weight_held": float(w.max()),
        "names_above_5pct": float((w > 0.05).sum(1).float().mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300_000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--signal", type=float, default=1.0)
    ap.add_argument("--settings", default="all", help="names separated by ; (default: all)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in a.seeds.split(",")]
    names = list(SETTINGS) if a.settings == "all" else a.settings.split(";")
    out = {}
    for name in names:
        t0 = time.perf_counter()
        rows = [run(SETTINGS[name], seed, a.steps, a.signal) for seed in seeds]
        mean = {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}
        out[name] = {"mean": mean, "per_seed": rows, "seconds": time.perf_counter() - t0}
        if not a.json:
            per = " ".join(f"{r['excess_log_return']:+.3f}" for r in rows)
            print(
                f"{name:24s} excess {mean['excess_log_return']:+.3f} ({per})  costs {mean['costs']:.3f}  "
                f"max w {mean['max_weight_held']:.2f}  names>5% {mean['names_above_5pct']:.1f}  "
                f"[{out[name]['seconds']:.0f} s]",
                flush=True,
            )
    if a.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
