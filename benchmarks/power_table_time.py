"""How long the default learner's power table takes on this machine: a timing, not power figures.

Runs ``benchmarks/power_table.py`` at the table's settings (the library's features, 100 tickers x
243 sessions split 72 / 45 / 126, 250,000 env-steps and two pods for the champion's tournament, the
default learner) with the PPO column (``--with-ppo``: the demo's pool, 1,000,000 env-steps) on
``--markets`` fresh ``nonlinear`` markets at IC 0.10 (the table's ``--first-seed``: seeds
``--first-seed + 100,000 + market``, 2,510,000 onwards by default, outside every
table) in ``--jobs`` processes side by side, each with one intra-op thread, rows to a scratch file.
It prints each stage's median seconds a market in a process (``data_s``: building the market;
``tournament_s``: the champion's tournament; ``ppo_s``: the PPO column's; ``fit_s``: the ridge and
boosted fits; ``backtest_s``: the one backtest of every column), the markets an hour over the run's
wall time, and the hours of the table's 292 markets at that rate (``gpu_figures.TABLE_MARKETS``).
A process's first market pays its one-off costs (imports, a compile of the PPO loss), so the
figures come twice: over every market, and over the markets after each process's first
(``warm``: the pace of a long run; at least two markets a process for them). ``--out`` keeps the
rows.

    .venv/bin/python benchmarks/power_table_time.py                            # 4 markets, 2 processes
    .venv/bin/python benchmarks/power_table_time.py --ppo-backend population   # the PPO column's other backend
    .venv/bin/python benchmarks/power_table_time.py --markets 1 --jobs 1 --budget 2000 --ppo-budget 2048
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu_figures import TABLE_FLAGS, TABLE_MARKETS, power_figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markets", type=int, default=4, help="fresh markets to time")
    p.add_argument("--jobs", type=int, default=2, help="processes side by side")
    p.add_argument(
        "--first-seed",
        type=int,
        default=2_410_000,
        help="the table's --first-seed (IC 0.10: seeds from it + 100,000)",
    )
    p.add_argument("--ppo-backend", choices=("auto", "local", "population"), default="auto")
    p.add_argument("--budget", type=int, default=250_000, help="the champion's tournament's env-steps")
    p.add_argument("--ppo-budget", type=int, default=1_000_000, help="the PPO column's env-steps")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None, help="keep the rows (JSON lines) here")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.markets < 1 or args.jobs < 1:
        p.error("--markets and --jobs: at least 1")
    return args


def command(args: argparse.Namespace, out: Path) -> list[str]:
    """The power table's command of the timing run."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "power_table.py"), *TABLE_FLAGS]
    cmd += ["--shape", "nonlinear", "--ic", "0.10", "--markets", str(args.markets), "--nulls", "0"]
    cmd += ["--budget", str(args.budget), "--round-steps", str(min(50_000, args.budget))]
    cmd += ["--with-ppo", "--ppo-budget", str(args.ppo_budget), "--ppo-backend", args.ppo_backend]
    cmd += ["--ppo-round-steps", str(min(250_000, args.ppo_budget))]
    cmd += ["--first-seed", str(args.first_seed), "--device", args.device, "--out", str(out)]
    return cmd + ["--jobs", str(args.jobs)]


def warm(rows: list[dict], jobs: int) -> dict | None:
    """Each stage's median seconds over the markets after each process's first (market ``index`` runs
    in process ``index % jobs``, so its first is ``index < jobs``), and the table's hours at that pace
    with ``jobs`` processes side by side; None without such markets."""
    later = [r for r in rows if r["index"] >= jobs]
    if not later:
        return None
    stages = ("data_s", "tournament_s", "ppo_s", "fit_s", "backtest_s", "wall_s")
    medians = {k: statistics.median(r[k] for r in later) for k in stages if all(k in r for r in later)}
    return {
        "markets": len(later),
        "median_s": medians,
        "table_hours": round(TABLE_MARKETS * medians["wall_s"] / jobs / 3600.0, 2),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="podracer-table-time-") as scratch:
        out = args.out or Path(scratch) / "rows.jsonl"
        if out.exists():
            sys.exit(f"error: {out} exists (the timing writes fresh rows)")
        cmd = command(args, out)
        start = time.perf_counter()
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"error: the power table's run failed (exit {done.returncode}): {' '.join(cmd[1:])}")
        figures = power_figures(out, wall) or {}
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    figures.update(command=" ".join(cmd[1:]), wall_s=round(wall, 1), ppo_backend=args.ppo_backend)
    figures["warm"] = warm(rows, args.jobs)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        med = figures.get("median_s", {})
        stages = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in med.items() if k != "wall_s")
        print(
            f"{figures.get('markets', 0)} markets in {wall:.0f} s on {args.jobs} processes; a market in a "
            f"process: median {med.get('wall_s', 0):.0f} s ({stages}); {figures.get('markets_per_hour', 0):.1f} "
            f"markets an hour: the table's {figures.get('table_markets')} markets in "
            f"{figures.get('table_hours', float('nan')):.1f} h"
        )
        if figures["warm"]:
            later = figures["warm"]
            stages = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in later["median_s"].items() if k != "wall_s")
            print(
                f"after each process's first market ({later['markets']}): median "
                f"{later['median_s']['wall_s']:.0f} s a market ({stages}): the table's markets in "
                f"{later['table_hours']:.1f} h on {args.jobs} processes"
            )
    return figures


if __name__ == "__main__":
    main()
