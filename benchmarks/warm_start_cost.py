"""What dropping the nightly warm start costs: tonight's retrain with and without yesterday's champion's weights.

    python benchmarks/warm_start_cost.py [--seeds 0,1,2] [--budget-steps 1000000] [--signal 1.0] [--json]

``app.nightly.steps.tournament_step`` drops the warm start when the champion's gate window reaches
into tonight's (docs/nightly.md), so on consecutive nights of a daily retrain every tournament starts
from scratch. This measures what that costs, with the real pipeline (``app.nightly.pipeline.run_retrain``
and its steps, one thread) on a synthetic market with the planted signal (``data.synthetic``). Per seed:

1. one market of ``SESSIONS`` sessions; **yesterday** is its first ``YESTERDAY`` sessions (train 20,
   validation 10, gate 5) and **tonight** all of them (train 25, validation 10, test 40: the gate's
   window is measurable, ``backtests.verdict.MIN_OOS_SESSIONS``). Yesterday's retrain promotes its
   challenger (its verdict on the 5-session gate window, too short to measure, is scripted
   "significant": :func:`_scripted_first`): the champion, gated on sessions that end before
   tonight's test window, so ``gated_on_tonight`` allows the warm start and nothing it inherits saw
   tonight's test window;
2. tonight's retrain twice, from copies of that home, with the same tournament seed: **warm** (its
   one pod starts from the champion's weights, ``[nightly] warm_start_pods = 1``) and **cold**
   (``warm_start_pods = 0``: what a dropped warm start runs). The gate is the fixed-window one
   (``[gate] rule = "window"``: margin, significance at the gate's level, the looks counted).

Prints per seed and arm the challenger's validation Sharpe (the tournament's champion score), its
test-window fitness (Sharpe of daily returns net of costs on tonight's gate window, against the
champion's), whether it was promoted, its verdict and the seconds; then the means, the paired
differences (warm minus cold) and the share of nights promoted. docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, as the other benchmarks

import torch  # noqa: E402

from app.config import parse_config  # noqa: E402
from app.nightly.pipeline import run_retrain  # noqa: E402
from app.nightly.steps import DataSnapshot, RetrainSteps, default_steps  # noqa: E402
from app.runs import RunDir  # noqa: E402
from backtests.verdict import EdgeVerdict  # noqa: E402
from data.align import Panel  # noqa: E402
from data.calendar import Grid  # noqa: E402
from data.loader import build_market  # noqa: E402
from data.synthetic import SyntheticSpec, generate  # noqa: E402
from envs.execution import FRICTIONLESS  # noqa: E402

NUM_TICKERS = 10
SESSIONS = 75  # tonight: train 25, validation 10, test 40
YESTERDAY = 35  # yesterday: train 20, validation 10, gate 5 (ends the session before tonight's test)
TONIGHT_SPLIT = (25 / 75, 10 / 75)
YESTERDAY_SPLIT = (20 / 35, 10 / 35)


def _config(seed: int, budget_steps: int, warm_pods: int) -> Any:
    """The learner of the walk-forward's known-answer test (tests/test_walkforward_known.py: one PPO pod
    at 256 envs, the frictionless fill) in a nightly retrain."""
    return parse_config(
        {
            "data": {"source": "synthetic", "num_tickers": NUM_TICKERS, "seed": seed},
            "env": {
                "decision_interval": 15,
                "episode_len": 64,
                "num_envs": 256,
                "reward_scale": 100.0,
                **FRICTIONLESS,
            },
            "agent": {
                "seed": seed,
                "num_steps": 32,
                "learning_rate": 3e-3,
                "gamma": 0.9,
                "gae_lambda": 0.9,
                "rebalance_rate": 0.2,
            },
            "tournament": {
                "pods": 1,
                "leaderboard_size": 2,
                "round_steps": budget_steps,
                "budget_steps": budget_steps,
                "workers": 0,
                "seed": seed,
            },
            "nightly": {
                "warm_start_pods": warm_pods,
                "export": False,
                "tearsheet": False,
            },
            "gate": {"rule": "window"},
            "retention": {"after_retrain": False},
        },
        source="warm start benchmark",
    )


def _first_sessions(panel: Panel, num_sessions: int) -> Panel:
    """``panel`` cut to its first ``num_sessions`` sessions."""
    keep = panel.grid.session_id < num_sessions
    grid = Grid(
        timestamps=panel.grid.timestamps[keep],
        session_id=panel.grid.session_id[keep],
        time_of_day=panel.grid.time_of_day[keep],
        sessions=panel.grid.sessions[:num_sessions],
    )
    cut = {name: getattr(panel, name)[keep] for name in ("open", "high", "low", "close", "volume")}
    for name in ("real", "member"):
        if getattr(panel, name) is not None:
            cut[name] = getattr(panel, name)[keep]
    return dataclasses.replace(panel, grid=grid, **cut)


def _snapshot(panel: Panel, split: tuple[float, float]) -> DataSnapshot:
    splits = build_market(panel, train_frac=split[0], valid_frac=split[1], source="synthetic")
    windows = {k: tuple(v) for k, v in splits.windows().items()}
    windows["full"] = tuple(splits.full.date_range())
    return DataSnapshot(splits=splits, windows=windows, source="synthetic")


def _scripted_first(steps: RetrainSteps) -> RetrainSteps:
    """``steps`` with the challenger's verdict on the gate window scripted "significant" (yesterday's
    window is too short to measure; every figure of the night stays real)."""

    def evaluate(config: Any, home: Path, data: DataSnapshot, challenger: Any, champion: Any) -> Any:
        scored = steps.evaluate(config, home, data, challenger, champion)
        return dataclasses.replace(scored, edge=EdgeVerdict("significant", ("scripted: the first champion",)))

    return dataclasses.replace(steps, evaluate=evaluate)


def _retrain(config: Any, home: Path, data: DataSnapshot, *, first: bool = False) -> dict[str, Any]:
    steps = dataclasses.replace(default_steps(), update_data=lambda cfg, h: data)
    steps = _scripted_first(steps) if first else steps
    started = time.perf_counter()
    outcome = run_retrain(config, home, steps=steps)
    run = RunDir(home, outcome.challenger_run_id)
    info = run.info()
    champion = info.champion
    return {
        "valid_sharpe": champion.sharpe_ratio if champion is not None else None,
        "test_fitness": outcome.challenger_fitness,
        "champion_test_fitness": outcome.champion_fitness,
        "promoted": outcome.verdict == "promoted",
        "edge": outcome.challenger_edge,
        "warm_started_from": info.nightly.warm_started_from,
        "windows": {k: list(v) for k, v in data.windows.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }


def one_seed(seed: int, budget_steps: int, signal: float, root: Path) -> dict[str, Any]:
    """Yesterday's retrain, then tonight's warm and cold (see the module docstring)."""
    panel = generate(SyntheticSpec(num_tickers=NUM_TICKERS, num_sessions=SESSIONS, seed=seed, signal=signal))
    yesterday = _snapshot(_first_sessions(panel, YESTERDAY), YESTERDAY_SPLIT)
    tonight = _snapshot(panel, TONIGHT_SPLIT)
    if not yesterday.windows["test"][1] < tonight.windows["test"][0]:
        raise SystemExit(f"seed {seed}: yesterday's gate window reaches into tonight's test window")
    base = root / f"seed{seed}-base"
    first = _retrain(_config(seed, budget_steps, 1), base, yesterday, first=True)
    out: dict[str, Any] = {"seed": seed, "yesterday": first}
    for arm, warm_pods in (("warm", 1), ("cold", 0)):
        home = root / f"seed{seed}-{arm}"
        shutil.copytree(base, home)
        out[arm] = _retrain(_config(seed, budget_steps, warm_pods), home, tonight)
    return out


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}"


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "—"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):+.2f} ± {sd:.2f}"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means, paired differences (warm - cold) and promotions over the seeds."""
    out: dict[str, Any] = {}
    for key in ("valid_sharpe", "test_fitness"):
        pairs = [
            (r["warm"][key], r["cold"][key])
            for r in rows
            if r["warm"][key] is not None and r["cold"][key] is not None
        ]
        out[key] = {
            "warm": [w for w, _ in pairs],
            "cold": [c for _, c in pairs],
            "warm_minus_cold": [w - c for w, c in pairs],
        }
    out["promoted"] = {arm: sum(r[arm]["promoted"] for r in rows) for arm in ("warm", "cold")}
    out["nights"] = len(rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--budget-steps", type=int, default=1_000_000, help="env-steps of each tournament")
    parser.add_argument("--signal", type=float, default=1.0, help="planted signal (data.synthetic)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: not a comma-separated list of integers: {args.seeds!r}")
    torch.set_num_threads(1)
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        for seed in seeds:
            rows.append(one_seed(seed, args.budget_steps, args.signal, Path(tmp)))
            if not args.json:
                r = rows[-1]
                for arm in ("warm", "cold"):
                    a = r[arm]
                    print(
                        f"seed {seed} {arm:4s}: valid Sharpe {_num(a['valid_sharpe'])}  test fitness "
                        f"{_num(a['test_fitness'])} (champion {_num(a['champion_test_fitness'])})  "
                        f"{'promoted' if a['promoted'] else 'rejected'}  {a['edge']}  {a['seconds']:.0f} s",
                        flush=True,
                    )
    result = {
        "seeds": seeds,
        "budget_steps": args.budget_steps,
        "signal": args.signal,
        "rows": rows,
        "summary": summary(rows),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return
    s = result["summary"]
    for key, label in (("valid_sharpe", "validation Sharpe"), ("test_fitness", "test-window fitness")):
        print(
            f"{label}: warm {_mean_sd(s[key]['warm'])}, cold {_mean_sd(s[key]['cold'])}, "
            f"warm - cold {_mean_sd(s[key]['warm_minus_cold'])} (mean ± sd over seeds)"
        )
    print(
        f"promoted: warm {s['promoted']['warm']} of {s['nights']} nights, cold {s['promoted']['cold']} "
        f"of {s['nights']}; {result['seconds']:.0f} s in all"
    )


if __name__ == "__main__":
    main()
