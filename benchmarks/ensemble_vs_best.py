"""Ensemble of the K best pods vs the single best pod, from the SAME tournament (equal budget).

On the planted-signal synthetic market (``data.synthetic``), for each seed one tournament runs
(``app.workflows.training.train_tournament``, which also builds and scores the ensemble of the
board's top ``--k`` pods, ``<run>/ensemble/``). Reported per seed: the validation Sharpe of the best
pod and of the ensemble (what selection saw) and their held-out test Sharpe (daily returns, net of
costs, through ``backtests.engine``), next to equal-weight buy-and-hold.

    .venv/bin/python benchmarks/ensemble_vs_best.py                 # the figures in docs/tournament.md
    .venv/bin/python benchmarks/ensemble_vs_best.py --quick         # smoke run (< 1 min)

Prints a table; ``--out FILE`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agents.ensemble import load_policy  # noqa: E402
from app.config import Config, to_env_params  # noqa: E402
from app.runs import RunDir  # noqa: E402
from app.workflows.training import train_tournament  # noqa: E402
from backtests import engine  # noqa: E402
from data.loader import load_market  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tickers", type=int, default=10)
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--budget-steps", type=int, default=49_152)
    p.add_argument("--round-steps", type=int, default=4_096)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--signal", type=float, default=1.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.tickers, args.sessions, args.budget_steps, args.round_steps, args.seeds = 4, 16, 4096, 1024, [0]
    return args


def one_seed(args: argparse.Namespace, seed: int, home: Path) -> dict[str, float | None]:
    config = Config().with_updates(
        data={
            "num_tickers": args.tickers,
            "num_sessions": args.sessions,
            "seed": seed,
            "signal": args.signal,
        },
        env={"num_envs": 32, "episode_len": 64},
        agent={"num_steps": 16, "seed": seed},
        tournament={
            "pods": max(2, args.workers),
            "leaderboard_size": max(args.k, 4),
            "round_steps": args.round_steps,
            "budget_steps": args.budget_steps,
            "workers": args.workers,
            "seed": seed,
            "ensemble_size": args.k,
        },
    )
    splits = load_market(config.data, home=home)
    result = train_tournament(config, home, run=f"seed{seed}", splits=splits)
    run_dir = home / "runs" / f"seed{seed}"
    record = RunDir(home, f"seed{seed}").info()
    params = to_env_params(config.env)
    policies = {"best": load_policy(run_dir / "champion"), "ensemble": load_policy(run_dir / "ensemble")}
    res = engine.run_backtest(splits.test, params, policies)
    sharpe = res.summary(252)["sharpe_ratio"].reshape(-1)
    col = {name: res.index(name) for name in ("best", "ensemble", "buy_and_hold")}
    return {
        "seed": seed,
        "pods": result.pods_tried,
        "valid_best": result.leaderboard[0]["metrics"].get("sharpe_ratio"),
        "valid_ensemble": record.ensemble.sharpe_ratio,
        "test_best": float(sharpe[col["best"]]),
        "test_ensemble": float(sharpe[col["ensemble"]]),
        "test_buy_and_hold": float(sharpe[col["buy_and_hold"]]),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            rows.append(one_seed(args, seed, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    cols = ["valid_best", "valid_ensemble", "test_best", "test_ensemble", "test_buy_and_hold"]
    print(f"\n{'seed':>4} {'pods':>4} " + " ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print(f"{r['seed']:>4} {r['pods']:>4} " + " ".join(f"{(r[c] or 0.0):>17.2f}" for c in cols))
    means = {c: statistics.fmean(r[c] or 0.0 for r in rows) for c in cols}
    print(f"{'mean':>4} {'':>4} " + " ".join(f"{means[c]:>17.2f}" for c in cols))
    wins = sum(1 for r in rows if r["test_ensemble"] > r["test_best"])
    print(f"ensemble beats best on test in {wins}/{len(rows)} seeds; {time.perf_counter() - t0:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
