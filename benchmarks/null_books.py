"""The verdict's size on the null markets, split by how far a column's book trades from equal weight.

A direct champion whose start finds no skill is the zero model: equal scores, so the equal-weight
book, whose alpha over buy-and-hold is the market's draw and has a small tracking error. Is the alpha
test's size on those books the level's? Read from power tables' rows at level 0 (no planted edge):
per table and ``--column``, the null markets, those where the column's book turned over less than
``--turnover`` of itself a day (equal weight rebalanced daily turns over about 0.03 on these
markets), how many of each group read "significant", the one-sided 95% upper bound of that rate and
the binomial P(X >= k) at the level; then the tables pooled by market (:func:`pooled`).

    .venv/bin/python benchmarks/null_books.py docs/figures/power_table_ic.jsonl \\
        docs/figures/power_table_ic_blend.jsonl docs/figures/power_table_ic_bagged.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scipy.stats import beta, binom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.power_paired import read_rows  # noqa: E402

LEVEL = 0.05


def upper_95(k: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound of a rate seen k times in n."""
    return 1.0 if k >= n else float(beta.ppf(0.95, k + 1, n - k))


def p_at_least(k: int, n: int, level: float = LEVEL) -> float:
    """Binomial P(X >= k) for n trials at the level: how surprising k false positives are."""
    return 1.0 if k == 0 else float(binom.sf(k - 1, n, level))


def reading(k: int, n: int) -> dict:
    """A group's count: ``k`` significant of ``n``, its rate, bound and binomial P(X >= k)."""
    return {
        "markets": n,
        "significant": k,
        "rate": k / n if n else None,
        "upper_95": upper_95(k, n) if n else None,
        "p_at_least": p_at_least(k, n),
    }


def group(rows: list[dict], column: str, turnover: float) -> dict:
    """Null rows that hold ``column``, split by its book's daily turnover; counts and their reading."""
    held = [r[column] for r in rows if float(r["level"]) == 0.0 and isinstance(r.get(column), dict)]
    out: dict = {"column": column, "nulls": len(held)}
    for name, books in (
        ("near_equal_weight", [b for b in held if b["turnover"] < turnover]),
        ("other", [b for b in held if b["turnover"] >= turnover]),
    ):
        out[name] = reading(sum(b["outcome"] == "significant" for b in books), len(books))
    return out


def pooled(tables: list[list[dict]], columns: list[str], turnover: float) -> dict:
    """Every table's null markets, each counted once per group (its books of ``columns`` near equal
    weight, and the rest): significant when any of its books in the group is. A champion and its
    start are often one book, so markets, not books, are the independent units; "any of" makes the
    rate an upper reading of each book's."""
    groups: dict[str, list[bool]] = {"near_equal_weight": [], "other": []}
    nulls = 0
    for rows in tables:
        for r in rows:
            if float(r["level"]) != 0.0:
                continue
            books = [r[c] for c in columns if isinstance(r.get(c), dict)]
            if not books:
                continue
            nulls += 1
            near = [b for b in books if b["turnover"] < turnover]
            rest = [b for b in books if b["turnover"] >= turnover]
            for name, group_books in (("near_equal_weight", near), ("other", rest)):
                if group_books:
                    groups[name].append(any(b["outcome"] == "significant" for b in group_books))
    out: dict = {"column": "+".join(columns), "nulls": nulls}
    for name, flags in groups.items():
        out[name] = reading(sum(flags), len(flags))
    return out


def _cell(g: dict) -> str:
    if not g["markets"]:
        return "-"
    return f"{g['significant']} of {g['markets']} ({g['rate']:.1%}; up to {g['upper_95']:.1%}; P {g['p_at_least']:.2f})"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tables", nargs="+", type=Path, help="power tables' JSON-lines rows")
    p.add_argument("--column", nargs="+", default=["champion", "start"], help="columns to read")
    p.add_argument(
        "--turnover", type=float, default=0.06, help="near equal weight: daily turnover below this"
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    if args.turnover <= 0:
        p.error(f"--turnover: positive, got {args.turnover}")
    out, tables = [], []
    for path in args.tables:
        rows = read_rows(path, "null_books")
        tables.append(rows)
        for column in args.column:
            out.append({"table": path.name, **group(rows, column, args.turnover)})
    out.append({"table": "all, by market", **pooled(tables, args.column, args.turnover)})
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"null markets: significant books, near equal weight (turnover < {args.turnover}/day) and the rest"
        )
        print("table | column | nulls | near equal weight | other")
        for r in out:
            print(
                f"{r['table']} | {r['column']} | {r['nulls']} | {_cell(r['near_equal_weight'])} | {_cell(r['other'])}"
            )
    return out


if __name__ == "__main__":
    main()
