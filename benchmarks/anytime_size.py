"""Size and power of the nightly promotion rule (``backtests.anytime``) over simulated loops of nights.

A loop is ``--nights`` nights; each night a new challenger enters and is tested every later night, the
``k``-th at its share of the level (``anytime.challenger_level``), with no bound on the book: every
challenger stays until the loop ends (the most looks a loop can take, so the most false promotions).
Before a champion exists the test against the champion is the test against buy-and-hold, so one
stream of daily excess per challenger carries both (a null challenger then faces one test, not two:
the harder case for the size).

- **Size**: every challenger has no edge (mean excess exactly 0, daily scale 1%) in one of four
  shapes: ``normal``; ``student_t3`` (Student-t, 3 degrees of freedom); ``left_skewed``
  (``-(Exp(1) - 1)``, skewness -2: rare large losses); ``ar1`` (AR(1), phi 0.2). A loop's false
  promotion is any challenger passing. The rate's one-sided 95% Clopper-Pearson upper bound must be
  at most the level.
- **Power**: every challenger carries a planted edge of daily information ratio ``--edges`` (mean excess
  IR x 1%, Student-t(3) noise at 1%): nights until the loop's first promotion (median and 90th
  percentile over loops; a loop with none counts as never).

    .venv/bin/python benchmarks/anytime_size.py                    # 400 loops of 250 nights
    .venv/bin/python benchmarks/anytime_size.py --loops 200 --json

Prints a table (or one JSON document); exits 1 when a shape's upper bound exceeds the level.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from scipy.stats import beta  # noqa: E402

from backtests import anytime  # noqa: E402
from backtests.verdict import SIGNIFICANCE_LEVEL  # noqa: E402

SHAPES = (
    "normal",
    "student_t3",
    "lognormal_skewed",
    "left_skewed",
    "ar1_0.2",
    "ar1_0.4",
    "garch",
    "beta_1.5",
    "carry_crash",
)
#: Shapes the test promises its level on; carry-and-crash is reported beside them (docs/nightly.md).
PROMISED = SHAPES[:-1]
SCALE = 0.01
#: Loops simulated at once (memory: nights x loops x nights doubles, a few copies).
LOOPS_PER_CHUNK = 20


def _ar1(rng: np.random.Generator, phi: float, sessions: int, columns: int) -> np.ndarray:
    burn = 50
    shocks = rng.normal(0.0, SCALE * np.sqrt(1.0 - phi * phi), (sessions + burn, columns))
    x = np.zeros_like(shocks)
    for t in range(1, sessions + burn):
        x[t] = phi * x[t - 1] + shocks[t]
    return x[burn:]


def _garch(rng: np.random.Generator, sessions: int, columns: int) -> np.ndarray:
    """GARCH(1,1), omega 0.05, alpha 0.1, beta 0.85 (unit variance), scaled to 1%."""
    burn = 200
    h = np.ones(columns)
    x = np.zeros((sessions + burn, columns))
    for t in range(sessions + burn):
        x[t] = np.sqrt(h) * rng.normal(size=columns)
        h = 0.05 + 0.1 * x[t] ** 2 + 0.85 * h
    return x[burn:] * SCALE


def noise(shape: str, rng: np.random.Generator, sessions: int, columns: int) -> np.ndarray:
    """``(sessions, columns)`` daily alpha of ``shape`` with mean 0 and scale 1%, as the test reads it
    (``beta_1.5``: a strategy of beta 1.5 on a market drifting 0.04% a day, through
    ``anytime.alpha_excess``)."""
    size = (sessions, columns)
    if shape == "normal":
        return rng.normal(0.0, SCALE, size)
    if shape == "student_t3":
        return rng.standard_t(3, size) * SCALE / np.sqrt(3.0)
    if shape == "lognormal_skewed":  # -(lognormal(0, 1)) standardized: skewness about -6.2
        z = np.exp(rng.normal(0.0, 1.0, size))
        return -(z - np.exp(0.5)) / np.sqrt((np.e - 1.0) * np.e) * SCALE
    if shape == "left_skewed":
        return -(rng.exponential(1.0, size) - 1.0) * SCALE
    if shape.startswith("ar1_"):
        return _ar1(rng, float(shape[4:]), sessions, columns)
    if shape == "garch":
        return _garch(rng, sessions, columns)
    if shape == "beta_1.5":
        market = rng.normal(0.0004, SCALE, size)
        return anytime.alpha_excess(1.5 * market + rng.normal(0.0, SCALE, size), market)
    if shape == "carry_crash":  # +0.1% most days, -9.9% one day in a hundred: mean 0
        crash = rng.random(size) < 0.01
        return np.where(crash, -0.099, 0.001) + rng.normal(0.0, 0.003, size)
    raise ValueError(f"unknown shape {shape!r}: choose {', '.join(SHAPES)}")


def single_streams(shape: str, *, streams: int, sessions: int, level: float, seed: int) -> dict[str, Any]:
    """One challenger's chance of ever crossing ``1 / level`` within ``sessions``, over ``streams``."""
    rng = np.random.default_rng([seed, 7, SHAPES.index(shape)])
    x = noise(shape, rng, sessions, streams)
    count = int(np.sum(anytime.first_crossing(anytime.betting_log_wealth(x), level) >= 0))
    rate = count / streams
    se = float(np.sqrt(level * (1 - level) / streams))
    return {"shape": shape, "crossed": count, "rate": rate, "within_two_se": rate <= level + 2 * se}


