"""The size and power of a median-Sharpe bar at 16 markets: how often "the champion's median test Sharpe
is above its start's" (or "at least a baseline's") holds when the champion adds nothing, and when it
adds a given Sharpe on every market, beside a paired test on the same markets.

The learner's bars compare two columns' median test Sharpe over a cell's 16 markets. Two columns
traded the same way on the same markets share most of their Sharpe (the market's own luck), so what
decides such a bar is the spread of their paired differences. This script reads a power table's rows
(one run's: a cell of two settings keys is refused) and, per linear cell and pair of columns,
simulates the bar under two models built from the rows:

- **no gain** (the bar's size): each market's two Sharpes exchangeable (their pair kept, which is
  which drawn by a fair coin), so neither column is better; by symmetry the bar then holds on about
  half the draws whatever the rows, and the paired test on at most 5%: these columns check the
  simulation, the data speak through the next;
- **a gain of delta** (its power): the same draws with ``delta`` added to the first column's Sharpe
  on every market.

For each it reports the share of draws where the bar holds (the first column's median strictly above
the second's, or at least it, as the bar reads) and, beside it, the power of a one-sided Wilcoxon
signed-rank test at 5% on the paired differences (what a paired read of the same 16 markets gives).
Draws, gains and seed are fixed here, before the first run: 10,000 draws a cell and gain (the
Wilcoxon test on the first 2,000 of them), gains 0, 0.05, 0.1, 0.2 and 0.3 Sharpe, seed 0; the cells are the table's linear ones (``minute_momentum`` and
``daily_cross_section``) at IC 0.02-0.10. About a minute (the Wilcoxon tests); no market is built.

    .venv/bin/python benchmarks/sharpe_bar_power.py
    .venv/bin/python benchmarks/sharpe_bar_power.py --pair champion ridge_softmax --at-least
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import wilcoxon

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.power_paired import read_rows  # noqa: E402

DRAWS = 10_000
GAINS = (0.0, 0.05, 0.1, 0.2, 0.3)
SEED = 0
LINEAR = ("minute_momentum", "daily_cross_section")
TABLE = Path(__file__).resolve().parents[1] / "docs" / "figures" / "power_table_ic_alone.jsonl"


def linear_cells(
    rows: list[dict], pair: tuple[str, str]
) -> dict[tuple[str, float], list[tuple[float, float]]]:
    """Per linear (shape, level): each market's Sharpes of the ``pair`` of columns (rows without
    both skipped; a row without ``shape`` is of the first tables, ``minute_momentum``). One run's
    rows only: a cell holding two settings keys, or a seed twice, is a one-line exit."""
    cells: dict[tuple[str, float], dict[int, tuple[float, float]]] = defaultdict(dict)
    keys: dict[tuple[str, float], set] = defaultdict(set)
    for row in rows:
        first, second = row.get(pair[0]), row.get(pair[1])
        shape = row.get("shape", "minute_momentum")
        if shape not in LINEAR or not isinstance(first, dict) or not isinstance(second, dict):
            continue
        cell = (shape, float(row["level"]))
        keys[cell].add(row.get("settings_key"))
        if len(keys[cell]) > 1:
            sys.exit(
                f"sharpe_bar_power: {shape} {cell[1]:g} holds rows of two settings keys; give one run's rows"
            )
        if int(row["seed"]) in cells[cell]:
            sys.exit(f"sharpe_bar_power: {shape} {cell[1]:g} holds seed {row['seed']} twice")
        cells[cell][int(row["seed"])] = (first["sharpe"], second["sharpe"])
    return {cell: [by_seed[s] for s in sorted(by_seed)] for cell, by_seed in cells.items()}


def bar_holds(first: np.ndarray, second: np.ndarray, at_least: bool) -> np.ndarray:
    """Per draw (rows of ``(draws, markets)``): whether the first column's median Sharpe is above the
    second's (``at_least``: at least it)."""
    a, b = np.median(first, axis=1), np.median(second, axis=1)
    return a >= b if at_least else a > b


def wilcoxon_power(diffs: np.ndarray) -> float:
    """Share of draws (rows) where a one-sided Wilcoxon signed-rank test at 5% finds the first column
    better (scipy's default method: the exact null distribution without zero or tied differences,
    else the normal approximation; a draw of all-zero differences never does)."""
    hits = 0
    for d in diffs:
        if np.any(d != 0):
            hits += wilcoxon(d, alternative="greater", zero_method="wilcox").pvalue < 0.05
    return hits / len(diffs)


def simulate(first: np.ndarray, second: np.ndarray, at_least: bool, rng: np.random.Generator) -> list[dict]:
    """The bar's and the paired test's rate at each gain, on draws that swap each market's pair by a
    fair coin (the same draws for every gain)."""
    swap = rng.random((DRAWS, first.size)) < 0.5
    a0 = np.where(swap, second, first)
    b0 = np.where(swap, first, second)
    out = []
    for gain in GAINS:
        a = a0 + gain
        out.append(
            {
                "gain": gain,
                "bar": round(float(bar_holds(a, b0, at_least).mean()), 3),
                "wilcoxon": round(wilcoxon_power((a - b0)[:2000]), 3),
            }
        )
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="?", type=Path, default=TABLE, help="a power table's JSON-lines rows")
    p.add_argument("--pair", nargs=2, default=("champion", "start"), metavar=("FIRST", "SECOND"))
    p.add_argument("--at-least", action="store_true", help="the bar reads 'at least' (a baseline's)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    cells = linear_cells(read_rows(args.rows, "sharpe_bar_power"), args.pair)
    rng = np.random.default_rng(SEED)
    out = []
    for (shape, level), pairs in sorted(cells.items()):
        first, second = np.array(pairs).T
        diffs = first - second
        out.append(
            {
                "shape": shape,
                "level": level,
                "markets": len(pairs),
                "median_first": round(float(np.median(first)), 2),
                "median_second": round(float(np.median(second)), 2),
                "paired_median_diff": round(float(np.median(diffs)), 3),
                "paired_sd": round(float(diffs.std(ddof=1)), 3),
                "rates": simulate(first, second, args.at_least, rng),
            }
        )
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.pair[0]} vs {args.pair[1]} ({'at least' if args.at_least else 'above'}), {DRAWS} draws")
        print(
            "cell | medians | paired sd | bar at gain " + " / ".join(f"{g:g}" for g in GAINS) + " | wilcoxon"
        )
        for c in out:
            bars = " / ".join(f"{r['bar']:.2f}" for r in c["rates"])
            tests = " / ".join(f"{r['wilcoxon']:.2f}" for r in c["rates"])
            print(
                f"{c['shape']} {c['level']:g} | {c['median_first']:.2f} vs {c['median_second']:.2f} | "
                f"{c['paired_sd']:.2f} | {bars} | {tests}"
            )
    return out


if __name__ == "__main__":
    main()
