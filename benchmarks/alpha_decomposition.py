"""Where a power table's columns part: each column's alpha split into costs and the gross edge, and
the alpha's standard error, medians per shape and level (read from the rows, nothing rerun).

Per row and column: ``alpha`` the alpha over buy-and-hold per day (net of costs), ``costs`` the
test window's costs per day (the row's ``costs`` over its ``test_sessions``), ``gross`` their sum,
``turnover`` per day, and ``se`` the alpha's standard error implied by its one-sided p-value
(``alpha / z`` with ``z`` the normal quantile of ``1 - p``; rows with ``|z| < 0.5`` left out, where
that ratio says nothing). Figures in basis points a day. With ``--share-of COLUMN`` each column's
gross edge is also stated as a share of that column's on the same markets: the median of the
per-market ratios and the pooled ratio (the sums over the cell's markets), since a ratio of two
medians mixes markets. Exploratory: the power table's fixed read-outs are
``benchmarks/power_table.py``'s.

    .venv/bin/python benchmarks/alpha_decomposition.py docs/figures/power_table_ic_bagged.jsonl --share-of oracle
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.power_paired import read_rows  # noqa: E402

FIELDS = ("alpha", "costs", "gross", "turnover", "se")


def decompose(row: dict, column: str) -> dict[str, float | None]:
    """One column of one row: alpha, costs, gross (bp a day), turnover and the alpha's standard error."""
    c = row[column]
    alpha = 1e4 * float(c["alpha_per_day"])
    costs = 1e4 * float(c["costs"]) / int(row["test_sessions"])
    p = min(max(float(c["alpha_p_value"]), 1e-6), 1 - 1e-6)
    z = float(norm.ppf(1 - p))
    return {
        "alpha": alpha,
        "costs": costs,
        "gross": alpha + costs,
        "turnover": float(c["turnover"]),
        "se": alpha / z if abs(z) >= 0.5 else None,
    }


def table(rows: list[dict]) -> dict[tuple[str, float, str], dict[str, float | None]]:
    """Medians of :func:`decompose` per (shape, level, column) over the rows that hold the column."""
    cells: dict[tuple[str, float, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        for column in row.get("columns", []):
            if not isinstance(row.get(column), dict):
                continue
            for key, value in decompose(row, column).items():
                if value is not None:
                    cells[(row["shape"], float(row["level"]), column)][key].append(value)
    return {
        key: {f: (statistics.median(v[f]) if v[f] else None) for f in FIELDS}
        for key, v in sorted(cells.items())
    }


def shares(rows: list[dict], of: str) -> dict[tuple[str, float, str], dict[str, float]]:
    """Per (shape, level, column): the gross edge as a share of column ``of``'s on the same rows, the
    median of the per-row ratios and the pooled ratio (rows where ``of``'s gross edge is not positive
    left out of the median)."""
    pairs: dict[tuple[str, float, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if not isinstance(row.get(of), dict):
            continue
        base = decompose(row, of)["gross"]
        for column in row.get("columns", []):
            if isinstance(row.get(column), dict):
                pairs[(row["shape"], float(row["level"]), column)].append(
                    (decompose(row, column)["gross"], base)
                )
    out = {}
    for key, values in sorted(pairs.items()):
        ratios = [g / b for g, b in values if b > 0]
        pooled = sum(b for _, b in values)
        out[key] = {
            "share_median": statistics.median(ratios) if ratios else None,
            "share_pooled": sum(g for g, _ in values) / pooled if pooled > 0 else None,
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", type=Path, help="a power table's jsonl")
    p.add_argument("--columns", nargs="*", default=None, help="only these columns")
    p.add_argument("--share-of", default=None, help="state each gross edge as a share of this column's")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = read_rows(args.rows, "alpha_decomposition")
    out = {k: v for k, v in table(rows).items() if args.columns is None or k[2] in args.columns}
    fields = FIELDS
    if args.share_of is not None:
        relative = shares(rows, args.share_of)
        out = {k: v | relative.get(k, {"share_median": None, "share_pooled": None}) for k, v in out.items()}
        fields = (*FIELDS, "share_median", "share_pooled")
    if args.json:
        print(json.dumps([{"shape": s, "level": lv, "column": c, **v} for (s, lv, c), v in out.items()]))
        return out
    print(f"{'shape':<20} {'level':>5} {'column':<17}" + "".join(f"{f:>13}" for f in fields))
    for (shape, level, column), v in out.items():
        cells = "".join(f"{'-':>13}" if v[f] is None else f"{v[f]:>13.2f}" for f in fields)
        print(f"{shape:<20} {level:>5} {column:<17}{cells}")
    return out


if __name__ == "__main__":
    main()
