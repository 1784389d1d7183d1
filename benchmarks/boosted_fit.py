"""The boosted baseline's cost on the demo's market: its fit, and its column of the test window's
backtest beside the ridge's.

The market is the demo's default preset (``app.workflows.demo.PRESETS["default"]``): 100 synthetic
tickers x 243 sessions of minute bars, split 72 / 45 / 126, planted signal 0.42, seed 0, decisions
every 15 bars. Timed once each, in one process (market building not timed):

- ``fit_s``: ``backtests.boosted.fit_boosted`` on the train window, early-stopped on the validation
  window (the default ``BoostedSettings``: at most 200 trees, 15 leaves, learning rate 0.05, one
  thread), with the trees kept and the information coefficients; ``linear_fit_s`` the ridge's;
- ``backtest_s``: ``engine.run_backtest`` of the test window with only the ``boosted`` column, and
  ``linear_backtest_s`` with only the ``linear`` one (one model call per decision: 3,251 decisions).

    .venv/bin/python benchmarks/boosted_fit.py
    .venv/bin/python benchmarks/boosted_fit.py --tickers 12 --sessions 20   # a quick check
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from backtests import engine
from backtests.boosted import fit_boosted
from backtests.linear import fit_linear
from data.loader import synthetic_market
from envs.trading import EnvParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=243)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--signal", type=float, default=0.42)
    args = parser.parse_args()
    torch.set_num_threads(1)
    splits = synthetic_market(
        num_tickers=args.tickers,
        num_sessions=args.sessions,
        seed=args.seed,
        signal=args.signal,
        train_frac=72 / 243,
        valid_frac=45 / 243,
    )
    params = EnvParams()
    interval = params.decision_interval
    start = time.perf_counter()
    boosted = fit_boosted(splits.train, splits.valid, interval)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    linear = fit_linear(splits.train, splits.valid, interval)
    linear_fit_s = time.perf_counter() - start
    timings = {}
    for name, model in (("boosted", boosted), ("linear", linear)):
        start = time.perf_counter()
        result = engine.run_backtest(splits.test, params, baselines=(name,), **{name: model})
        timings[name] = time.perf_counter() - start
        sharpe = float(result.summary()["sharpe_ratio"][0])
        timings[f"{name}_sharpe"] = sharpe
    out = {
        "tickers": args.tickers,
        "sessions": args.sessions,
        "test_decisions": engine.num_decisions(splits.test.num_steps, interval),
        "fit_s": round(fit_s, 2),
        "trees": boosted.num_trees,
        "boosted_valid_ic": round(boosted.valid_ic, 4),
        "boosted_train_ic": round(boosted.train_ic, 4),
        "linear_fit_s": round(linear_fit_s, 2),
        "linear_valid_ic": round(linear.valid_ic, 4),
        "backtest_s": round(timings["boosted"], 2),
        "linear_backtest_s": round(timings["linear"], 2),
        "boosted_test_sharpe": round(timings["boosted_sharpe"], 2),
        "linear_test_sharpe": round(timings["linear_sharpe"], 2),
        "machine": f"{platform.machine()} {torch.get_num_threads()} torch thread(s)",
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
