"""Calibration of the verdict: how often it says "edge significant out of sample" with no edge to find,
and how often it finds a planted one.

Small tournaments on many seeded synthetic markets (``data.synthetic``), through the product's own
workflows (``app.workflows.training.train_tournament``, then ``app.workflows.backtest.backtest_run``
on the test window, which writes the verdict of ``backtests.verdict``):

- **null markets** (``signal 0``: nothing to learn): the rate of "significant" must be at most the
  test's level, 5%; it is printed with its 95% Clopper-Pearson interval
  (``scipy.stats.binomtest(...).proportion_ci``), and the check passes when the interval's lower
  bound is below 5% (the rate is not shown to exceed the level);
- **planted-signal markets** at a few signal strengths: the power, the fraction found significant.

Each market has its own seed (data, agent, tournament and bootstrap) and its own home, so its looks
ledger holds its look alone: different markets never deflate each other (their market identities
differ too).

    .venv/bin/python benchmarks/verdict_calibration.py                     # 40 null + 3 x 20 planted
    .venv/bin/python benchmarks/verdict_calibration.py --quick              # smoke run (a minute)
    .venv/bin/python benchmarks/verdict_calibration.py --null 100 --power-markets 0 --json

Prints a table; ``--json`` prints the figures (every market's row and the rates) as one JSON document.
Exits 1 when the null check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

from app.config import Config  # noqa: E402
from app.workflows.backtest import backtest_run  # noqa: E402
from app.workflows.training import train_tournament  # noqa: E402
from backtests.metrics_model import ExcessFigures, OosTest  # noqa: E402

LEVEL = 0.05


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--null", type=int, default=40, help="null markets (signal 0)")
    p.add_argument("--power-markets", type=int, default=20, help="markets per planted signal level")
    p.add_argument("--signals", type=float, nargs="+", default=[0.25, 0.5, 1.0], help="planted levels")
    p.add_argument("--tickers", type=int, default=10)
    p.add_argument("--sessions", type=int, default=60, help="split 35/25/40%%: 21 / 15 / 24 sessions")
    # Many short rounds: the tournament's exploit-and-mutate finds the planted signal within ~100k
    # env-steps (docs/benchmarks.md, Tournament), where a few long rounds do not.
    p.add_argument("--pods", type=int, default=4)
    p.add_argument("--round-steps", type=int, default=4_096)
    p.add_argument("--budget-steps", type=int, default=98_304, help="env-steps per tournament")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--first-seed", type=int, default=1000, help="market i uses seed first_seed + i")
    p.add_argument("--workers", type=int, default=0, help="local worker processes (0 = inline)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.null, args.power_markets, args.signals = 2, 1, [1.0]
        args.tickers, args.pods, args.round_steps, args.budget_steps, args.num_envs = 6, 2, 2_048, 4_096, 16
    return args


def _config(args: argparse.Namespace, seed: int, signal: float) -> Config:
    return Config().with_updates(
        data={
            "source": "synthetic",
            "num_tickers": args.tickers,
            "num_sessions": args.sessions,
            "train_frac": 0.35,
            "valid_frac": 0.25,
            "seed": seed,
            "signal": signal,
        },
        env={"num_envs": args.num_envs},
        agent={"seed": seed},
        tournament={
            "pods": args.pods,
            "leaderboard_size": 2 * args.pods,
            "round_steps": args.round_steps,
            "budget_steps": args.budget_steps,
            "budget_minutes": None,
            "workers": args.workers,
            "seed": seed,
        },
    )


def run_market(args: argparse.Namespace, seed: int, signal: float) -> dict:
    """One market: a tournament in a home of its own, the champion's backtest, its verdict."""
    home = Path(tempfile.mkdtemp(prefix="podracer-calibration-"))
    start = time.perf_counter()
    try:
        run = f"s{seed}"
        train_tournament(_config(args, seed, signal), home, run=run)
        doc = backtest_run(run, home=home, window="test", tearsheet=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    oos = doc.oos_test or OosTest()
    excess = oos.excess.get(oos.benchmark or "") or ExcessFigures()
    return {
        "seed": seed,
        "signal": signal,
        "outcome": doc.verdict_outcome,
        "looks": oos.looks,
        "test_sessions": doc.num_sessions,
        "test_sharpe": doc.strategies["champion"].sharpe_ratio,
        "buy_and_hold_test_sharpe": doc.strategies["buy_and_hold"].sharpe_ratio,
        "psr": oos.psr_after_looks,
        "excess_p": excess.p_value_after_looks,
        "verdict": doc.verdict,
        "wall_s": round(time.perf_counter() - start, 2),
    }


def rate(rows: list[dict]) -> dict:
    """The share of "significant" and its 95% Clopper-Pearson interval."""
    n = len(rows)
    k = sum(r["outcome"] == "significant" for r in rows)
    if n == 0:
        return {"markets": 0, "significant": 0, "rate": None, "ci_low": None, "ci_high": None}
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    measurable = sum(r["outcome"] != "not measurable" for r in rows)
    return {
        "markets": n,
        "significant": k,
        "not_measurable": n - measurable,
        "rate": k / n,
        "ci_low": float(ci.low),
        "ci_high": float(ci.high),
    }


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    plan = [(0.0, args.null)] * bool(args.null) + [
        (s, args.power_markets) for s in args.signals if args.power_markets
    ]
    rows: list[dict] = []
    seed = args.first_seed
    for signal, count in plan:
        for _ in range(count):
            row = run_market(args, seed, signal)
            seed += 1
            rows.append(row)
            if not args.json:
                print(
                    f"signal {signal:g} seed {row['seed']}: {row['outcome']}; test Sharpe "
                    f"{_fmt(row['test_sharpe'], '+.2f')} (b&h {_fmt(row['buy_and_hold_test_sharpe'], '+.2f')}), "
                    f"PSR {_fmt(row['psr'], '.3f')}, p {_fmt(row['excess_p'], '.3g')} [{row['wall_s']:.0f} s]",
                    flush=True,
                )
    rates = {f"signal_{s:g}": rate([r for r in rows if r["signal"] == s]) for s, _ in plan}
    null = rates.get("signal_0")
    passed = None if null is None else null["ci_low"] < LEVEL  # None: no null market was run
    figures = {
        "settings": vars(args),
        "level": LEVEL,
        "rates": rates,
        "null_check": {"passed": passed, "rule": f"95% interval of the null rate starts below {LEVEL:g}"},
        "runs": rows,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"\n{'signal':<8}{'markets':>8}{'significant':>13}{'rate':>7}{'95% interval':>17}")
        for s, _ in plan:
            r = rates[f"signal_{s:g}"]
            interval = f"{_fmt(r['ci_low'], '.3f')}..{_fmt(r['ci_high'], '.3f')}"
            print(f"{s:<8g}{r['markets']:>8}{r['significant']:>13}{_fmt(r['rate'], '.3f'):>7}{interval:>17}")
        verdict = {True: "passed", False: "FAILED", None: "not run (no null market)"}[passed]
        print(f"null check ({figures['null_check']['rule']}): {verdict}; rows at signal > 0 are the power")
    if passed is False:
        sys.exit(1)
    return figures


if __name__ == "__main__":
    main()
