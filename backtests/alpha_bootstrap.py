"""The alpha test's p-value: two bootstraps of the HAC t-statistic of the alpha, and the larger p-value.

H0 ``alpha <= 0`` in the regression ``r_t = alpha + beta b_t + e_t`` of a strategy's daily returns on
its benchmark's, one-sided. The statistic is the HAC t-statistic of the alpha series ``a_t = r_t -
beta_hat b_t`` (its mean is the OLS intercept; ``backtests.bootstrap_t.hac_standard_error``). Its null
distribution is read twice, and the test rejects only when both readings do (``p`` is the larger of
the two p-values, each ``(1 + #{t* >= t}) / (1 + B)`` over the same ``B`` replications):

- **the wild bootstrap** (sign flips) of the null-restricted regression: the residuals ``e~`` of
  ``r = beta~ b`` (alpha 0 imposed) are multiplied by Rademacher signs, one sign per block of
  ``round(block)`` consecutive days (a blockwise wild bootstrap: the dependence within a block is
  kept), ``r* = beta~ b + s e~`` is regressed on ``[1, b]`` again and ``t*`` is its intercept's HAC
  t-statistic. Exact up to the fitted beta, whatever the tails, when the residuals are symmetric
  and independent across blocks; each day keeps its own scale (heteroskedasticity, GARCH). It is what keeps the test's size on
  fat symmetric tails (Student-t(3)), where a bootstrap-t draws spurious skewness from one outlier;
- **the m-out-of-n stationary bootstrap-t** (Bickel, Götze and van Zwet 1997; Politis and Romano
  1994 for the blocks): ``t* = (mean(a*) - mean(a)) / se(a*)`` on replicates ``a*`` of only
  :func:`subsample_length` ``m = ceil(0.4 n)`` days. It carries the alpha series' skewness, as a
  bootstrap-t does, but as it shows in ``m`` days, not ``n``: the sample skewness of a short window
  of rare large losses understates the population's (the large loss that makes the mean zero is
  usually missing), and the full-size bootstrap-t then rejects a skewed null too often (8-10% at 40
  sessions on a skewness of -6). The m-out-of-n bootstrap is the standard remedy where the plain
  bootstrap fails on heavy tails.

**Assumption** (docs/backtests.md): the alpha series is stationary with short memory (dependence
within about a block), and its skewness at the window's length is no worse than a lognormal's of
skewness -6 (figures: ``benchmarks/verdict_size.py``, docs/benchmarks.md). A strategy whose losses
hide beyond the window cannot be told from one without them by any test on that window.

The replications are adaptive as in ``backtests.bootstrap_t`` (doubling while the larger p-value is
small or near the per-look level, up to :data:`backtests.bootstrap_t.MAX_REPLICATIONS`; the analytic
HAC t tail when no replicate of either reaches ``t``). Hand-written on numpy: ``arch`` has no wild or
m-out-of-n bootstrap of a regression's t-statistic, and the size benchmark runs thousands of series
through these same functions; ``arch`` gives the block length (``backtests.oos_test``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from backtests import bootstrap_t

METHOD = "larger of a blockwise wild bootstrap (null imposed) and an m-out-of-n stationary bootstrap-t"
#: Share of the window's days in a replicate of the m-out-of-n bootstrap-t: the skewness of a mean of
#: ``m`` days is ``sqrt(n / m)`` (1.6) times that of ``n`` days, which makes up for a short window's
#: understated skewness (measured: ``benchmarks/verdict_size.py``; docs/benchmarks.md).
SUBSAMPLE_FRACTION = 0.4
#: Replicate elements held at once (memory: 8 bytes each, a few copies).
_CHUNK_ELEMENTS = 2_000_000


def subsample_length(n: int) -> int:
    """Days per replicate of the m-out-of-n bootstrap-t: ``ceil(SUBSAMPLE_FRACTION n)`` (16 of 40, 51
    of 126, 101 of 252), at least 10 (or ``n``). ``m`` grows with ``n``: the t-statistic is pivotal
    (standard normal in the limit at any ``m``), so the test keeps its level as the window grows."""
    return max(min(n, 10), min(n, math.ceil(SUBSAMPLE_FRACTION * n)))


def alpha_t_statistic(r: np.ndarray, b: np.ndarray) -> float:
    """The HAC t-statistic of the alpha: ``mean(a) / se(a)`` for ``a = r - beta_hat b``."""
    db = b - b.mean()
    beta = float(np.dot(db, r - r.mean()) / np.dot(db, db))
    return float(bootstrap_t.t_statistic(r - beta * b))


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.sign(num) * np.inf)


def wild_t(r: np.ndarray, b: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """``t*`` ``(B,)`` of the wild bootstrap for per-day ``signs`` ``(B, n)`` (module docstring)."""
    x = np.column_stack([np.ones_like(b), b])
    project = np.linalg.pinv(x)  # (2, n): the OLS coefficients of a series
    restricted = r - float(np.dot(b, r) / np.dot(b, b)) * b  # alpha 0 imposed
    star = signs * restricted  # the beta~ b part of r* has intercept 0 and no residual
    coef = star @ project.T
    return _ratio(coef[:, 0], bootstrap_t.hac_standard_error(star - coef @ x.T))


def block_signs(rng: np.random.Generator, replications: int, n: int, block: float) -> np.ndarray:
    """Rademacher signs ``(replications, n)``, one per block of ``round(block)`` consecutive days."""
    length = max(1, int(round(block)))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(replications, -(-n // length)))
    return np.repeat(signs, length, axis=1)[:, :n]


def subsample_t(a: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``t*`` ``(B,)`` of the m-out-of-n bootstrap-t for replicate ``indices`` ``(B, m)``."""
    star = a[indices]
    return _ratio(star.mean(axis=-1) - a.mean(), bootstrap_t.hac_standard_error(star))


