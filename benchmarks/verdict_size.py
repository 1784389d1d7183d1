"""Size of the verdict's benchmark test: how often it rejects a true null at the 5% level.

The test is ``backtests.oos_test``'s (``backtests.bootstrap_t``: the studentized stationary
bootstrap of the HAC t-statistic, block length from ``arch.bootstrap.optimal_block_length``), run on
simulated daily excess returns with mean exactly 0 (H0's boundary) for each window length the verdict
reads (``backtests.verdict.MIN_OOS_SESSIONS`` and up) and four shapes of daily excess (``--test
excess``, the default):

- ``normal``: N(0, 1%);
- ``student_t3``: Student-t with 3 degrees of freedom, scaled to 1% (no fourth moment);
- ``left_skewed``: ``-(Exp(1) - 1)`` x 1% (skewness -2: rare large losses, frequent small gains);
- ``ar1``: AR(1) with phi = 0.2 and N(0, 1%) innovations (a burn-in of 50 days).

With ``--test alpha`` it measures the verdict's alpha test itself: the product's
``oos_test.alpha_test`` with its own adaptive replications (1,999 first, more near the level), one look,
rejecting when ``alpha_p_value_after_looks <= 0.05`` as ``backtests.verdict`` does. Each strategy is
``r_t = 0.8 b_t + e_t`` on a benchmark ``b_t`` ~ N(0.04%, 1%) (a positive drift, about 10% a year),
alpha exactly 0, for the nulls of :data:`ALPHA_NULLS`: ``e_t`` normal, Student-t(3),
``lognormal_skewed`` (``-(LogNormal(0, 1) - e^0.5)`` at 1%, skewness -6.2), ``left_skewed``, AR(1)
with phi 0.2 and 0.4, GARCH(1,1) (0.1, 0.85) and ``beta_1.5`` (``r = 1.5 b + e``, normal ``e``);
then the power on normal ``e`` at the planted daily alphas :data:`POWER_ALPHAS`, for the product's test
and for the full-size stationary bootstrap-t it replaced (what the repair cost). 500 strategies per
case (``--series``), seeds fixed (``--seed``, strategy ``i`` tested with seed ``i``); ``--nulls`` and
``--power-alphas`` split the cases between processes (the counts stay fixed):

    .venv/bin/python benchmarks/verdict_size.py                      # 2,000 series per case
    .venv/bin/python benchmarks/verdict_size.py --lengths 20 40 --json
    .venv/bin/python benchmarks/verdict_size.py --test alpha --json  # 40 and 126 sessions

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


def rejection_rate(
    shape: str,
    n: int,
    *,
    num_series: int,
    replications: int,
    seed: int,
    level: float = SIGNIFICANCE_LEVEL,
) -> float:
    """The share of ``num_series`` null series of ``shape`` and length ``n`` the benchmark test
    (``bootstrap_t``) rejects at ``level`` with ``replications`` fixed."""
    rng = np.random.default_rng([seed, n, SHAPES.index(shape)])
    x = simulate(shape, rng, num_series, n)
    blocks = np.array([oos_test.stationary_block_length(row) for row in x])
    count, _ = bootstrap_t.exceedances(x, blocks, replications, rng)
    p_values = (1 + count) / (1 + replications)
    return float(np.mean(p_values <= level))


def measure(lengths: list[int], *, num_series: int, replications: int, seed: int = 0) -> list[dict[str, Any]]:
    """One row per (length, shape): the rejection rate, whether the verdict reads that length, and
    whether the rate lies in :data:`BAND`."""
    rows = []
    for n in lengths:
        for shape in SHAPES:
            started = time.perf_counter()
            rate = rejection_rate(shape, n, num_series=num_series, replications=replications, seed=seed)
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


#: The alpha test's nulls (``--test alpha``): the residual shapes of a strategy with no alpha.
ALPHA_NULLS = (
    "normal",
    "student_t3",
    "lognormal_skewed",
    "left_skewed",
    "ar1_0.2",
    "ar1_0.4",
    "garch",
    "beta_1.5",
)
#: The alpha nulls' beta (``beta_1.5``: 1.5) and benchmark: ``r = BETA b + e``, ``b`` ~ N(BENCH_MEAN, SCALE).
BETA = 0.8
BENCH_MEAN = 0.0004
#: Planted daily alphas of the power rows (normal residuals at 1%: information ratios 1.6 and 3.2).
POWER_ALPHAS = (0.001, 0.002)
#: GARCH(1,1) of the ``garch`` null: ``s2_t = w + A e_{t-1}^2 + B s2_{t-1}``, unconditional variance SCALE^2.
GARCH_A, GARCH_B = 0.1, 0.85


def _ar1(rng: np.random.Generator, num_series: int, n: int, phi: float) -> np.ndarray:
    burn = 50
    noise = rng.normal(0.0, SCALE, (num_series, n + burn))
    x = np.zeros_like(noise)
    for t in range(1, n + burn):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x[:, burn:]


def _garch(rng: np.random.Generator, num_series: int, n: int) -> np.ndarray:
    burn = 200
    z = rng.normal(0.0, 1.0, (num_series, n + burn))
    e = np.zeros_like(z)
    s2 = np.full(num_series, SCALE**2)
    for t in range(n + burn):
        e[:, t] = np.sqrt(s2) * z[:, t]
        s2 = SCALE**2 * (1.0 - GARCH_A - GARCH_B) + GARCH_A * e[:, t] ** 2 + GARCH_B * s2
    return e[:, burn:]


def alpha_residuals(null: str, rng: np.random.Generator, num_series: int, n: int) -> np.ndarray:
    """``(num_series, n)`` residuals ``e`` of ``null`` with mean 0 and a daily scale of about 1%:
    ``lognormal_skewed`` is ``-(LogNormal(0, 1) - e^0.5)`` scaled to 1% (skewness -6.2), ``garch`` a
    GARCH(1,1) with normal innovations, ``ar1_<phi>`` an AR(1) with N(0, 1%) innovations."""
    if null == "lognormal_skewed":
        draws = rng.lognormal(0.0, 1.0, (num_series, n))
        return -(draws - np.exp(0.5)) / np.sqrt((np.e - 1.0) * np.e) * SCALE
    if null.startswith("ar1_"):
        return _ar1(rng, num_series, n, float(null.removeprefix("ar1_")))
    if null == "garch":
        return _garch(rng, num_series, n)
    if null == "beta_1.5":
        return simulate("normal", rng, num_series, n)
    return simulate(null, rng, num_series, n)


def alpha_markets(
    null: str, n: int, *, num_series: int, seed: int, alpha: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(r, b)``, each ``(num_series, n)``: strategies ``r = alpha + beta b + e`` on benchmarks ``b``."""
    rng = np.random.default_rng([seed, n, ALPHA_NULLS.index(null), round(alpha * 1e6)])
    e = alpha_residuals(null, rng, num_series, n)
    b = rng.normal(BENCH_MEAN, SCALE, (num_series, n))
    beta = 1.5 if null == "beta_1.5" else BETA
    return alpha + beta * b + e, b