def first_promotions(x: np.ndarray, nights: int, level: float, per_block: int) -> np.ndarray:
    """Night (0-based) of each loop's first promotion, -1 where none. ``x`` is ``(nights, loops *
    nights)``: column ``j`` is challenger ``j % nights`` of loop ``j // nights``, which enters on that
    night (earlier sessions are masked: it has not seen them)."""
    columns = x.shape[1]
    entry = np.arange(columns) % nights  # 0-based night of entry
    masked = np.where(np.arange(nights)[:, None] >= entry[None, :], x, np.nan)
    levels = np.array([anytime.challenger_level(level, k + 1, per_block) for k in range(nights)])
    crossing = anytime.first_crossing(anytime.betting_log_wealth(masked), levels[entry])
    night = np.where(crossing >= 0, crossing, np.iinfo(np.int64).max).reshape(-1, nights)
    first = night.min(axis=1)
    return np.where(first == np.iinfo(np.int64).max, -1, first)


def run_loops(
    shape: str, edge: float, *, loops: int, nights: int, level: float, per_block: int, seed: int
) -> np.ndarray:
    """First-promotion night of ``loops`` loops (-1: none) for challengers of daily IR ``edge``."""
    rng = np.random.default_rng([seed, SHAPES.index(shape), int(round(edge * 1000))])
    if edge and shape == "beta_1.5":
        raise ValueError("the planted edge is drawn on the other shapes")
    out = []
    for start in range(0, loops, LOOPS_PER_CHUNK):
        chunk = min(LOOPS_PER_CHUNK, loops - start)
        x = noise(shape, rng, nights, chunk * nights) + edge * SCALE
        out.append(first_promotions(x, nights, level, per_block))
    return np.concatenate(out)


def upper_bound(count: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen ``count`` times in ``trials``."""
    return 1.0 if count >= trials else float(beta.ppf(confidence, count + 1, trials - count))


def measure(
    *, loops: int, nights: int, edges: list[float], level: float, per_block: int, seed: int, streams: int
) -> dict[str, Any]:
    """The single-challenger rows, the loops' size rows (one per shape) and the power rows (one per
    edge)."""
    single = [
        single_streams(shape, streams=streams, sessions=nights, level=level, seed=seed) for shape in SHAPES
    ]
    size, power = [], []
    for shape in SHAPES:
        started = time.perf_counter()
        first = run_loops(shape, 0.0, loops=loops, nights=nights, level=level, per_block=per_block, seed=seed)
        count = int(np.sum(first >= 0))
        bound = upper_bound(count, loops)
        size.append(
            {
                "shape": shape,
                "false_promotions": count,
                "rate": count / loops,
                "upper_bound_95": bound,
                "passed": bound <= level or shape not in PROMISED,
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
    for edge in edges:
        first = run_loops(
            "student_t3", edge, loops=loops, nights=nights, level=level, per_block=per_block, seed=seed
        )
        nights_to = np.where(first >= 0, first + 1, np.inf)
        power.append(
            {
                "daily_information_ratio": edge,
                "promoted_share": float(np.mean(first >= 0)),
                "median_nights": float(np.quantile(nights_to, 0.5, method="inverted_cdf")),
                "p90_nights": float(np.quantile(nights_to, 0.9, method="inverted_cdf")),
            }
        )
    return {"single": single, "size": size, "power": power}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loops", type=int, default=400, help="simulated loops per case (at least 200)")
    p.add_argument("--nights", type=int, default=250, help="nights per loop")
    p.add_argument("--edges", type=float, nargs="+", default=[0.2, 0.3, 0.5, 0.8], help="daily IRs")
    p.add_argument("--level", type=float, default=SIGNIFICANCE_LEVEL)
    p.add_argument("--per-block", type=int, default=anytime.ENTRIES_PER_BLOCK)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--streams", type=int, default=4000, help="single challengers per shape (at least 4,000)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    started = time.perf_counter()
    figures = measure(
        loops=args.loops,
        nights=args.nights,
        edges=args.edges,
        level=args.level,
        per_block=args.per_block,
        seed=args.seed,
        streams=args.streams,
    )
    failed = [r for r in figures["size"] if not r["passed"]]
    failed += [r for r in figures["single"] if not r["within_two_se"] and r["shape"] in PROMISED]
    if args.json:
        doc = {
            "level": args.level,
            "loops": args.loops,
            "nights": args.nights,
            "per_block": args.per_block,
            "betting": dataclasses.asdict(anytime.BETTING),
            "seed": args.seed,
            **figures,
            "passed": not failed,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"one challenger ever crossing 1/{args.level:g} within {args.nights} sessions, {args.streams} each"
        )
        for r in figures["single"]:
            print(f"  {r['shape']:>16}: {r['rate']:.2%}")
        print(f"false promotions over {args.nights} nights, {args.loops} loops, level {args.level:g}")
        for r in figures["size"]:
            print(
                f"  {r['shape']:>12}: {r['false_promotions']:>4} ({r['rate']:.1%}), "
                f"95% upper bound {r['upper_bound_95']:.1%}"
            )
        print("nights to the first promotion (Student-t(3) excess)")
        for r in figures["power"]:
            print(
                f"  IR {r['daily_information_ratio']:.2f}/day: promoted {r['promoted_share']:.0%}, "
                f"median {r['median_nights']:g}, 90th percentile {r['p90_nights']:g}"
            )
        print("passed" if not failed else f"FAILED: {len(failed)} row(s) above the level")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
