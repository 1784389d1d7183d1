"""The GPU figures of docs/benchmarks.md in one run: the demo's tournament, then a walk-forward year.

1. **demo**: the demo's tournament (``podracer demo``'s default preset: 100 tickers, 243 sessions,
   256 envs per pod) for ``--demo-seconds`` (360: the demo's 6 minutes) on the population backend
   (``benchmarks/population_throughput.py --no-grid --backends population``): env-steps trained and
   their rate over the whole run, pods tried, the population rounds' seconds by phase and training's
   share of the wall time (the device's busy share, estimated).
2. **walkforward**: ``benchmarks/walkforward_scale.py --device cuda`` (a year of 100 tickers x minute
   bars, 12 monthly folds, ``--fold-minutes`` per fold's tournament, inline with the population's
   shape pinned to ``--walk-pods`` x ``--walk-envs``: no worker start and no sizing probe per fold):
   the wall time end to end and the stitched account's verdict.
3. **power** (its own device slot: ``--only power``): ``benchmarks/power_table.py`` at the default
   table's settings (the library's features, 100 tickers x 243 sessions split 72 / 45 / 126, 250,000
   env-steps, two pods, the default learner; the PPO column at the demo's budget) with ``--device``
   (both tournaments on it: the population backend on CUDA), ``--power-markets`` fresh `nonlinear`
   markets at IC 0.10 (seeds from ``--power-first-seed``, outside every table) in ``--power-jobs``
   processes sharing the device: each stage's median seconds a market, markets an hour, and the hours
   the 292 markets of the default's table would take at that rate. A timing, not power figures.

Each part runs as its own process with what is left of ``--limit-s`` (570: inside a 10-minute device
slot); a part that runs out of time is recorded as such, never dropped. Figures go to ``--out-dir``
(default ``$OUT``, else ``./gpu-figures``): ``demo.json``, ``walkforward.json`` (each benchmark's own
figures) and ``gpu_figures.json`` (the commit, date, device, the commands run, each part's exit
status, wall time and figures).

    .venv/bin/python benchmarks/gpu_figures.py                          # one H100: both parts
    .venv/bin/python benchmarks/gpu_figures.py --only walkforward       # one part
    .venv/bin/python benchmarks/gpu_figures.py --smoke --out-dir /tmp/f  # CPU, tiny: does it run

The CPU baseline of the demo (for the GPU/CPU ratio) is measured on the 2-core machine the same day,
same commit: ``benchmarks/population_throughput.py --no-grid --backends local --demo-seconds 360
--workers 2 --out cpu_demo.json`` (docs/benchmarks.md, "Population backend").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("demo", "walkforward", "power")
#: Markets of the default learner's table: 12 planted cells of 16 and 100 nulls.
TABLE_MARKETS = 12 * 16 + 100
#: The default learner's table's market settings as flags: the library's features, 100 tickers x 243
#: sessions split 72 / 45 / 126 (the power part here, benchmarks/power_table_time.py and
#: benchmarks/finetune_gain.py run its markets).
TABLE_FLAGS = (
    "--features",
    "library",
    "--tickers",
    "100",
    "--sessions",
    "243",
    "--train-frac",
    repr(72 / 243),
    "--valid-frac",
    repr(45 / 243),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT") or "gpu-figures"))
    p.add_argument("--only", choices=PARTS, default=None, help="run one part")
    p.add_argument("--device", default="cuda")
    p.add_argument("--demo-seconds", type=float, default=360.0, help="the demo tournament's wall-time budget")
    p.add_argument(
        "--fold-minutes", type=float, default=0.15, help="walk-forward: each of the 12 folds' tournament"
    )
    p.add_argument("--walk-pods", type=int, default=128, help="walk-forward: pods per population")
    p.add_argument("--walk-envs", type=int, default=256, help="walk-forward: envs per pod")
    p.add_argument("--power-markets", type=int, default=8, help="power: markets to time")
    p.add_argument("--power-jobs", type=int, default=8, help="power: processes sharing the device")
    p.add_argument(
        "--power-first-seed",
        type=int,
        default=2_600_000,
        help="power: the table's --first-seed (IC 0.10: seeds from it + 100,000)",
    )
    p.add_argument("--limit-s", type=float, default=570.0, help="the parts together, seconds")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny sizes: check that the script runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.device, args.demo_seconds, args.power_markets, args.power_jobs = "cpu", 20.0, 1, 1
    return args


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
    """The command of each part to run (``--only``: that one)."""
    py = sys.executable
    out = args.out_dir
    demo = [
        py,
        str(ROOT / "benchmarks" / "population_throughput.py"),
        "--no-grid",
        "--backends",
        "population",
    ]
    demo += [
        "--device",
        args.device,
        "--demo-seconds",
        str(args.demo_seconds),
        "--out",
        str(out / "demo.json"),
    ]
    walk = [py, str(ROOT / "benchmarks" / "walkforward_scale.py"), "--device", args.device]
    walk += ["--fold-minutes", str(args.fold_minutes), "--out", str(out / "walkforward.json")]
    if not args.smoke:
        # Inline (no worker process to start per fold) and a pinned shape (no sizing probe per fold):
        # 128 pods x 256 envs, the demo's probed choice on an H100 (docs/benchmarks.md).
        walk += ["--workers", "0", "--pods", str(args.walk_pods), "--envs-per-pod", str(args.walk_envs)]
    if args.smoke:
        demo.append("--quick")
        walk.append("--quick")
    power = [py, str(ROOT / "benchmarks" / "power_table.py"), *TABLE_FLAGS]
    power += ["--shape", "nonlinear", "--ic", "0.10", "--markets", str(args.power_markets), "--nulls", "0"]
    power += [
        "--first-seed",
        str(args.power_first_seed),
        "--jobs",
        str(args.power_jobs),
        "--device",
        args.device,
    ]
    power += ["--with-ppo", "--out", str(out / "power.jsonl")]  # (every column: PPO's tournament too)
    if args.smoke:
        power += ["--budget", "2000", "--round-steps", "2000", "--ppo-budget", "2048"]
    chosen = {"demo": demo, "walkforward": walk, "power": power}
    if args.only is not None:
        return {args.only: chosen[args.only]}
    # Without --only: the demo and the walk-forward (one device slot); power has a slot of its own.
    return chosen if args.smoke else {name: chosen[name] for name in ("demo", "walkforward")}


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def run_part(name: str, cmd: list[str], seconds_left: float, out_dir: Path) -> dict:
    """One part as its own process (the repository on its import path), within ``seconds_left``."""
    record: dict = {"command": " ".join(cmd[1:]), "limit_s": round(seconds_left, 1)}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    t0 = time.perf_counter()
    print(f"[{name}] {record['command']}", flush=True)
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, timeout=max(1.0, seconds_left), check=False)
        record["returncode"] = done.returncode
    except subprocess.TimeoutExpired:
        record["returncode"], record["timed_out"] = None, True
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    figures = out_dir / f"{name}.json"
    if name == "power":
        record["figures"] = power_figures(out_dir / "power.jsonl", record["wall_s"])
    else:
        record["figures"] = json.loads(figures.read_text()) if figures.is_file() else None
    print(f"[{name}] exit {record['returncode']} after {record['wall_s']} s", flush=True)
    return record


def stage_seconds(row: dict, key: str) -> float | None:
    """A stage's seconds in a power-table row: the row's own, else those of the pass that added a
    column to it (``power_rerun.merged`` keeps that pass's timings in ``rerun_timings``, as
    ``--with-ppo`` over rows without the PPO column does). A row merged by ``--rerun-learner`` keeps
    the first pass's ``tournament_s`` and ``fit_s`` as its own: read such tables' stages from
    ``rerun_timings`` directly; the GPU part writes fresh rows, none merged."""
    if key in row:
        return row[key]
    return (row.get("rerun_timings") or {}).get(key)


def power_figures(rows_path: Path, wall_s: float) -> dict | None:
    """The power part's timing from its rows: each stage's median seconds a market, the markets an
    hour over the part's wall time (its processes side by side), and the default table's hours."""
    if not rows_path.is_file():
        return None
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    stages = ("data_s", "tournament_s", "ppo_s", "fit_s", "backtest_s", "wall_s")
    seconds = {k: [v for v in (stage_seconds(r, k) for r in rows) if v is not None] for k in stages}
    medians = {k: statistics.median(v) for k, v in seconds.items() if v}
    per_hour = 3600.0 * len(rows) / max(wall_s, 1e-9)
    return {
        "markets": len(rows),
        "median_s": medians,
        "markets_per_hour": round(per_hour, 1),
        "table_markets": TABLE_MARKETS,
        "table_hours": round(TABLE_MARKETS / per_hour, 2),
        "settings_key": rows[0].get("settings_key"),
    }


def summary(name: str, record: dict) -> str:
    """One line of a part's headline figures."""
    figures = record.get("figures") or {}
    if name == "demo":
        pop = (figures.get("demo") or {}).get("population") or {}
        if not pop:
            return "demo: no figures"
        rate = pop["env_steps"] / max(pop["wall_s"], 1e-9)
        share = pop.get("train_share")
        busy = f", training {100 * share:.0f}% of the wall time" if share is not None else ""
        return f"demo: {pop['env_steps']:,} env-steps in {pop['wall_s']:.0f} s ({rate / 1e6:.2f}M/s), {pop['pods_tried']} pods{busy}"
    if name == "power":
        if not figures:
            return "power: no rows"
        med = figures["median_s"]
        return (
            f"power: {figures['markets']} markets, median {med.get('wall_s', 0):.0f} s a market "
            f"(tournament {med.get('tournament_s', 0):.0f} s, PPO's {med.get('ppo_s', 0):.0f} s); "
            f"{figures['markets_per_hour']:.0f} markets an hour, "
            f"the table's {figures['table_markets']} in {figures['table_hours']:.1f} h"
        )
    if not figures:
        return "walkforward: no figures"
    return f"walkforward: {figures['folds']} folds in {figures['wall_s']:.0f} s; {figures.get('verdict')}"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report: dict = {
        "commit": _commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": _device_name(args.device),
        "smoke": args.smoke,
        "parts": {},
    }
    for name, cmd in commands(args).items():
        left = args.limit_s - (time.perf_counter() - start)
        if left <= 0:
            report["parts"][name] = {"command": " ".join(cmd[1:]), "skipped": "no time left"}
            continue
        report["parts"][name] = run_part(name, cmd, left, args.out_dir)
        print(summary(name, report["parts"][name]), flush=True)
    report["wall_s"] = round(time.perf_counter() - start, 1)
    (args.out_dir / "gpu_figures.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"figures: {args.out_dir / 'gpu_figures.json'} ({report['wall_s']} s in all)")
    return report


if __name__ == "__main__":
    main()
