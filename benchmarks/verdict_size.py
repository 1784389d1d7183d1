"""Size of the verdict's benchmark test: how often it rejects a true null at the 5% level.

The test is ``backtests.oos_test``'s (``backtests.bootstrap_t``: the studentized stationary
bootstrap of the HAC t-statistic, block length from ``arch.bootstrap.optimal_block_length``), run on
simulated daily excess returns with mean exactly 0 (H0's boundary) for each window length the verdict
reads (``backtests.verdict.MIN_OOS_SESSIONS`` and up) and four shapes of daily excess:

- ``normal``: N(0, 1%);
- ``student_t3``: Student-t with 3 degrees of freedom, scaled to 1% (no fourth moment);
- ``left_skewed``: ``-(Exp(1) - 1)`` x 1% (skewness -2: rare large losses, frequent small gains);
- ``ar1``: AR(1) with phi = 0.2 and N(0, 1%) innovations (a burn-in of 50 days).

With ``--test alpha`` the series are the verdict's alpha test's (``oos_test.alpha_test``): a strategy
``r_t = 0.8 b_t + e_t`` on a benchmark ``b_t`` ~ N(0.04%, 1%) with ``e_t`` of the shape above (alpha
exactly 0), tested on ``r_t - beta_hat b_t`` with beta estimated per series, as the verdict does.

Each case is ``--series`` independent series (seeded); the replications are fixed at
``--replications`` (the p-value ``(1 + #{t* >= t}) / (1 + B)`` keeps its level for any ``B``; the
product adds replications only near the level, where they sharpen, not shift, the decision). A case
passes when its rejection rate lies in [2.5%, 7.5%]. Pure numpy and statistics, no training:

    .venv/bin/python benchmarks/verdict_size.py                      # 2,000 series per case
    .venv/bin/python benchmarks/verdict_size.py --lengths 20 40 --json
    .venv/bin/python benchmarks/verdict_size.py --test alpha --lengths 40 126

Prints a table (or, with ``--json``, one JSON document); exits 1 when a case at a length the verdict
reads (at least ``MIN_OOS_SESSIONS``) falls outside the band.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from backtests import bootstrap_t, oos_test  # noqa: E402
from backtests.verdict import MIN_OOS_SESSIONS, SIGNIFICANCE_LEVEL  # noqa: E402

SHAPES = ("normal", "student_t3", "left_skewed", "ar1")
BAND = (0.025, 0.075)
SCALE = 0.01


def simulate(shape: str, rng: np.random.Generator, num_series: int, n: int) -> np.ndarray:
    """``(num_series, n)`` daily excess returns of ``shape`` with mean 0 (see the module docstring)."""
    if shape == "normal":
        return rng.normal(0.0, SCALE, (num_series, n))
    if shape == "student_t3":
        return rng.standard_t(3, (num_series, n)) * SCALE / np.sqrt(3.0)
    if shape == "left_skewed":
        return -(rng.exponential(1.0, (num_series, n)) - 1.0) * SCALE
    if shape == "ar1":
        burn = 50
        noise = rng.normal(0.0, SCALE, (num_series, n + burn))
        x = np.zeros_like(noise)
        for t in range(1, n + burn):
            x[:, t] = 0.2 * x[:, t - 1] + noise[:, t]
        return x[:, burn:]
    raise ValueError(f"unknown shape {shape!r}: choose {', '.join(SHAPES)}")


#: The alpha null's beta and benchmark: ``r = BETA b + e``, ``b`` ~ N(BENCH_MEAN, SCALE).
BETA = 0.8
BENCH_MEAN = 0.0004


def alpha_residuals(shape: str, rng: np.random.Generator, num_series: int, n: int) -> np.ndarray:
    """``(num_series, n)`` alpha series ``r - beta_hat b`` of strategies with no alpha (see the module
    docstring), beta estimated per series by OLS as ``backtests.oos_test.alpha_test`` does."""
    e = simulate(shape, rng, num_series, n)
    b = rng.normal(BENCH_MEAN, SCALE, (num_series, n))
    r = BETA * b + e
    db = b - b.mean(axis=1, keepdims=True)
    beta = np.einsum("ij,ij->i", db, r - r.mean(axis=1, keepdims=True)) / np.einsum("ij,ij->i", db, db)
    return r - beta[:, None] * b


def rejection_rate(
    shape: str,
    n: int,
    *,
    num_series: int,
    replications: int,
    seed: int,
    level: float = SIGNIFICANCE_LEVEL,
    test: str = "excess",
) -> float:
    """The share of ``num_series`` null series of ``shape`` and length ``n`` the test rejects at ``level``."""
    rng = np.random.default_rng([seed, n, SHAPES.index(shape)])
    x = (
        simulate(shape, rng, num_series, n)
        if test == "excess"
        else alpha_residuals(shape, rng, num_series, n)
    )
    blocks = np.array([oos_test.stationary_block_length(row) for row in x])
    count, _ = bootstrap_t.exceedances(x, blocks, replications, rng)
    p_values = (1 + count) / (1 + replications)
    return float(np.mean(p_values <= level))


def measure(
    lengths: list[int], *, num_series: int, replications: int, seed: int = 0, test: str = "excess"
) -> list[dict[str, Any]]:
    """One row per (length, shape): the rejection rate, whether the verdict reads that length, and
    whether the rate lies in :data:`BAND`."""
    rows = []
    for n in lengths:
        for shape in SHAPES:
            started = time.perf_counter()
            rate = rejection_rate(
                shape, n, num_series=num_series, replications=replications, seed=seed, test=test
            )
            rows.append(
                {
                    "sessions": n,
                    "shape": shape,
                    "rejection_rate": rate,
                    "read_by_verdict": n >= MIN_OOS_SESSIONS,
                    "in_band": BAND[0] <= rate <= BAND[1],
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[20, 40, 63, 126], help="sessions per series")
    p.add_argument("--series", type=int, default=2_000, help="null series per case")
    p.add_argument("--replications", type=int, default=499, help="bootstrap replications per series")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--test", choices=("excess", "alpha"), default="excess", help="the mean excess or the alpha"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    rows = measure(
        args.lengths, num_series=args.series, replications=args.replications, seed=args.seed, test=args.test
    )
    failed = [r for r in rows if r["read_by_verdict"] and not r["in_band"]]
    if args.json:
        doc = {
            "level": SIGNIFICANCE_LEVEL,
            "band": list(BAND),
            "min_oos_sessions": MIN_OOS_SESSIONS,
            "series": args.series,
            "replications": args.replications,
            "seed": args.seed,
            "test": args.test,
            "rows": rows,
            "passed": not failed,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(f"rejection rate of a true null at {SIGNIFICANCE_LEVEL:.0%} ({args.series} series per case)")
        print(f"{'sessions':>8}  " + "  ".join(f"{s:>12}" for s in SHAPES))
        for n in args.lengths:
            cells = [r for r in rows if r["sessions"] == n]
            mark = "" if n >= MIN_OOS_SESSIONS else "  (below the verdict's minimum)"
            print(f"{n:>8}  " + "  ".join(f"{r['rejection_rate']:>12.1%}" for r in cells) + mark)
        print("passed" if not failed else f"FAILED: {len(failed)} case(s) outside {BAND}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