def previous_alpha_p_value(r: np.ndarray, b: np.ndarray, seed: int) -> float:
    """The alpha test before the wild / m-out-of-n bootstrap: the full-size studentized stationary
    bootstrap (``oos_test.excess_p_value``) of ``r - beta_hat b``, for the power comparison."""
    db = b - b.mean()
    a = r - float(np.dot(db, r - r.mean()) / np.dot(db, db)) * b
    test = oos_test.excess_p_value(a, seed=seed)
    return test.p_value if test is not None else 1.0


def alpha_rejection_rate(
    null: str, n: int, *, num_series: int, seed: int, alpha: float = 0.0, previous: bool = False
) -> float:
    """The share of ``num_series`` strategies the verdict's alpha test rejects at the 5% level: the
    product's ``oos_test.alpha_test`` with its own adaptive replications, one look (the verdict's rule:
    ``alpha_p_value_after_looks <= level``); ``previous``: the test it replaced."""
    r, b = alpha_markets(null, n, num_series=num_series, seed=seed, alpha=alpha)
    rejected = 0
    for i in range(num_series):
        if previous:
            p = previous_alpha_p_value(r[i], b[i], seed=i)
        else:
            p = oos_test.alpha_test(r[i], b[i], seed=i)["alpha_p_value_after_looks"]
        rejected += int(p is not None and p <= SIGNIFICANCE_LEVEL)
    return rejected / num_series


