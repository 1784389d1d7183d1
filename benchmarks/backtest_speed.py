"""Backtest speed: a champion-sized policy + buy-and-hold + cash over a year of minute bars.

Target: 1 year of minute bars (252 sessions x 390 = 98,280 bars) x 100 assets, champion +
2 baselines in <= 20 s on a 2-core CPU. The default decides every 15 bars (the config default,
~6.5k decisions); ``--decision-interval 1`` is the worst case, one policy call and env step per bar
(~98k). The baselines cost one env step each; the time is the champion's loop. Run:

    .venv/bin/python benchmarks/backtest_speed.py                             # the target
    .venv/bin/python benchmarks/backtest_speed.py --decision-interval 1       # every bar
    .venv/bin/python benchmarks/backtest_speed.py --sessions 5 --tickers 10   # a quick check

The market comes from ``data.loader.synthetic_market`` (``--source toy`` uses ``data.toy`` instead,
which builds faster). The champion is an untrained ``agents.policy.Policy`` of the default size (its
compute per call is what matters, not its weights). Market building is not timed.

``--compile`` is ``run_backtest``'s: ``auto`` (the default; compiles the champion's decision loop
from 50k decisions on, so the every-bar year compiles and the 15-bar one does not), ``on`` or
``off``. When the run compiles, the figures are: ``seconds_first`` (the first run in the process,
compile included: with inductor's on-disk cache warm or cold, as it happens to be), ``seconds``
(a second run, compiled code reused: the steady state) and, unless ``--no-baseline``,
``eager_seconds`` (the same run with ``compile="off"``, in the same process) and their ratio.

``--capacity`` also times the capacity curve every report now carries (``backtests.capacity``: the
champion, buy-and-hold and equal weight at each of the five account sizes, one batched pass) on the
same market, as ``capacity_seconds`` and its ratio to the report's backtest (what it adds to
``podracer backtest`` and to the nightly's scoring step). A nightly test window is a month:

    .venv/bin/python benchmarks/backtest_speed.py --sessions 21 --capacity
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from agents.networks import NetworkConfig
from agents.policy import Policy, PolicyMeta
from backtests.capacity import run_capacity
from backtests.engine import COMPILE_MIN_DECISIONS, num_decisions, run_backtest
from backtests.metrics import TRADING_DAYS_PER_YEAR, to_floats
from data.loader import synthetic_market
from data.toy import toy_market
from envs.trading import EnvParams


def _market(source: str, sessions: int, tickers: int, seed: int):
    if source == "toy":
        return toy_market(sessions * 390, tickers, 16, seed=seed)
    # The whole year is the window; the split only decides where normalization is fitted.
    return synthetic_market(num_tickers=tickers, num_sessions=sessions, seed=seed).full


def _champion(market, device: str):
    config = NetworkConfig(num_assets=market.num_assets, num_features=market.num_features)
    meta = PolicyMeta(tickers=tuple(market.tickers), feature_names=tuple(market.feature_names))
    return Policy(config, meta, device=device).eval()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=252)
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument(
        "--decision-interval", type=int, default=15, help="bars per decision (config default 15)"
    )
    parser.add_argument("--source", choices=("synthetic", "toy"), default="synthetic")
    parser.add_argument("--device", default="cpu")
    # One observation per call: intra-op threads only add synchronization to such small ops
    # (`podracer backtest` runs with 1 thread too).
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", choices=("auto", "on", "off"), default="auto")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the eager run (compile='off') used for the ratio"
    )
    parser.add_argument("--capacity", action="store_true", help="also time the capacity curve's pass")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    market = _market(args.source, args.sessions, args.tickers, args.seed).to(args.device)
    build_s = time.perf_counter() - t0
    policy = _champion(market, args.device)
    params = EnvParams(decision_interval=args.decision_interval)

    # Warm-up on a short slice (first-call allocations, lazy imports), not timed.
    run_backtest(
        market.slice(0, min(market.num_steps, 50 * args.decision_interval + 1)),
        params,
        {"champion": policy},
        baselines=("buy_and_hold", "cash"),
        device=args.device,
    )

    def timed(mode: str):
        t0 = time.perf_counter()
        result = run_backtest(
            market,
            params,
            {"champion": policy},
            baselines=("buy_and_hold", "cash"),
            device=args.device,
            compile=mode,
        )
        return result, time.perf_counter() - t0

    decisions = num_decisions(market.num_steps, args.decision_interval)
    compiles = args.compile == "on" or (args.compile == "auto" and decisions >= COMPILE_MIN_DECISIONS)
    result, elapsed = timed(args.compile)
    extra: dict = {"compiled": compiles}
    if compiles:
        extra["seconds_first"] = round(elapsed, 3)
        result, elapsed = timed(args.compile)
        if not args.no_baseline:
            eager, eager_s = timed("off")
            extra["eager_seconds"] = round(eager_s, 3)
            extra["eager_over_compiled"] = round(eager_s / elapsed, 2)
            diff = (eager.equity - result.equity).abs() / eager.equity.abs()
            extra["max_equity_rel_diff_vs_eager"] = float(diff.max())
    if args.capacity:
        t0 = time.perf_counter()
        run_capacity(market, params, {"champion": policy}, device=args.device)
        extra["capacity_seconds"] = round(time.perf_counter() - t0, 3)
        extra["capacity_over_backtest"] = round(extra["capacity_seconds"] / elapsed, 2)
    summary = result.summary(annualization=TRADING_DAYS_PER_YEAR)
    out = {
        "bars": market.num_steps,
        "assets": market.num_assets,
        "features": market.num_features,
        "decisions": result.num_steps,
        "strategies": list(result.names),
        "seconds": round(elapsed, 3),
        **extra,
        "decisions_per_s": round(result.num_steps / elapsed, 1),
        "market_build_s": round(build_s, 2),
        "device": args.device,
        "threads": args.threads,
        "compile": args.compile,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "target_s": 20.0,
        "sharpe": dict(zip(result.names, to_floats(summary["sharpe_ratio"]), strict=True)),
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
