"""A year of walk-forward at scale: synthetic 1-minute bars x 100 tickers, monthly folds.

The out-of-sample span is ``--test-sessions`` (252: a year) cut into folds of ``--step`` sessions (21:
monthly, 12 folds); before it the first fold's train, validation, gate and embargo windows, so the
market loaded once holds ``train + valid + gate + embargo + test`` sessions (358 by default: about
13.9M minute bars at 100 tickers). Each fold runs the product's tournament for ``--fold-minutes`` (or ``--fold-steps``),
warm-started from the incumbent, the nightly gate decides, and the policy in charge trades the fold's
test window of one continuous account (``podracer walkforward``, docs/walkforward.md).

Prints the loaded market, the time per fold (features, tournament, gate, account, report), the total
wall time, the peak RSS of this process and of its largest worker, and the stitched account's figures
against buy-and-hold and equal weight.

    .venv/bin/python benchmarks/walkforward_scale.py                   # the year: 12 folds x 4 min, 2-core CPU
    .venv/bin/python benchmarks/walkforward_scale.py --device cuda --fold-minutes 0.6
    .venv/bin/python benchmarks/walkforward_scale.py --load-only       # the market's memory alone
    .venv/bin/python benchmarks/walkforward_scale.py --quick           # smoke run (about a minute)

``--out FILE`` also writes the figures as JSON; ``--home DIR`` keeps the run (default: a temp folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402

from app.config import parse_config  # noqa: E402
from app.walkforward.display import folds_table  # noqa: E402
from app.walkforward.plan import plan_folds  # noqa: E402
from app.walkforward.run import bars_only, peak_rss_mb, run_walkforward  # noqa: E402
from data.fold_market import fold_market  # noqa: E402
from data.loader import load_market  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tickers", type=int, default=100)
    p.add_argument("--test-sessions", type=int, default=252, help="the out-of-sample span (252: a year)")
    p.add_argument("--step", type=int, default=21, help="retrain cadence in sessions (21: monthly)")
    p.add_argument("--train", type=int, default=63, help="train window in sessions")
    p.add_argument("--valid", type=int, default=21, help="validation window in sessions")
    p.add_argument(
        "--gate", type=int, default=21, help="the gate's window in sessions (0: the validation window)"
    )
    p.add_argument("--embargo", type=int, default=1)
    p.add_argument("--window", choices=("rolling", "expanding"), default="rolling")
    p.add_argument("--fold-minutes", type=float, default=4.0, help="wall minutes of each fold's tournament")
    p.add_argument("--fold-steps", type=int, default=None, help="env-steps of each fold's tournament instead")
    p.add_argument("--signal", type=float, default=0.5, help="planted signal (the demo's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--workers", type=int, default=cores, help="local tournament workers")
    p.add_argument(
        "--pods",
        type=int,
        default=None,
        help="tournament.pods (local: pods in flight [workers]; population: its size [chosen])",
    )
    p.add_argument(
        "--envs-per-pod", type=int, default=0, help="population backend: envs per pod (0: chosen) [num-envs]"
    )
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--home", type=Path, default=None, help="keep the run here (default: a temp folder)")
    p.add_argument(
        "--load-only",
        action="store_true",
        help="only load the market and build the first fold's features: their peak RSS (no training)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.tickers, args.test_sessions, args.step, args.train, args.valid, args.gate = 4, 6, 3, 6, 10, 0
        args.fold_minutes, args.fold_steps, args.num_envs, args.workers = None, 256, 8, 0
    return args


def config(args: argparse.Namespace):
    sessions = args.train + args.valid + args.gate + args.embargo + args.test_sessions
    budget = (
        {"budget_steps": args.fold_steps, "budget_minutes": None}
        if args.fold_steps
        else {"budget_steps": None, "budget_minutes": args.fold_minutes}
    )
    raw = {
        "data": {
            "num_tickers": args.tickers,
            "num_sessions": sessions,
            "signal": args.signal,
            "seed": args.seed,
        },
        "env": {"num_envs": args.num_envs},
        "agent": {"device": args.device, "seed": args.seed},
        "tournament": {
            "workers": args.workers,
            "pods": args.pods,
            "seed": args.seed,
            **({"envs_per_pod": args.envs_per_pod} if args.envs_per_pod else {}),
        },
        "walkforward": {
            "window": args.window,
            "train_sessions": args.train,
            "valid_sessions": args.valid,
            "gate_sessions": args.gate,
            "embargo_sessions": args.embargo,
            "step_sessions": args.step,
            **budget,
        },
    }
    if args.quick:
        raw["env"].update(episode_len=16)
        raw["agent"].update(hidden=8, embed=4, num_steps=8, update_epochs=1, num_minibatches=1)
        raw["tournament"].update(round_steps=128, leaderboard_size=2)
        raw["walkforward"]["tearsheet"] = False
    return parse_config(raw, source="benchmark"), sessions


def load_only(cfg, sessions: int) -> dict:
    """The market loaded as the walk-forward loads it, and the first fold's features: peak RSS."""
    t0 = time.perf_counter()
    full = bars_only(load_market(cfg.data, device=cfg.agent.device).full)
    loaded = peak_rss_mb()["self"]
    plan = plan_folds(full, cfg.walkforward)[0]
    fold_market(full, plan.bars["train"][0], plan.bars["test"][1], fit=plan.bars["train"])
    figures = {"sessions_loaded": sessions, "bars": full.num_steps, "tickers": full.num_assets,
               "load_peak_rss_mb": loaded, "fold_peak_rss_mb": peak_rss_mb()["self"],
               "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    print(
        f"loaded {full.num_steps:,} bars x {full.num_assets} tickers: peak RSS {loaded:,.0f} MB; "
        f"with the first fold's features {figures['fold_peak_rss_mb']:,.0f} MB ({figures['seconds']} s)"
    )
    return figures


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    cfg, sessions = config(args)
    if args.load_only:
        figures = load_only(cfg, sessions)
        if args.out is not None:
            args.out.write_text(json.dumps(figures, indent=2))
        return figures
    home = args.home or Path(tempfile.mkdtemp(prefix="podracer-wf-"))
    print(
        f"walk-forward: {args.tickers} tickers x {sessions} sessions of 1-minute bars loaded once "
        f"({args.test_sessions} out of sample, folds of {args.step}), device {args.device}, "
        f"{cfg.tournament.workers} workers, per fold "
        + (f"{args.fold_steps:,} env-steps" if args.fold_steps else f"{args.fold_minutes} min"),
        flush=True,
    )
    t0 = time.perf_counter()
    try:
        result = run_walkforward(cfg, home, run="bench")
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    wall = time.perf_counter() - t0
    Console(width=160).print(folds_table(result.folds))
    s = {name: figures.model_dump() for name, figures in result.metrics.strategies.items()}
    per_fold = [r.seconds for r in result.folds]
    figures = {
        "tickers": args.tickers,
        "sessions_loaded": sessions,
        "test_sessions": result.metrics.num_sessions,
        "folds": len(result.folds),
        "wall_s": round(wall, 1),
        "fold_s": [f["total"] for f in per_fold],
        "fold_stage_s": {k: round(sum(f.get(k, 0.0) for f in per_fold), 1) for k in per_fold[0]},
        "peak_rss_mb": result.peak_rss_mb,
        "promotions": sum(1 for r in result.folds if r.promoted),
        "stitched": {
            name: {
                k: s[name].get(k)
                for k in ("cum_returns_final", "annual_return", "sharpe_ratio", "max_drawdown")
            }
            for name in ("champion", "buy_and_hold", "equal_weight")
        },
        "verdict": result.metrics.verdict,
    }
    print(f"total wall time {wall:,.0f} s ({wall / 60:.1f} min); time per fold {figures['fold_s']} s")
    print(f"time by stage over all folds: {figures['fold_stage_s']} s")
    print(
        f"peak RSS {result.peak_rss_mb['self']:,.0f} MB (this process), "
        f"{result.peak_rss_mb['children']:,.0f} MB (largest worker)"
    )
    for name, row in figures["stitched"].items():
        print(
            f"  {name:13s} return {100 * row['cum_returns_final']:+8.2f}%  Sharpe {row['sharpe_ratio'] or float('nan'):6.2f}"
            f"  max drawdown {100 * row['max_drawdown']:6.2f}%"
        )
    print(f"  {figures['promotions']} promotions in {figures['folds']} folds; {figures['verdict']}")
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
