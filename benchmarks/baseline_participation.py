"""The baselines' fills against the volume cap on the demo's market: with the baselines under the
run's execution rules (the cap included) and with the cap lifted for them, as it was before.

The market is the demo's default preset (100 synthetic tickers x 243 sessions of minute bars, split
72 / 45 / 126, planted signal 0.42, seed 0), the test window backtested with the default ``EnvParams``
($1M, a decision every 15 bars, ``max_participation`` 0.025) and every baseline (the linear and
boosted ones fitted on the train and validation windows). Per baseline column: the largest fill's
share of its bar's expected volume, the share of fills above the cap, the decisions buy-and-hold
took to build its book, the test Sharpe and the costs paid. One run each (market building not
timed).

    .venv/bin/python benchmarks/baseline_participation.py
    .venv/bin/python benchmarks/baseline_participation.py --tickers 12 --sessions 20   # a quick check
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import torch

from backtests import engine
from backtests.boosted import fit_boosted
from backtests.linear import fit_linear
from data.loader import synthetic_market
from envs.trading import EnvParams


def column_figures(result: engine.BacktestResult, name: str, cap: float) -> dict[str, float]:
    col = result.index(name)
    shares = result.shares[:, col].abs().to(torch.float64)
    volume = result.fill_volume.to(torch.float64)
    filled = shares > 0
    part = shares[filled] / volume[filled].clamp(min=1e-300)
    traded = filled.any(dim=-1)
    summary = result.summary()
    return {
        "max_participation": round(float(part.max()), 4) if part.numel() else 0.0,
        "above_cap": round(float((part > cap * (1 + 1e-6)).to(torch.float64).mean()), 4)
        if part.numel()
        else 0.0,
        "decisions_trading": int(traded.sum()),
        "sharpe": round(float(summary["sharpe_ratio"][col]), 2),
        "costs_paid": round(float(summary["costs_paid"][col]), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=243)
    args = parser.parse_args()
    torch.set_num_threads(1)
    splits = synthetic_market(
        num_tickers=args.tickers,
        num_sessions=args.sessions,
        seed=0,
        signal=0.42,
        train_frac=72 / 243,
        valid_frac=45 / 243,
    )
    params = EnvParams()
    models = {
        "linear": fit_linear(splits.train, splits.valid, params.decision_interval),
        "boosted": fit_boosted(splits.train, splits.valid, params.decision_interval),
    }
    cap = params.max_participation
    rows = {}
    for label, run_params in (
        ("capped", params),
        ("cap lifted", dataclasses.replace(params, max_participation=0.0)),
    ):
        result = engine.run_backtest(splits.test, run_params, **models)
        rows[label] = {name: column_figures(result, name, cap) for name in result.names if name != "cash"}
    print(json.dumps({"tickers": args.tickers, "sessions": args.sessions, "cap": cap, **rows}))


if __name__ == "__main__":
    main()
