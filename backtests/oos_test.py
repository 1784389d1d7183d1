"""The out-of-sample test of a selected strategy on its held-out window, after the looks counted.

Two questions about the daily returns ``r_t`` of the strategy a tournament selected (champion or
ensemble), asked on the test window, which took no part in the selection:

- **is its Sharpe ratio above zero?** The probabilistic Sharpe ratio (PSR) against 0; when the same
  market's overlapping windows were looked at ``K - 1`` times before (``backtests.looks``), the
  deflated Sharpe ratio with ``K`` trials and the variance of those ``K`` looks' per-day Sharpe ratios
  (:func:`psr_after_looks`; a first look is the plain PSR);
- **does it beat the benchmark?** A one-sided test of the MEAN of its daily excess returns
  ``x_t = r_t - b_t`` over buy-and-hold (and, reported, over equal weight): H0 ``E[x] <= 0``, p-value
  from a stationary block bootstrap (Politis and Romano, 1994; ``arch.bootstrap.StationaryBootstrap``)
  with the block length of ``arch.bootstrap.optimal_block_length`` (its ``stationary`` column, Politis
  and White, 2004, with Patton, Politis and White's 2009 correction), :data:`REPLICATIONS` replications
  and a recorded seed (:func:`bootstrap_p_value`). With ``K`` looks the p-value is Sidak-adjusted:
  ``1 - (1 - p)^K`` (:func:`sidak`).

The mean, not the Sharpe ratio, of the excess returns: the mean excess is what a user gives up or gains
by holding the strategy instead of the benchmark, and its bootstrap needs no variance ratio of two
short samples. ``arch`` is imported on first use (it loads pandas and statsmodels: a second or more),
so importing this module stays light.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backtests import selection

#: Bootstrap replications of the benchmark test: the p-value's Monte Carlo standard error is at most
#: sqrt(0.05 * 0.95 / 2000) ~ 0.005 around the 5% level.
REPLICATIONS = 2_000
#: How the benchmark test's p-value is computed, as written into metrics.json.
TEST_NAME = (
    "one-sided stationary bootstrap of the mean daily excess return (arch); "
    "p = (1 + #{centred bootstrap mean >= observed mean}) / (1 + replications)"
)


def sharpe_per_day(returns: Any) -> float | None:
    """Mean over standard deviation (ddof=1) of the returns (per period, not annualized); None when
    undefined (fewer than 2 finite returns, or no dispersion)."""
    x = np.asarray(returns, dtype=np.float64)
    x = x[np.isfinite(x)]
    # Flat means max == min: a float standard deviation of equal values is only approximately 0.
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return None
    return float(np.mean(x)) / float(np.std(x, ddof=1))


def stationary_block_length(x: Any) -> float:
    """The expected block length of a stationary bootstrap of the 1-D series ``x``:
    ``arch.bootstrap.optimal_block_length``'s ``stationary`` column, at least 1. A series too short for
    its autocorrelation estimates (a few returns) gets 1, the i.i.d. bootstrap."""
    from arch.bootstrap import optimal_block_length

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # short series: 0/0 autocorrelations
            block = float(optimal_block_length(np.asarray(x, dtype=np.float64))["stationary"].iloc[0])
    except (ValueError, IndexError, np.linalg.LinAlgError):
        return 1.0
    return max(1.0, block) if math.isfinite(block) else 1.0


def bootstrap_p_value(
    excess: Any, *, replications: int = REPLICATIONS, seed: int = 0
) -> tuple[float | None, float | None]:
    """One-sided p-value of H0 ``E[x] <= 0`` for the series ``x`` and the block length used.

    ``p = (1 + #{b: mean*_b - mean(x) >= mean(x)}) / (1 + B)``: the share of the ``B`` centred
    bootstrap means (stationary bootstrap, expected block length from ``optimal_block_length``, at
    least 1) at or above the observed mean, with the observed sample counted once among them (Davison
    and Hinkley, 1997, eq. 4.11), so the p-value is never 0 and the test keeps its level with a finite
    ``B``. None (and no block length) with fewer than 2 finite values or no dispersion.
    """
    from arch.bootstrap import StationaryBootstrap

    x = np.asarray(excess, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return None, None
    block = stationary_block_length(x)
    observed = float(np.mean(x))
    means = StationaryBootstrap(block, x, seed=int(seed)).apply(np.mean, int(replications))[:, 0]
    exceed = int(np.count_nonzero(means - observed >= observed))
    return (1 + exceed) / (1 + int(replications)), block


def sidak(p_value: float | None, looks: int) -> float | None:
    """``1 - (1 - p)^K``: the chance that at least one of ``K`` independent looks gives a p-value at or
    below ``p`` under the null (None stays None)."""
    if p_value is None:
        return None
    return float(1.0 - (1.0 - float(p_value)) ** max(1, int(looks)))


@dataclass(frozen=True)
class LooksHurdle:
    """What the looks make of the Sharpe test: ``K`` looks, their per-day Sharpe ratios' variance,
    the hurdle ``E[max SR]`` of ``K`` skill-less looks, and a note when the null variance stood in."""

    looks: int
    variance: float | None
    hurdle: float
    note: str | None = None


def looks_hurdle(sharpes: Sequence[float | None], num_sessions: int) -> LooksHurdle:
    """The hurdle for ``sharpes``: this look's per-day Sharpe ratio and those of the earlier looks at an
    overlapping window of the same market (``K = len(sharpes)``, at least 1).

    One look: no hurdle (the plain PSR). ``K >= 2``: the variance (ddof=1) of the defined Sharpe ratios;
    when fewer than two are defined or they do not spread (the same strategy re-trained identically),
    the sampling variance of a Sharpe estimate under the null, ``1 / (T - 1)``, stands in.
    """
    looks = max(1, len(sharpes))
    if looks == 1:
        return LooksHurdle(1, None, 0.0)
    defined = [float(s) for s in sharpes if s is not None and math.isfinite(float(s))]
    variance = float(np.var(defined, ddof=1)) if len(defined) >= 2 else None
    note = None
    if variance is None or variance <= 0.0:
        variance = 1.0 / (num_sessions - 1) if num_sessions > 1 else None
        note = f"{looks} looks without a spread of Sharpe ratios: null variance 1/(T-1) used"
    if variance is None:
        return LooksHurdle(looks, None, math.nan, note)
    return LooksHurdle(looks, variance, selection.expected_max_sharpe(looks, variance), note)


def psr_after_looks(returns: Any, hurdle: LooksHurdle) -> float | None:
    """P(true per-day Sharpe > the looks' hurdle), skewness and kurtosis corrected (the DSR with ``K``
    looks; the PSR against 0 for one look). None when undefined."""
    if not math.isfinite(hurdle.hurdle):
        return None
    value = float(selection.probabilistic_sharpe_ratio(np.array(returns, dtype=np.float64), hurdle.hurdle))
    return value if math.isfinite(value) else None


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def out_of_sample_test(
    returns: Any,
    benchmarks: Mapping[str, Any],
    *,
    strategy: str,
    benchmark: str | None,
    earlier_looks: Sequence[float | None] = (),
    seed: int = 0,
    replications: int = REPLICATIONS,
    market: str | None = None,
) -> dict[str, Any]:
    """The ``oos_test`` block of metrics.json for ``strategy``'s daily ``returns`` ``(T,)``.

    ``benchmarks``: name -> the benchmark's daily returns on the same dates (buy-and-hold, equal
    weight); ``benchmark``: the one the verdict requires; ``earlier_looks``: the per-day Sharpe ratios
    of the earlier looks the ledger counts (``backtests.looks``).
    """
    r = np.array(returns, dtype=np.float64)  # a writable copy (torch warns on read-only arrays)
    sharpe = sharpe_per_day(r)
    hurdle = looks_hurdle([*earlier_looks, sharpe], len(r))
    psr = _finite(selection.probabilistic_sharpe_ratio(r)) if len(r) else None
    excess: dict[str, dict[str, Any]] = {}
    for name, series in benchmarks.items():
        x = r - np.asarray(series, dtype=np.float64)
        p, block = bootstrap_p_value(x, replications=replications, seed=seed)
        excess[name] = {
            "mean_per_day": _finite(np.mean(x)) if len(x) else None,
            "p_value": p,
            "p_value_after_looks": sidak(p, hurdle.looks),
            "block_length": block,
        }
    reason = None
    if sharpe is None:
        reason = f"the {strategy}'s daily returns have no Sharpe ratio (no dispersion: it stayed in cash)"
    elif benchmark is None or benchmark not in excess:
        reason = "no benchmark to test against"
    elif excess[benchmark]["p_value"] is None:
        reason = f"the excess returns over {benchmark} have no dispersion"
    return {
        "strategy": strategy,
        "num_sessions": len(r),
        "sharpe_per_day": sharpe,
        "psr": psr,
        "looks": hurdle.looks,
        "looks_sharpe_variance": hurdle.variance if hurdle.looks > 1 else None,
        "looks_note": hurdle.note,
        "sharpe_hurdle": _finite(hurdle.hurdle),
        "psr_after_looks": psr_after_looks(r, hurdle),
        "benchmark": benchmark,
        "excess": excess,
        "test": TEST_NAME,
        "replications": int(replications),
        "seed": int(seed),
        "market": market,
        "reason": reason,
    }
