"""The direct learner's ridge start at the next interval against the next session, on the pilot markets.

For each market (fixed below, before running: the planted daily reversal ``daily_cross_section`` at
daily IC 0.10 on the library features, seeds 970000-970009 only, and the demo's default market, the
``minute_momentum`` shape on the small features), it trains one direct learner per start horizon
(``DirectArgs.start_horizon``: 1, the next interval, today's default; 26, the next session at
15-minute decisions) with the same seed and budget on the train window, fits the linear and boosted
baselines on the train and validation windows as the product does, and backtests each on the test
window through the env (costs on, volume cap on), one strategy a backtest, with the report's
out-of-sample test against buy-and-hold (``benchmarks.power_table.verdict_row``: alpha per day, its
p-value, Sharpe, turnover).

    .venv/bin/python benchmarks/daily_start.py                      # the pilot's markets
    .venv/bin/python benchmarks/daily_start.py --markets planted:970000 demo:0 --tickers 40
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import direct  # noqa: E402
from agents.args import DirectArgs  # noqa: E402
from backtests.boosted import fit_boosted  # noqa: E402
from backtests.linear import fit_linear  # noqa: E402
from benchmarks.power_table import verdict_row  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from envs.params import EnvParams  # noqa: E402
from envs.vec_env import TradingVecEnv  # noqa: E402

#: The pilot, fixed before running: two planted markets and the demo's.
MARKETS = ("planted:970000", "planted:970001", "demo:0")
#: Learner arms ``start_horizon:horizon:rebalance_rate``: today's default, the next-session start.
ARMS = ("1:16:0.2", "26:16:0.2")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markets", nargs="+", default=list(MARKETS), help="kind:seed (planted or demo)")
    p.add_argument("--tickers", type=int, default=40)
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--steps", type=int, default=100_000, help="each learner's env-steps")
    p.add_argument("--arms", nargs="+", default=list(ARMS), help="start_horizon:horizon:rebalance_rate")
    p.add_argument("--out", type=Path, default=None, help="append each market's row (JSON lines)")
    return p.parse_args(argv)


def market_of(kind: str, seed: int, args: argparse.Namespace):
    if kind == "planted":
        extra = {"shape": "daily_cross_section", "target_ic": 0.10, "feature_set": "library"}
    elif kind == "demo":
        extra = {}
    else:
        raise SystemExit(f"error: unknown market kind {kind!r} (planted or demo)")
    return synthetic_market(num_tickers=args.tickers, num_sessions=args.sessions, seed=seed, **extra)


def arm_name(arm: str) -> str:
    """``direct_h1`` for the default arm ``1:16:0.2`` (the rows of the first runs), else the arm's
    settings: ``direct_h26_p52_r0.05``."""
    start_h, horizon, rate = arm.split(":")
    if (horizon, rate) == ("16", "0.2"):
        return f"direct_h{start_h}"
    return f"direct_h{start_h}_p{horizon}_r{rate}"


def run_market(spec: str, args: argparse.Namespace) -> dict:
    kind, seed = spec.split(":")
    start = time.perf_counter()
    splits = market_of(kind, int(seed), args)
    params = EnvParams()
    row: dict = {"market": spec, "tickers": args.tickers, "sessions": args.sessions, "steps": args.steps}
    for arm in args.arms:
        start_h, horizon, rate = arm.split(":")
        learner = DirectArgs(
            seed=int(seed),
            total_steps=args.steps,
            batch_paths=32,
            horizon=int(horizon),
            start_horizon=int(start_h),
            rebalance_rate=float(rate),
        )
        env = TradingVecEnv(splits.train, params, num_envs=1, seed=0)
        policy = direct.train(learner, env).policy
        row[arm_name(arm)] = verdict_row(arm_name(arm), policy, splits.test, params, int(seed))
    interval = params.decision_interval
    row["linear"] = verdict_row(
        "linear", fit_linear(splits.train, splits.valid, interval), splits.test, params, 0
    )
    row["boosted"] = verdict_row(
        "boosted", fit_boosted(splits.train, splits.valid, interval), splits.test, params, 0
    )
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    rows = []
    for spec in args.markets:
        row = run_market(spec, args)
        rows.append(row)
        if args.out is not None:
            with args.out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"{spec}  ({row['wall_s']} s)")
        for name in (*(arm_name(a) for a in args.arms), "linear", "boosted"):
            v = row[name]
            print(
                f"  {name:22s} alpha/day {100 * (v['alpha_per_day'] or 0):+.3f}%  p {v['alpha_p_value']:.3f}  "
                f"Sharpe {v['sharpe']:.2f}  turnover/day {v['turnover']:.2f}  {v['outcome']}"
            )
        sys.stdout.flush()
    return rows


if __name__ == "__main__":
    main()