def exceedances(
    r: np.ndarray, b: np.ndarray, block: float, replications: int, rng: np.random.Generator
) -> tuple[int, int, float]:
    """``(#{wild t* >= t}, #{m-out-of-n t* >= t}, t)`` over ``replications`` of each, for one series."""
    n = len(r)
    t_obs = alpha_t_statistic(r, b)
    db = b - b.mean()
    a = r - float(np.dot(db, r - r.mean()) / np.dot(db, db)) * b
    m = subsample_length(n)
    per_chunk = max(1, _CHUNK_ELEMENTS // n)
    wild = sub = done = 0
    while done < replications:
        reps = min(per_chunk, replications - done)
        wild += int(np.count_nonzero(wild_t(r, b, block_signs(rng, reps, n, block)) >= t_obs))
        idx = bootstrap_t.stationary_indices(rng, (reps,), n, block, length=m)
        sub += int(np.count_nonzero(subsample_t(a, idx) >= t_obs))
        done += reps
    return wild, sub, t_obs


def alpha_p_value(
    returns: Any,
    benchmark: Any,
    block: float,
    *,
    target: float,
    seed: int = 0,
    min_replications: int = bootstrap_t.MIN_REPLICATIONS,
    max_replications: int = bootstrap_t.MAX_REPLICATIONS,
) -> bootstrap_t.ExcessTest:
    """The test of the module docstring for one strategy's ``returns`` ``(n,)`` on its ``benchmark``
    (finite, both dispersed, ``n >= 3``), expected block length ``block``; ``target``: the per-look
    level the looks demand (the replications continue while ``p`` is within three Monte Carlo
    standard errors of it, or fewer than ``bootstrap_t.MIN_EXCEEDANCES`` replicates reach ``t``)."""
    r = np.asarray(returns, dtype=np.float64)
    b = np.asarray(benchmark, dtype=np.float64)
    rng = np.random.default_rng(int(seed))
    batch = max(1, int(min_replications))
    count, total, t_obs = 0, 0, math.nan
    wild = sub = 0
    while True:
        more_wild, more_sub, t_obs = exceedances(r, b, block, batch, rng)
        wild, sub, total = wild + more_wild, sub + more_sub, total + batch
        count = max(wild, sub)  # the larger p-value's count
        p = (1 + count) / (1 + total)
        mc_se = math.sqrt(p * (1.0 - p) / total)
        clear = count >= bootstrap_t.MIN_EXCEEDANCES and abs(p - target) > 3.0 * mc_se
        if clear or total >= max_replications:
            break
        batch = min(total + 1, max_replications - total)  # doubles the total
    if count > 0:
        return bootstrap_t.ExcessTest(p, False, t_obs, total, float(block), METHOD)
    tail = bootstrap_t.analytic_tail(t_obs, len(r))
    if tail < bootstrap_t.SMALLEST_P:
        return bootstrap_t.ExcessTest(
            bootstrap_t.SMALLEST_P, True, t_obs, total, float(block), bootstrap_t.ANALYTIC
        )
    if tail < 1.0 / (1 + total):
        return bootstrap_t.ExcessTest(tail, False, t_obs, total, float(block), bootstrap_t.ANALYTIC)
    return bootstrap_t.ExcessTest(1.0 / (1 + total), True, t_obs, total, float(block), bootstrap_t.BOUND)