def measure_alpha(
    lengths: list[int], nulls: list[str], alphas: list[float], *, num_series: int, seed: int
) -> list[dict[str, Any]]:
    """Size rows (each null, alpha 0) and power rows (normal residuals at each planted alpha, the
    product's test and the one it replaced), one per length."""
    cases = [(null, 0.0, False) for null in nulls]
    cases += [("normal", a, previous) for a in alphas for previous in (False, True)]
    rows = []
    for n in lengths:
        for null, alpha, previous in cases:
            started = time.perf_counter()
            rate = alpha_rejection_rate(
                null, n, num_series=num_series, seed=seed, alpha=alpha, previous=previous
            )
            row = {
                "sessions": n,
                "shape": null,
                "alpha_per_day": alpha,
                "test": "previous" if previous else "product",
                "rejection_rate": rate,
                "read_by_verdict": n >= MIN_OOS_SESSIONS,
                "in_band": BAND[0] <= rate <= BAND[1] if alpha == 0.0 else None,
                "seconds": round(time.perf_counter() - started, 2),
            }
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def _print_table(rows: list[dict[str, Any]], lengths: list[int], shapes: list[str], title: str) -> None:
    print(title)
    print(f"{'sessions':>8}  " + "  ".join(f"{s:>16}" for s in shapes))
    for n in lengths:
        cells = {r["shape"]: r for r in rows if r["sessions"] == n}
        mark = "" if n >= MIN_OOS_SESSIONS else "  (below the verdict's minimum)"
        line = "  ".join(
            f"{cells[s]['rejection_rate']:>16.1%}" if s in cells else f"{'':>16}" for s in shapes
        )
        print(f"{n:>8}  {line}{mark}")


def _print_power(rows: list[dict[str, Any]], lengths: list[int]) -> None:
    power = [r for r in rows if r["alpha_per_day"] != 0.0]
    if not power:
        return
    print("power on normal residuals at 1%/day (the product's test / the full-size bootstrap-t it replaced)")
    for n in lengths:
        for alpha in sorted({r["alpha_per_day"] for r in power}):
            pair = {
                r["test"]: r["rejection_rate"]
                for r in power
                if r["sessions"] == n and r["alpha_per_day"] == alpha
            }
            print(f"{n:>8}  alpha {100 * alpha:.2f}%/day: {pair['product']:.1%} / {pair['previous']:.1%}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="sessions per series")
    p.add_argument("--series", type=int, default=None, help="series per case (2,000 excess, 500 alpha)")
    p.add_argument("--replications", type=int, default=499, help="excess: bootstrap replications per series")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--test", choices=("excess", "alpha"), default="excess", help="the mean excess or the alpha"
    )
    p.add_argument("--nulls", nargs="+", choices=ALPHA_NULLS, default=list(ALPHA_NULLS), help="alpha: nulls")
    p.add_argument(
        "--power-alphas",
        type=float,
        nargs="*",
        default=list(POWER_ALPHAS),
        help="alpha: planted daily alphas",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    alpha = args.test == "alpha"
    lengths = args.lengths or ([40, 126] if alpha else [20, 40, 63, 126])
    series = args.series or (500 if alpha else 2_000)
    if alpha:
        rows = measure_alpha(lengths, args.nulls, args.power_alphas, num_series=series, seed=args.seed)
    else:
        rows = measure(lengths, num_series=series, replications=args.replications, seed=args.seed)
    failed = [r for r in rows if r["read_by_verdict"] and r["in_band"] is False]
    if args.json:
        doc = {
            "level": SIGNIFICANCE_LEVEL,
            "band": list(BAND),
            "min_oos_sessions": MIN_OOS_SESSIONS,
            "series": series,
            "replications": "the product's adaptive count" if alpha else args.replications,
            "seed": args.seed,
            "test": args.test,
            "rows": rows,
            "passed": not failed,
        }
        print(json.dumps(doc, indent=2))
    else:
        shapes = args.nulls if alpha else list(SHAPES)
        size_rows = [r for r in rows if r.get("alpha_per_day", 0.0) == 0.0]
        _print_table(
            size_rows, lengths, shapes, f"rejection rate of a true null at 5% ({series} series per case)"
        )
        if alpha:
            _print_power(rows, lengths)
        print("passed" if not failed else f"FAILED: {len(failed)} case(s) outside {BAND}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
