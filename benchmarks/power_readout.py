"""The power table's read-out: per level and column the power with its Clopper-Pearson interval, the
median p-values and Sharpe ratio, and the commits each column was measured on
(``benchmarks/power_table.py`` writes the rows)."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta as beta_distribution

from benchmarks.power_columns import COLUMNS
from benchmarks.power_rerun import column_commit


def interval(k: int, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Two-sided Clopper-Pearson interval of a rate ``k / n``."""
    if n == 0:
        return None, None
    a = (1 - confidence) / 2
    low = 0.0 if k == 0 else float(beta_distribution.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(beta_distribution.ppf(1 - a, k + 1, n - k))
    return low, high


def upper_95(k: int, n: int) -> float | None:
    """One-sided 95% Clopper-Pearson upper bound."""
    if n == 0:
        return None
    return 1.0 if k == n else float(beta_distribution.ppf(0.95, k + 1, n - k))


def _short(commit: str | None) -> str:
    """A commit's first 12 hex digits, ``+dirty`` kept."""
    if commit is None:
        return "unknown"
    return commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")


def _median(values: list) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(finite)) if finite else None


def table(rows: list[dict]) -> list[dict]:
    """Per level and column: the power (share of the markets that hold the column found significant)
    with its two-sided 95% Clopper-Pearson interval and one-sided 95% upper bound (the
    false-positive rate's at level 0), the median p-values (the mean excess's; the alpha's, which
    the verdict tests: rows written before the alpha fields lack it) and the median test Sharpe."""
    out = []
    for level in sorted({r["level"] for r in rows}):
        for name in COLUMNS:
            mine = [r[name] for r in rows if r["level"] == level and r.get(name) is not None]
            k, n = sum(c["outcome"] == "significant" for c in mine), len(mine)
            low, high = interval(k, n)
            out.append(
                {
                    "level": level,
                    "strategy": name,
                    "markets": n,
                    "significant": k,
                    "power": k / n if n else None,
                    "ci95_low": low,
                    "ci95_high": high,
                    "upper_95_one_sided": upper_95(k, n),
                    "median_p": _median([c.get("p_value") for c in mine]),
                    "median_alpha_p": _median([c.get("alpha_p_value") for c in mine]),
                    "median_sharpe": _median([c.get("sharpe") for c in mine]),
                    "commits": sorted(
                        {_short(column_commit(r, name)) for r in rows if r["level"] == level and r.get(name)}
                    ),
                }
            )
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def print_table(result: list[dict]) -> None:
    """The table as text: a column no row of a level holds shows "-"."""
    print(
        f"{'level':>6} {'strategy':>16} {'markets':>7} {'signif.':>7} {'power':>6}  {'95% CI':<14}"
        f" {'median alpha p':>14} {'median Sharpe':>13}  commits"
    )
    for r in result:
        if r["markets"] == 0:
            print(
                f"{r['level']:>6} {r['strategy']:>16} {'-':>7} {'-':>7} {'-':>6}  {'-':<14} {'-':>14} {'-':>13}"
            )
            continue
        ci = f"[{_fmt(r['ci95_low'], '.2f')}, {_fmt(r['ci95_high'], '.2f')}]"
        print(
            f"{r['level']:>6} {r['strategy']:>16} {r['markets']:>7} {r['significant']:>7}"
            f" {_fmt(r['power'], '.2f'):>6}  {ci:<14} {_fmt(r['median_alpha_p'], '.2g'):>14}"
            f" {_fmt(r['median_sharpe'], '.2f'):>13}  {' '.join(r.get('commits', ()))}"
        )
