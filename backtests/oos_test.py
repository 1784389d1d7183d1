"""The out-of-sample test of a selected strategy on its held-out window, after the looks counted.

Two questions about the daily returns ``r_t`` of the strategy a tournament selected (champion or
ensemble), asked on the test window, which took no part in the selection:

- **is its Sharpe ratio above zero?** The probabilistic Sharpe ratio (PSR) against 0; when the same
  market's overlapping windows were looked at ``K - 1`` times before (``backtests.looks``), the
  deflated Sharpe ratio with ``K`` trials and the variance of those ``K`` looks' per-day Sharpe ratios
  (:func:`psr_after_looks`; a first look is the plain PSR);
- **does it beat the benchmark?** A one-sided test of the MEAN of its daily excess returns
  ``x_t = r_t - b_t`` over buy-and-hold (and, reported, over equal weight): H0 ``E[x] <= 0``, p-value
  from a studentized stationary bootstrap of the HAC t-statistic (``backtests.bootstrap_t``: adaptive
  replications, the analytic HAC t tail where the bootstrap runs out, no floor) with the block length
  of ``arch.bootstrap.optimal_block_length`` (its ``stationary`` column, Politis and White, 2004, with
  Patton, Politis and White's 2009 correction) and a recorded seed (:func:`excess_p_value`). With
  ``K`` looks the p-value is Sidak-adjusted: ``1 - (1 - p)^K`` (:func:`sidak`).

The mean, not the Sharpe ratio, of the excess returns: the mean excess is what a user gives up or gains
by holding the strategy instead of the benchmark, and its bootstrap needs no variance ratio of two
short samples. ``arch`` is imported on first use (it loads pandas and statsmodels: a second or more),
so importing this module stays light.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from backtests import alpha_bootstrap, bootstrap_t, selection
from backtests.verdict import SIGNIFICANCE_LEVEL, LooksHurdle, looks_hurdle, sidak

#: How the benchmark test's p-value is computed, as written into metrics.json (each excess block says
#: which method gave its p-value: ``backtests.bootstrap_t``).
TEST_NAME = (
    "one-sided studentized stationary bootstrap of the HAC t-statistic of the mean daily excess return; "
    "p = (1 + #{t* >= t}) / (1 + replications), replications adaptive up to "
    f"{bootstrap_t.MAX_REPLICATIONS}, then the analytic HAC t tail"
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


def excess_p_value(
    excess: Any, *, level: float = SIGNIFICANCE_LEVEL, looks: int = 1, seed: int = 0, **limits: int
) -> bootstrap_t.ExcessTest | None:
    """One-sided test of H0 ``E[x] <= 0`` for the series ``x`` (``backtests.bootstrap_t``): the
    replications continue while the p-value is near the per-look level ``looks`` looks at ``level``
    demand. None with fewer than 2 finite values or no dispersion. ``limits``: ``min_replications`` /
    ``max_replications`` (tests and benchmarks)."""
    x = np.asarray(excess, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return None
    target = bootstrap_t.per_look_level(level, looks)
    return bootstrap_t.studentized_p_value(x, stationary_block_length(x), target=target, seed=seed, **limits)


def alpha_test(
    returns: Any,
    benchmark: Any,
    *,
    level: float = SIGNIFICANCE_LEVEL,
    looks: int = 1,
    seed: int = 0,
    **limits: int,
) -> dict[str, Any]:
    """The alpha block of one benchmark: the OLS beta of ``returns`` on ``benchmark``, the alpha series
    ``a_t = r_t - beta b_t`` (its mean is the regression's intercept), the one-sided test of H0
    ``alpha <= 0`` (``backtests.alpha_bootstrap``: the larger p-value of a blockwise wild bootstrap of
    the null-restricted regression and an m-out-of-n stationary bootstrap-t, both of the HAC
    t-statistic), its HAC standard error and daily volatility.

    Excess over the benchmark adjusted for beta: a strategy half invested in a falling market beats
    buy-and-hold without skill, one levered to a rising market loses to it without lacking any; the
    alpha is neither. The wild bootstrap re-estimates beta in every replicate; the HAC standard error
    treats beta as known (its estimation error adds ``mean(b)^2 / sum((b - mean(b))^2)`` of the
    residual variance to the intercept's, negligible for daily returns).
    """
    r = np.asarray(returns, dtype=np.float64)
    b = np.asarray(benchmark, dtype=np.float64)
    ok = np.isfinite(r) & np.isfinite(b)
    r, b = r[ok], b[ok]
    empty = {
        "beta": None,
        "alpha_per_day": None,
        "alpha_p_value": None,
        "alpha_p_value_bound": None,
        "alpha_p_value_method": None,
        "alpha_t_stat": None,
        "alpha_p_value_after_looks": None,
        "alpha_standard_error": None,
        "residual_volatility": None,
    }
    if len(r) < 3 or float(np.ptp(b)) == 0.0:
        return empty
    db = b - b.mean()
    beta = float(np.dot(db, r - r.mean()) / np.dot(db, db))
    a = r - beta * b
    test = None
    if float(np.ptp(a)) > 0.0:
        target = bootstrap_t.per_look_level(level, looks)
        block = stationary_block_length(a)
        test = alpha_bootstrap.alpha_p_value(r, b, block, target=target, seed=seed, **limits)
    if test is None:
        return {**empty, "beta": _finite(beta)}
    return {
        "beta": _finite(beta),
        "alpha_per_day": _finite(np.mean(a)),
        "alpha_p_value": test.p_value,
        "alpha_p_value_bound": test.bound,
        "alpha_p_value_method": test.method,
        "alpha_t_stat": _finite(test.t_stat),
        "alpha_p_value_after_looks": sidak(test.p_value, looks),
        "alpha_standard_error": _finite(bootstrap_t.hac_standard_error(a)),
        "residual_volatility": _finite(np.std(a, ddof=1)),
    }


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
    level: float = SIGNIFICANCE_LEVEL,
    market: str | None = None,
    **limits: int,
) -> dict[str, Any]:
    """The ``oos_test`` block of metrics.json for ``strategy``'s daily ``returns`` ``(T,)``.

    ``benchmarks``: name -> the benchmark's daily returns on the same dates (buy-and-hold, equal
    weight); ``benchmark``: the one the verdict requires; ``earlier_looks``: the per-day Sharpe ratios
    of the earlier looks the ledger counts (``backtests.looks``); ``level``: the verdict's level (the
    replications continue while a p-value is near the per-look level it demands). The block keeps the
    returns' moments (``skewness``, ``kurtosis``) so that a reader restates the verdict with the looks
    counted when it reads (``backtests.verdict.restate``).
    """
    r = np.array(returns, dtype=np.float64)  # a writable copy (torch warns on read-only arrays)
    sharpe = sharpe_per_day(r)
    hurdle = looks_hurdle([*earlier_looks, sharpe], len(r))
    psr = _finite(selection.probabilistic_sharpe_ratio(r)) if len(r) else None
    _, skew, kurt, _ = selection.return_moments(r) if len(r) > 1 else (None, math.nan, math.nan, None)
    excess: dict[str, dict[str, Any]] = {}
    for name, series in benchmarks.items():
        b = np.asarray(series, dtype=np.float64)
        x = r - b
        test = excess_p_value(x, level=level, looks=hurdle.looks, seed=seed, **limits)
        p = test.p_value if test is not None else None
        alpha = alpha_test(r, b, level=level, looks=hurdle.looks, seed=seed, **limits)
        excess[name] = {
            "mean_per_day": _finite(np.mean(x)) if len(x) else None,
            "p_value": p,
            "p_value_bound": test.bound if test is not None else None,
            "p_value_method": test.method if test is not None else None,
            "t_stat": _finite(test.t_stat) if test is not None else None,
            "replications": test.replications if test is not None else None,
            "p_value_after_looks": sidak(p, hurdle.looks),
            "block_length": test.block_length if test is not None else None,
            **alpha,
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
        "skewness": _finite(skew),
        "kurtosis": _finite(kurt),
        "psr": psr,
        "looks": hurdle.looks,
        "looks_sharpe_variance": hurdle.variance if hurdle.looks > 1 else None,
        "looks_note": hurdle.note,
        "sharpe_hurdle": _finite(hurdle.hurdle),
        "psr_after_looks": psr_after_looks(r, hurdle),
        "benchmark": benchmark,
        "excess": excess,
        "test": TEST_NAME,
        "max_replications": int(limits.get("max_replications", bootstrap_t.MAX_REPLICATIONS)),
        "seed": int(seed),
        "market": market,
        "reason": reason,
    }
