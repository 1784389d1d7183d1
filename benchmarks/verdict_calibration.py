"""Calibration of the verdict: how often it says "edge significant out of sample" with no edge to find,
and how often it finds a planted one.

Small tournaments on seeded synthetic markets (``data.synthetic``), through the product's own
workflows (``app.workflows.training.train_tournament``, then ``app.workflows.backtest.backtest_run``
on the test window, which writes the verdict of ``backtests.verdict``):

- **null markets** (``signal 0``: nothing to learn), in ``--homes`` homes of one market each with
  ``--looks`` tournaments (different tournament seeds) backtested on the same test window, so the
  looks ledger deflates each look for the ones before it, as it does for a user who reruns
  tournaments: the false-positive rate is the share of "significant" among all those looks, each as
  first judged; its one-sided 95% Clopper-Pearson upper bound must be at most 7.5% (``MAX_RATE``).
  The verdicts as read at the end (every look of the home counted) are reported too;
- **planted-signal markets** at signal levels whose daily lag-1 autocorrelation is 0.02 to 0.2
  (``benchmarks/synthetic_autocorrelation.py``; docs/data.md): the power, the share found significant.

Each home has its own market seed (data, agent and bootstrap), so different homes never deflate one
another (their market identities differ too).

    .venv/bin/python benchmarks/verdict_calibration.py --json              # 100 homes x 4 looks + power
    .venv/bin/python benchmarks/verdict_calibration.py --quick --json      # smoke run (a minute or two)
    .venv/bin/python benchmarks/verdict_calibration.py --rows rows.jsonl   # resumable: reruns skip finished homes

Prints a table; ``--json`` prints the figures (every look's row and the rates) as one JSON document.
Exits 1 when the null check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from scipy.stats import beta as beta_distribution  # noqa: E402

from app.config import Config  # noqa: E402
from app.workflows.backtest import backtest_run  # noqa: E402
from app.workflows.training import train_tournament  # noqa: E402
from backtests import looks  # noqa: E402
from backtests.metrics_model import ExcessFigures, MetricsDocument, OosTest  # noqa: E402

LEVEL = 0.05
#: The one-sided 95% upper bound of the null rate must stay at or below this.
MAX_RATE = 0.075
#: Signal levels whose daily lag-1 autocorrelation spans 0.02 .. 0.2 with the 520-bar lookback:
#: 0.022, 0.062, 0.108, 0.193 (docs/data.md, measured by benchmarks/synthetic_autocorrelation.py).
POWER_SIGNALS = (0.05, 0.15, 0.25, 0.42)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--homes", type=int, default=100, help="null homes (signal 0), one market each")
    p.add_argument("--looks", type=int, default=4, help="tournaments per null home on one test window")
    p.add_argument("--power-homes", type=int, default=20, help="homes per planted signal level (1 look)")
    p.add_argument("--signals", type=float, nargs="+", default=list(POWER_SIGNALS), help="planted levels")
    p.add_argument("--tickers", type=int, default=10)
    p.add_argument("--sessions", type=int, default=120, help="split 35/25/40%%: 42 / 30 / 48 sessions")
    # Many short rounds: the tournament's exploit-and-mutate finds the planted signal within ~100k
    # env-steps (docs/benchmarks.md, Tournament), where a few long rounds do not.
    p.add_argument("--pods", type=int, default=4)
    p.add_argument("--round-steps", type=int, default=4_096)
    p.add_argument("--budget-steps", type=int, default=98_304, help="env-steps per tournament")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--first-seed", type=int, default=1000, help="home i's market uses seed first_seed + i")
    p.add_argument("--workers", type=int, default=0, help="local worker processes (0 = inline)")
    p.add_argument(
        "--rows",
        type=Path,
        default=None,
        help="JSON-lines file of finished homes: each home's rows are appended when it ends, and homes "
        "already there are read back instead of rerun (a long run can stop and resume)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.homes, args.looks, args.power_homes, args.signals = 1, 2, 1, [1.0]
        args.tickers, args.pods, args.round_steps, args.budget_steps, args.num_envs = 4, 2, 512, 1_024, 8
        args.sessions = 40
    return args


def _config(args: argparse.Namespace, seed: int, signal: float, look: int = 0) -> Config:
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
        agent={"seed": seed * 100 + look},
        tournament={
            "pods": args.pods,
            "leaderboard_size": 2 * args.pods,
            "round_steps": args.round_steps,
            "budget_steps": args.budget_steps,
            "budget_minutes": None,
            "workers": args.workers,
            "seed": seed * 100 + look,  # another tournament on the same market
        },
    )


def _row(doc: MetricsDocument, seed: int, signal: float, look: int) -> dict:
    oos = doc.oos_test or OosTest()
    excess = oos.excess.get(oos.benchmark or "") or ExcessFigures()
    return {
        "seed": seed,
        "signal": signal,
        "look": look,
        "outcome": doc.verdict_outcome,
        "looks": oos.looks,
        "test_sessions": doc.num_sessions,
        "test_sharpe": doc.strategies["champion"].sharpe_ratio,
        "buy_and_hold_test_sharpe": doc.strategies["buy_and_hold"].sharpe_ratio,
        "psr": oos.psr_after_looks,
        "excess_p": excess.p_value_after_looks,
        "verdict": doc.verdict,
    }


def run_home(args: argparse.Namespace, seed: int, signal: float, num_looks: int) -> list[dict]:
    """One home, one market: ``num_looks`` tournaments backtested on its test window, each verdict as
    first judged, then each as read at the end (every look of the home counted: ``outcome_now``)."""
    home = Path(tempfile.mkdtemp(prefix="podracer-calibration-"))
    rows, docs = [], []
    try:
        for look in range(num_looks):
            start = time.perf_counter()
            run = f"s{seed}-{look}"
            train_tournament(_config(args, seed, signal, look), home, run=run)
            doc = backtest_run(run, home=home, window="test", tearsheet=False)
            docs.append(doc)
            rows.append({**_row(doc, seed, signal, look), "wall_s": round(time.perf_counter() - start, 2)})
        for row, doc in zip(rows, docs, strict=True):
            now = looks.restated(doc, home)
            row["outcome_now"] = now.verdict_outcome
            row["looks_now"] = now.oos_test.looks if now.oos_test is not None else None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return rows


def upper_bound(significant: int, total: int, confidence: float = 0.95) -> float | None:
    """The one-sided Clopper-Pearson upper bound of a rate: ``Beta(confidence; k + 1, n - k)`` (1 when
    every trial was significant; None without trials)."""
    if total == 0:
        return None
    if significant >= total:
        return 1.0
    return float(beta_distribution.ppf(confidence, significant + 1, total - significant))


def rate(rows: list[dict], key: str = "outcome") -> dict:
    """The share of "significant" (by ``key``) and its one-sided 95% upper bound."""
    n = len(rows)
    k = sum(r[key] == "significant" for r in rows)
    measurable = sum(r[key] != "not measurable" for r in rows)
    return {
        "looks": n,
        "significant": k,
        "not_measurable": n - measurable,
        "rate": k / n if n else None,
        "upper_95": upper_bound(k, n),
    }


def _settings_key(args: argparse.Namespace) -> str:
    """What makes two runs' rows comparable: the market and tournament sizes (not the home count) and
    the learner: its algorithm and a digest of its resolved ``[agent]`` settings but the seed (the
    product's defaults, so rows written under another default learner are refused on resume)."""
    keys = ("looks", "tickers", "sessions", "pods", "round_steps", "budget_steps", "num_envs")
    agent = _config(args, args.first_seed, 0.0).agent.model_dump(mode="json", exclude={"seed"})
    digest = hashlib.sha256(json.dumps(agent, sort_keys=True).encode()).hexdigest()[:12]
    sizes = ",".join(f"{k}={getattr(args, k)}" for k in keys)
    return f"{sizes},algo={agent.get('algo')},agent={digest}"


def load_rows(path: Path | None, key: str) -> dict[tuple[float, int], list[dict]]:
    """Finished homes from a ``--rows`` file, by (signal, seed); refuses rows of other settings."""
    if path is None or not path.exists():
        return {}
    homes: dict[tuple[float, int], list[dict]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            home = (float(row["signal"]), int(row["seed"]))
        except (ValueError, KeyError, TypeError) as exc:
            sys.exit(f"error: {path}:{number}: not a calibration row ({exc})")
        if row.get("settings_key") != key:
            sys.exit(f"error: {path}:{number}: rows of other settings ({row.get('settings_key')}, now {key})")
        homes.setdefault(home, []).append(row)
    return homes


def _append_rows(path: Path | None, rows: list[dict]) -> None:
    if path is None:
        return
    with path.open("a") as out:  # one home's rows per write; a kill mid-home loses only that home
        out.write("".join(json.dumps(row) + "\n" for row in rows))
        out.flush()


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    plan = [(0.0, args.homes, args.looks)] * bool(args.homes) + [
        (s, args.power_homes, 1) for s in args.signals if args.power_homes
    ]
    rows: list[dict] = []
    key = _settings_key(args)
    done = load_rows(args.rows, key)
    seed = args.first_seed
    for signal, homes, num_looks in plan:
        for _ in range(homes):
            if (signal, seed) in done:
                rows.extend(done[(signal, seed)])
                seed += 1
                continue
            home_rows = [{**row, "settings_key": key} for row in run_home(args, seed, signal, num_looks)]
            _append_rows(args.rows, home_rows)
            for row in home_rows:
                rows.append(row)
                # Progress goes to stderr under --json, so a long run shows where it is.
                print(
                    f"signal {signal:g} seed {row['seed']} look {row['look']}: {row['outcome']} "
                    f"({row['looks']} looks; now {row['outcome_now']}, {row['looks_now']}); test Sharpe "
                    f"{_fmt(row['test_sharpe'], '+.2f')} (b&h {_fmt(row['buy_and_hold_test_sharpe'], '+.2f')}), "
                    f"PSR {_fmt(row['psr'], '.3f')}, p {_fmt(row['excess_p'], '.3g')} [{row['wall_s']:.0f} s]",
                    file=sys.stderr if args.json else sys.stdout,
                    flush=True,
                )
            seed += 1
    rates = {f"signal_{s:g}": rate([r for r in rows if r["signal"] == s]) for s, _, _ in plan}
    null_rows = [r for r in rows if r["signal"] == 0.0]
    null = rates.get("signal_0")
    passed = None if null is None else null["upper_95"] <= MAX_RATE  # None: no null look was run
    figures = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "level": LEVEL,
        "rates": rates,
        "null_now": rate(null_rows, "outcome_now") if null_rows else None,
        "null_check": {
            "passed": passed,
            "rule": f"one-sided 95% upper bound of the null rate at most {MAX_RATE:g}",
        },
        "runs": rows,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"\n{'signal':<8}{'looks':>7}{'significant':>13}{'rate':>7}{'upper 95%':>11}")
        for s, _, _ in plan:
            r = rates[f"signal_{s:g}"]
            print(
                f"{s:<8g}{r['looks']:>7}{r['significant']:>13}{_fmt(r['rate'], '.3f'):>7}{_fmt(r['upper_95'], '.3f'):>11}"
            )
        verdict = {True: "passed", False: "FAILED", None: "not run (no null look)"}[passed]
        print(f"null check ({figures['null_check']['rule']}): {verdict}; rows at signal > 0 are the power")
    if passed is False:
        sys.exit(1)
    return figures


if __name__ == "__main__":
    main()
