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
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("demo", "walkforward")


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
    p.add_argument("--limit-s", type=float, default=570.0, help="both parts together, seconds")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny sizes: check that the script runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.device, args.demo_seconds = "cpu", 20.0
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
    chosen = {"demo": demo, "walkforward": walk}
    return {name: cmd for name, cmd in chosen.items() if args.only in (None, name)}


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
    record["figures"] = json.loads(figures.read_text()) if figures.is_file() else None
    print(f"[{name}] exit {record['returncode']} after {record['wall_s']} s", flush=True)
    return record


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
