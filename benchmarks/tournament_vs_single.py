"""Tournament champion vs the best of P independent single runs, at equal total env-steps.

On the planted-signal synthetic market (``data.synthetic``), for each seed:

- **tournament**: P pods in flight, rounds of ``budget / (P * rounds)`` env-steps, children copy the
  best leaderboard entries (weights + optimizer state) and perturb their hyper-parameters;
- **independent**: P single PPO runs with the default hyper-parameters and different seeds, each
  ``budget / P`` env-steps, the best chosen by the same validation score.

Both report the validation Sharpe of their selected policy and its held-out test Sharpe (daily
returns, net of costs) next to equal-weight buy-and-hold. Then the tournament's wall time and
env-steps/s with 1 and with 2 local worker processes (same budget, seed 0).

    .venv/bin/python benchmarks/tournament_vs_single.py            # the README figures (~8 min, 2 cores)
    .venv/bin/python benchmarks/tournament_vs_single.py --quick    # smoke run (< 1 min)
    .venv/bin/python benchmarks/tournament_vs_single.py --seeds --scaling --pods-budget-s 150
        # only pods tried in a 150 s tournament at the product's sizes: eager vs compile auto

Prints a table; ``--out FILE`` also writes the figures as JSON.
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

from agents.policy import Policy  # noqa: E402
from agents.tournament.backends import ProcessBackend  # noqa: E402
from agents.tournament.generator import PodSpec  # noqa: E402
from agents.tournament.orchestrator import run_tournament  # noqa: E402
from agents.tournament.pod import PodTask, RoundContext, learner_round  # noqa: E402
from agents.tournament.settings import TournamentArgs  # noqa: E402
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.scoring import score_window  # noqa: E402
from data.loader import load_market  # noqa: E402
from envs.trading import EnvParams  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tickers", type=int, default=10)
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--pods", type=int, default=4)
    p.add_argument("--rounds", type=int, default=4, help="rounds per pod slot in the tournament")
    p.add_argument("--budget-steps", type=int, default=49_152, help="total env-steps per method")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="(none: skip the comparison)")
    p.add_argument("--workers", type=int, default=2, help="local workers of the comparison runs")
    p.add_argument("--scaling", type=int, nargs="*", default=[1, 2], help="worker counts to time")
    p.add_argument(
        "--pods-budget-s",
        type=float,
        default=0.0,
        help="also run a wall-time-budgeted tournament at the product's default sizes (256 envs, "
        "default network, 100 tickers) for this many seconds, eager (env and agent compile off) and "
        "default (compile auto), and report the pods tried by each (0: skip)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.tickers, args.sessions, args.pods, args.rounds = 3, 10, 2, 2
        args.budget_steps, args.num_envs, args.seeds, args.workers = 2048, 8, [0], 0
    return args


def _settings(args: argparse.Namespace) -> tuple[dict, dict]:
    env = {"decision_interval": 15, "episode_len": 64, "num_envs": args.num_envs, "reward_scale": 100.0}
    agent = {"num_steps": 32, "hidden": 32, "embed": 8, "update_epochs": 4, "num_minibatches": 4}
    return env, agent


def _test_sharpe(policy: Policy, test, params: EnvParams) -> tuple[float, float]:
    """Test-window Sharpe of ``policy`` and of equal-weight buy-and-hold."""
    with torch.no_grad():
        scores = score_window(
            test,
            params,
            {"policy": policy},
            nan_value=0.0,
            baselines=("buy_and_hold",),
            annualization=TRADING_DAYS_PER_YEAR,
        )
    return scores.of("policy"), scores.of("buy_and_hold")


def run_tournament_once(args, splits, seed: int, workers: int, root: Path) -> dict:
    env, agent = _settings(args)
    round_steps = max(1, args.budget_steps // (args.pods * args.rounds))
    targs = TournamentArgs(
        pods=args.pods,
        leaderboard_size=args.pods,
        p_fresh=0.25,
        round_steps=round_steps,
        budget_steps=args.budget_steps,
        workers=workers,
        seed=seed,
    )
    run_dir = root / f"tournament-s{seed}-w{workers}"
    start = time.perf_counter()
    # One torch thread per worker in every configuration, so 1 vs 2 workers compares processes only.
    backend = ProcessBackend(workers, threads_per_worker=1) if workers > 0 else None
    result = run_tournament(
        run_dir,
        splits.train,
        splits.valid,
        args=targs,
        env=env,
        agent=agent,
        backend=backend,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    wall = time.perf_counter() - start
    params = EnvParams(**{k: v for k, v in env.items() if k != "num_envs"})
    test, bh = _test_sharpe(Policy.load(run_dir / "champion"), splits.test, params)
    return {
        "valid_sharpe": result.champion["sharpe_ratio"],
        "test_sharpe": test,
        "buy_and_hold_test_sharpe": bh,
        "pods_tried": result.pods_tried,
        "champion_generation": result.champion["generation"],
        "env_steps": result.env_steps,
        "wall_s": wall,
    }


def run_independent(args, splits, seed: int, root: Path) -> dict:
    env, agent = _settings(args)
    ctx = RoundContext(
        train=splits.train, valid=splits.valid, env=env, agent=agent, annualization=TRADING_DAYS_PER_YEAR
    )
    steps = args.budget_steps // args.pods
    best = None
    start = time.perf_counter()
    for i in range(args.pods):
        spec = PodSpec(pod_id=f"single{i}", seq=i, seed=seed * 1000 + i, algo="ppo")
        task = PodTask(spec=spec, checkpoint_dir=str(root / f"single-s{seed}-{i}"), round_steps=steps)
        outcome = learner_round(task, ctx)
        if best is None or outcome.score > best.score:
            best = outcome
    wall = time.perf_counter() - start
    params = EnvParams(**{k: v for k, v in env.items() if k != "num_envs"})
    test, bh = _test_sharpe(Policy.load(best.checkpoint), splits.test, params)
    return {
        "valid_sharpe": best.metrics["sharpe_ratio"],
        "test_sharpe": test,
        "buy_and_hold_test_sharpe": bh,
        "env_steps": steps * args.pods,
        "wall_s": wall,
    }


def pods_in_budget(seconds: float, compile: str, workers: int, root: Path) -> dict:
    """Pods a ``seconds`` tournament tries at the product's default env and network sizes."""
    splits = load_market(None, num_tickers=100, num_sessions=60, seed=0)
    env = {"decision_interval": 15, "episode_len": 64, "num_envs": 256, "fast_step": compile}
    targs = TournamentArgs(budget_steps=None, budget_minutes=seconds / 60.0, workers=workers, seed=0)
    backend = ProcessBackend(workers) if workers > 0 else None
    start = time.perf_counter()
    result = run_tournament(
        root / f"budget-{compile}",
        splits.train,
        splits.valid,
        args=targs,
        env=env,
        agent={"compile": compile},
        backend=backend,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    wall = time.perf_counter() - start
    return {
        "compile": compile,
        "pods_tried": result.pods_tried,
        "env_steps": result.env_steps,
        "wall_s": wall,
        "env_steps_per_s": result.env_steps / wall,
        "champion_valid_sharpe": result.champion["sharpe_ratio"],
    }


def _mean(values: list[float | None]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else float("nan")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    # The per-asset network is tiny: one intra-op thread per process is fastest (worker processes
    # set their own share), and leaves the other core to the second worker.
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="podracer-bench-"))
    figures: dict = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    try:
        rows = []
        for seed in args.seeds:
            splits = load_market(None, num_tickers=args.tickers, num_sessions=args.sessions, seed=seed)
            tour = run_tournament_once(args, splits, seed, args.workers, root)
            single = run_independent(args, splits, seed, root)
            rows.append({"seed": seed, "tournament": tour, "independent": single})
            print(
                f"seed {seed}: tournament valid {tour['valid_sharpe']:+.2f} test {tour['test_sharpe']:+.2f} | "
                f"best-of-{args.pods} valid {single['valid_sharpe']:+.2f} test {single['test_sharpe']:+.2f} | "
                f"buy-and-hold test {tour['buy_and_hold_test_sharpe']:+.2f}",
                flush=True,
            )
        figures["seeds"] = rows
        figures["mean"] = {
            method: {
                key: _mean([r[method][key] for r in rows])
                for key in ("valid_sharpe", "test_sharpe", "buy_and_hold_test_sharpe", "wall_s")
            }
            for method in ("tournament", "independent")
        }
        scaling = []
        if args.scaling and args.seeds:
            splits = load_market(
                None, num_tickers=args.tickers, num_sessions=args.sessions, seed=args.seeds[0]
            )
            for workers in args.scaling:
                run = run_tournament_once(args, splits, args.seeds[0], workers, root / "scaling")
                scaling.append(
                    {
                        "workers": workers,
                        "wall_s": run["wall_s"],
                        "env_steps_per_s": run["env_steps"] / run["wall_s"],
                    }
                )
                print(
                    f"scaling: {workers} worker(s): {run['wall_s']:.1f} s, "
                    f"{run['env_steps'] / run['wall_s']:,.0f} env-steps/s",
                    flush=True,
                )
        figures["scaling"] = scaling
        budget = []
        for compile in ("off", "auto") if args.pods_budget_s > 0 else ():
            run = pods_in_budget(args.pods_budget_s, compile, args.workers, root)
            budget.append(run)
            print(
                f"{args.pods_budget_s:.0f} s budget, compile {compile}: {run['pods_tried']} pods tried, "
                f"{run['env_steps']:,} env-steps ({run['env_steps_per_s']:,.0f}/s, wall {run['wall_s']:.0f} s)",
                flush=True,
            )
        figures["pods_in_budget"] = budget
    finally:
        shutil.rmtree(root, ignore_errors=True)

    if not args.seeds:  # only the wall-time budget runs were asked for
        if args.out is not None:
            args.out.write_text(json.dumps(figures, indent=2, default=str) + "\n")
        return figures
    mean = figures["mean"]
    print(f"\nmean over seeds {args.seeds} at {args.budget_steps:,} env-steps per method:")
    print(f"{'method':<14}{'valid Sharpe':>14}{'test Sharpe':>14}{'b&h test':>12}{'wall s':>10}")
    for method in ("tournament", "independent"):
        m = mean[method]
        print(
            f"{method:<14}{m['valid_sharpe']:>14.2f}{m['test_sharpe']:>14.2f}"
            f"{m['buy_and_hold_test_sharpe']:>12.2f}{m['wall_s']:>10.1f}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return figures


if __name__ == "__main__":
    main()
