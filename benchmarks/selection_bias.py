"""Selection bias of the tournament: validation vs held-out test Sharpe of the selected pod, with the
out-of-sample test and the selection diagnostics the product reports.

On the planted-signal synthetic market (``data.synthetic``) with the signal on and off (``--signal 0``:
nothing to learn, so every apparent edge is selection), for each seed: a small tournament through the
product's own workflows (``app.workflows.training.train_tournament``, then
``app.workflows.backtest.backtest_run`` on the test window), reporting

- the champion's (the best pod's) validation Sharpe and its test Sharpe (daily returns, net of costs,
  annualized), and buy-and-hold's test Sharpe;
- the champion's out-of-sample test on the test window (its PSR after the looks and the p-value of its
  mean daily excess over buy-and-hold), the selection diagnostics on the validation window (Hansen's
  SPA p-value, the validation DSR over the effective trials, the PBO over every pod's daily
  validation returns), and the verdict line the CLI prints.

The same tournament's ensemble (``agents.ensemble``: the mean target weights of the top
``ensemble_size`` pods, scored on validation and counted as one more trial) is backtested on the same
test window too, as the champion of a copy of the run, so both rows share the trials, costs and bars.

    .venv/bin/python benchmarks/selection_bias.py                 # the README figures (a few minutes)
    .venv/bin/python benchmarks/selection_bias.py --quick --json  # smoke run

Prints a table; ``--json`` prints the figures as one JSON document instead.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from app.config import Config  # noqa: E402
from app.runs import RunDir  # noqa: E402
from app.workflows.backtest import backtest_run  # noqa: E402
from app.workflows.training import train_tournament  # noqa: E402
from backtests.metrics_model import MetricsDocument  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tickers", type=int, default=10)
    p.add_argument("--sessions", type=int, default=50, help="split 60/20/20: 10 validation sessions")
    p.add_argument("--pods", type=int, default=4)
    p.add_argument("--round-steps", type=int, default=8_192)
    p.add_argument("--budget-steps", type=int, default=98_304, help="env-steps per tournament")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--signals", type=float, nargs="+", default=[1.0, 0.0])
    p.add_argument("--workers", type=int, default=0, help="local worker processes (0 = inline)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.tickers, args.sessions, args.pods, args.round_steps = 4, 50, 2, 1_024
        args.budget_steps, args.num_envs, args.seeds = 4_096, 16, [0]
    return args


def _config(args: argparse.Namespace, seed: int, signal: float) -> Config:
    return Config().with_updates(
        data={
            "source": "synthetic",
            "num_tickers": args.tickers,
            "num_sessions": args.sessions,
            "seed": seed,
            "signal": signal,
        },
        env={"num_envs": args.num_envs},
        agent={"seed": seed, "num_steps": 32},
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


def run_once(args: argparse.Namespace, seed: int, signal: float, home: Path) -> dict:
    config = _config(args, seed, signal)
    run = f"s{seed}-sig{signal:g}"
    start = time.perf_counter()
    tour = train_tournament(config, home, run=run)
    doc = backtest_run(run, home=home, window="test", tearsheet=False)
    champ, bh = doc.strategies["champion"], doc.strategies["buy_and_hold"]
    # The ensemble as the champion of the same run (a temp home: the copy is the benchmark's own).
    run_dir = RunDir(home, run)
    ensemble = run_dir.info().ensemble
    ens_test = ens_p = None
    if (run_dir.path / "ensemble").is_dir():
        shutil.rmtree(run_dir.champion)
        shutil.copytree(run_dir.path / "ensemble", run_dir.champion)
        ens_doc = backtest_run(run, home=home, window="test", tearsheet=False)
        ens_test, ens_p = ens_doc.strategies["champion"].sharpe_ratio, _excess_p(ens_doc)
    return {
        "seed": seed,
        "signal": signal,
        "pods_tried": tour.pods_tried,
        "valid_sharpe": (tour.champion or {}).get("sharpe_ratio"),
        "test_sharpe": champ.sharpe_ratio,
        "buy_and_hold_test_sharpe": bh.sharpe_ratio,
        "psr": doc.oos_test.psr_after_looks if doc.oos_test else None,
        "excess_p": _excess_p(doc),
        "spa_p": doc.selection.spa_p_value if doc.selection else None,
        "valid_dsr": doc.selection.valid_dsr if doc.selection else None,
        "effective_trials": doc.selection.effective_trials if doc.selection else None,
        "pbo": doc.pbo,
        "pbo_num_splits": doc.pbo_num_splits,
        "verdict": doc.verdict,
        "ensemble_valid_sharpe": ensemble.sharpe_ratio,
        "ensemble_test_sharpe": ens_test,
        "ensemble_excess_p": ens_p,
        "wall_s": time.perf_counter() - start,
    }


def _excess_p(doc: MetricsDocument) -> float | None:
    """The p-value (after the looks) of the champion's mean daily excess over the benchmark."""
    oos = doc.oos_test
    excess = oos.excess.get(oos.benchmark) if oos is not None and oos.benchmark is not None else None
    return excess.p_value_after_looks if excess is not None else None


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def _mean(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else None


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    home = Path(tempfile.mkdtemp(prefix="podracer-selection-"))
    rows = []
    try:
        for signal in args.signals:
            for seed in args.seeds:
                row = run_once(args, seed, signal, home)
                rows.append(row)
                if not args.json:
                    print(
                        f"signal {signal:g} seed {seed}: {row['pods_tried']} pods, valid Sharpe "
                        f"{_fmt(row['valid_sharpe'], '+.2f')} -> test {_fmt(row['test_sharpe'], '+.2f')} "
                        f"(b&h {_fmt(row['buy_and_hold_test_sharpe'], '+.2f')}); PSR {_fmt(row['psr'], '.3f')}, "
                        f"p {_fmt(row['excess_p'], '.3g')}, SPA p {_fmt(row['spa_p'], '.3g')}, "
                        f"PBO {_fmt(row['pbo'], '.2f')}; ensemble valid {_fmt(row['ensemble_valid_sharpe'], '+.2f')} "
                        f"-> test {_fmt(row['ensemble_test_sharpe'], '+.2f')} [{row['wall_s']:.0f} s]",
                        flush=True,
                    )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    summary = {
        f"signal_{signal:g}": {
            key: _mean([r[key] for r in rows if r["signal"] == signal])
            for key in (
                "valid_sharpe",
                "test_sharpe",
                "buy_and_hold_test_sharpe",
                "psr",
                "excess_p",
                "spa_p",
                "valid_dsr",
                "pbo",
                "ensemble_valid_sharpe",
                "ensemble_test_sharpe",
                "ensemble_excess_p",
            )
        }
        for signal in args.signals
    }
    figures = {"settings": {k: v for k, v in vars(args).items()}, "runs": rows, "mean": summary}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"\nmean over seeds {args.seeds} (best pod, then the ensemble of the same tournament):")
        print(
            f"{'signal':<8}{'valid Sharpe':>14}{'test Sharpe':>13}{'b&h test':>10}{'PSR':>7}{'p':>7}"
            f"{'SPA p':>7}{'val. DSR':>9}{'PBO':>6}{'ens. valid':>12}{'ens. test':>11}{'ens. p':>8}"
        )
        for signal in args.signals:
            m = summary[f"signal_{signal:g}"]
            print(
                f"{signal:<8g}{_fmt(m['valid_sharpe'], '.2f'):>14}{_fmt(m['test_sharpe'], '.2f'):>13}"
                f"{_fmt(m['buy_and_hold_test_sharpe'], '.2f'):>10}{_fmt(m['psr'], '.3f'):>7}"
                f"{_fmt(m['excess_p'], '.3f'):>7}{_fmt(m['spa_p'], '.3f'):>7}{_fmt(m['valid_dsr'], '.3f'):>9}"
                f"{_fmt(m['pbo'], '.2f'):>6}{_fmt(m['ensemble_valid_sharpe'], '.2f'):>12}"
                f"{_fmt(m['ensemble_test_sharpe'], '.2f'):>11}{_fmt(m['ensemble_excess_p'], '.3f'):>8}"
            )
    return figures


if __name__ == "__main__":
    main()
