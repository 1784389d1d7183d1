"""Two power tables on the same markets, paired: a learner's change read market by market.

Rows of ``A`` and ``B`` are paired by shape, level and seed. Per cell and ``--column`` (the champion by
default): each table's significant count, the paired counts (both / ``A`` only / ``B`` only), the exact
McNemar p-value on the discordant markets (two-sided, the binomial at one half), each table's median
test Sharpe and the median of the per-market Sharpe differences (``A`` - ``B``), and per table the
champions fine-tuned past their start, those kept, and the markets where the champion's test Sharpe
is above its start's (:func:`fine_tuning`). ``--same`` names
columns the change should not touch: the read-out counts the paired markets where any of their
fields differ beyond float rounding (``benchmarks.power_rerun.same_value``; a check that the two runs built the same
markets and baselines).

    .venv/bin/python benchmarks/power_paired.py docs/figures/power_table_ic_single.jsonl \\
        docs/figures/power_table_ic_bagged.jsonl --column champion start \\
        --same ridge_quintile ridge_softmax boosted_quintile boosted_softmax oracle oracle_quintile
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.power_rerun import same_value  # noqa: E402


def read_rows(path: Path, tool: str) -> list[dict]:
    """A power table's JSON-lines rows; a one-line exit naming ``tool`` and the file when unreadable.

    Strict where ``power_table.read_rows`` is tolerant: a run resumes past a torn last row (its
    market runs again), but a read-out of a torn table would count a market short."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        sys.exit(f"{tool}: cannot read {path}: {exc}")


def load(path: Path) -> dict[tuple[str, float, int], dict]:
    """A table's rows keyed by (shape, level, seed)."""
    return {(r["shape"], float(r["level"]), int(r["seed"])): r for r in read_rows(path, "power_paired")}


def significant(row: dict, column: str) -> bool:
    return isinstance(row.get(column), dict) and row[column]["outcome"] == "significant"


def mcnemar(a_only: int, b_only: int) -> float:
    """Exact two-sided McNemar p-value on the discordant pairs."""
    n = a_only + b_only
    return 1.0 if n == 0 else float(binomtest(a_only, n, 0.5).pvalue)


def fine_tuning(rows: list[dict]) -> dict[str, int]:
    """Of a cell's rows: the champions fine-tuned past their start (the refit compared the two:
    ``champion_start_t`` set), of those the ones that stayed (not refitted), and the markets where the
    champion's test Sharpe is above its unfine-tuned start's."""
    tuned = [r for r in rows if r.get("champion_start_t") is not None]
    return {
        "fine_tuned": len(tuned),
        "kept": sum(not r.get("champion_refit", True) for r in tuned),
        "over_start": sum(
            isinstance(r.get("start"), dict) and r["champion"]["sharpe"] > r["start"]["sharpe"] for r in rows
        ),
    }


def paired(a: dict, b: dict, columns: list[str], same: list[str]) -> list[dict]:
    """Per (shape, level) and column of ``columns``: the paired read-out; ``differ``: the markets where
    a column of ``same`` differs between the tables beyond float rounding."""
    cells: dict[tuple[str, float], list[tuple[dict, dict]]] = defaultdict(list)
    for key in sorted(a.keys() & b.keys()):
        cells[key[:2]].append((a[key], b[key]))
    out = []
    for (shape, level), pairs in sorted(cells.items()):
        differ = sum(any(not same_value(ra.get(c), rb.get(c)) for c in same) for ra, rb in pairs)
        tuned = {side: fine_tuning([pair[i] for pair in pairs]) for i, side in enumerate("ab")}
        for column in columns:
            both = sum(significant(ra, column) and significant(rb, column) for ra, rb in pairs)
            a_only = sum(significant(ra, column) and not significant(rb, column) for ra, rb in pairs)
            b_only = sum(significant(rb, column) and not significant(ra, column) for ra, rb in pairs)
            sharpes = [(ra[column]["sharpe"], rb[column]["sharpe"]) for ra, rb in pairs]
            out.append(
                {
                    "shape": shape,
                    "level": level,
                    "column": column,
                    "markets": len(pairs),
                    "a": both + a_only,
                    "b": both + b_only,
                    "both": both,
                    "a_only": a_only,
                    "b_only": b_only,
                    "mcnemar_p": mcnemar(a_only, b_only),
                    "median_sharpe_a": statistics.median(x for x, _ in sharpes),
                    "median_sharpe_b": statistics.median(y for _, y in sharpes),
                    "median_sharpe_diff": statistics.median(x - y for x, y in sharpes),
                    "same_columns_differ": differ,
                    **{f"{k}_{side}": v for side, counts in tuned.items() for k, v in counts.items()},
                }
            )
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="the changed learner's rows")
    p.add_argument("b", type=Path, help="the rows it is paired with")
    p.add_argument("--column", nargs="+", default=["champion"])
    p.add_argument("--same", nargs="*", default=[], help="columns the change should leave equal")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = paired(load(args.a), load(args.b), args.column, args.same)
    if args.json:
        print(json.dumps(out))
        return out
    for r in out:
        print(
            f"{r['shape']:<20} {r['level']:>5} {r['column']:<10} {r['markets']:>3} markets: "
            f"A {r['a']}, B {r['b']} (both {r['both']}, A only {r['a_only']}, B only {r['b_only']}; "
            f"McNemar p {r['mcnemar_p']:.2g}); median Sharpe A {r['median_sharpe_a']:.2f}, "
            f"B {r['median_sharpe_b']:.2f}, A - B {r['median_sharpe_diff']:+.2f}; "
            f"markets where a --same column differs: {r['same_columns_differ']}"
        )
        if r["column"] == "champion":
            print(
                "  champions fine-tuned past their start (kept), test Sharpe above the start's: "
                f"A {r['fine_tuned_a']} ({r['kept_a']}), {r['over_start_a']}; "
                f"B {r['fine_tuned_b']} ({r['kept_b']}), {r['over_start_b']}"
            )
    return out


if __name__ == "__main__":
    main()
