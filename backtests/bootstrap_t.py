"""The benchmark test's p-value: a studentized stationary bootstrap of the mean daily excess return.

H0 ``E[x] <= 0`` for the daily excess returns ``x_t = r_t - b_t`` of a strategy over its benchmark,
one-sided. The statistic is the HAC t-statistic ``t = mean(x) / se(x)``, ``se`` from the Newey-West
(Bartlett) long-run variance with :func:`newey_west_lags` lags. Its null distribution is read from a
stationary bootstrap (Politis and Romano, 1994) of ``x``: each replicate ``x*`` gives
``t* = (mean(x*) - mean(x)) / se(x*)``, studentized like the observed statistic (the bootstrap-t,
Hall 1992; Götze and Künsch 1996 for blocks), which corrects the skewness and the dependence a plain
centred bootstrap of the mean leaves in short windows. The p-value is
``(1 + #{t* >= t}) / (1 + B)`` (Davison and Hinkley, 1997, eq. 4.11: never 0, and the test keeps its
level with a finite ``B``).

**No floor.** The replications ``B`` are adaptive (:func:`studentized_p_value`): they double from
:data:`MIN_REPLICATIONS` while the p-value is small (fewer than :data:`MIN_EXCEEDANCES` replicates at
or above ``t``) or within three Monte Carlo standard errors of the level the looks demand, up to
:data:`MAX_REPLICATIONS`. When no replicate reaches ``t`` even then, the bootstrap has run out, and the
p-value is the analytic tail of the HAC t-statistic, ``P(T_{n-1} >= t)`` (Student-t with ``n - 1``
degrees of freedom), where that is below ``1 / (1 + B)``; otherwise ``1 / (1 + B)`` stands as an
upper bound, reported as ``"< x"`` (``bound = True``), never as an estimate. Each result says which
(``method``). Pure numpy (scipy for the Student-t tail): the size benchmark runs thousands of series
through the same functions (``benchmarks/verdict_size.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: First batch of replications; doubled while the p-value is near the level the looks demand.
MIN_REPLICATIONS = 1_999
#: Most replications: beyond them the analytic tail of the HAC t-statistic takes over.
MAX_REPLICATIONS = 2**17 - 1
#: The replications continue while fewer replicates than this reach the observed statistic (the
#: p-value is then too coarse to tell a strong edge from a lucky one at many looks).
MIN_EXCEEDANCES = 10
#: Smallest p-value written as an estimate: the analytic tail below it is a bound (double precision).
SMALLEST_P = 1e-16
#: Replicate elements held at once (memory: 8 bytes each, a few copies).
_CHUNK_ELEMENTS = 4_000_000

BOOTSTRAP = "studentized stationary bootstrap (bootstrap-t of the HAC t-statistic)"
ANALYTIC = "analytic HAC t tail (Student-t, n - 1 df): the bootstrap ran out"
BOUND = "bound 1 / (1 + replications): no replicate reached the observed statistic"


def newey_west_lags(n: int) -> int:
    """Lags of the Bartlett long-run variance for ``n`` observations: ``floor(4 (n / 100)^(2/9))``
    (Newey and West, 1994), at least 1 and below ``n``."""
    return max(1, min(n - 1, int(4.0 * (n / 100.0) ** (2.0 / 9.0))))


def hac_standard_error(x: Any, lags: int | None = None) -> np.ndarray:
    """Standard error of the mean of ``x`` along its last axis ``(..., n)``: ``sqrt(LRV / n)`` with the
    Newey-West long-run variance ``g0 + 2 sum_{l <= L} (1 - l / (L + 1)) g_l`` (autocovariances with
    divisor ``n``: Bartlett weights keep it non-negative)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    lags = newey_west_lags(n) if lags is None else lags
    d = x - x.mean(axis=-1, keepdims=True)
    lrv = np.einsum("...i,...i->...", d, d) / n
    for lag in range(1, lags + 1):
        weight = 1.0 - lag / (lags + 1.0)
        lrv = lrv + 2.0 * weight * np.einsum("...i,...i->...", d[..., lag:], d[..., :-lag]) / n
    return np.sqrt(np.maximum(lrv, 0.0) / n)


def stationary_indices(
    rng: np.random.Generator, shape: tuple[int, ...], n: int, block: Any, length: int | None = None
) -> np.ndarray:
    """Indices ``shape + (length,)`` of stationary-bootstrap replicates of a series of length ``n``
    (``length``: ``n`` unless given, fewer for an m-out-of-n bootstrap): blocks start at uniform
    positions, continue circularly and end with probability ``1 / block`` at each step (``block``: the
    expected block length, a scalar or broadcastable to ``shape``)."""
    m = n if length is None else int(length)
    p_new = 1.0 / np.maximum(np.asarray(block, dtype=np.float64), 1.0)
    p_new = np.broadcast_to(p_new.reshape(p_new.shape + (1,) * (len(shape) - p_new.ndim)), shape)
    new = rng.random((*shape, m)) < p_new[..., None]
    new[..., 0] = True
    starts = rng.integers(0, n, size=(*shape, m))
    position = np.arange(m)
    # The index of the last block start at or before each step: a running maximum.
    last = np.maximum.accumulate(np.where(new, position, 0), axis=-1)
    return (np.take_along_axis(starts, last, axis=-1) + position - last) % n


def t_statistic(x: Any) -> np.ndarray:
    """``mean / hac_standard_error`` along the last axis (+-inf with no dispersion and a nonzero mean)."""
    x = np.asarray(x, dtype=np.float64)
    mean, se = x.mean(axis=-1), hac_standard_error(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, mean / np.where(se > 0, se, 1.0), np.sign(mean) * np.inf)


def exceedances(
    x: np.ndarray, block: Any, replications: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(#{t* >= t}, t)`` for each series of ``x`` ``(S, n)`` over ``replications`` bootstrap-t
    replicates (expected block lengths ``block``, ``(S,)`` or a scalar)."""
    x = np.asarray(x, dtype=np.float64)
    s, n = x.shape
    observed = t_statistic(x)
    mean = x.mean(axis=-1)
    block = np.broadcast_to(np.asarray(block, dtype=np.float64), (s,))
    count = np.zeros(s, dtype=np.int64)
    per_chunk = max(1, _CHUNK_ELEMENTS // max(1, s * n))
    done = 0
    while done < replications:
        reps = min(per_chunk, replications - done)
        idx = stationary_indices(rng, (s, reps), n, block[:, None])
        star = np.take_along_axis(np.broadcast_to(x[:, None, :], (s, reps, n)), idx, axis=-1)
        se = hac_standard_error(star)
        diff = star.mean(axis=-1) - mean[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_star = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.sign(diff) * np.inf)
        count += np.count_nonzero(t_star >= observed[:, None], axis=-1)
        done += reps
    return count, observed


@dataclass(frozen=True)
class ExcessTest:
    """The benchmark test of one series: its p-value (``bound``: an upper bound, shown ``"< p"``), the
    t-statistic, the replications and block length the bootstrap used, and which ``method`` gave ``p``."""

    p_value: float
    bound: bool
    t_stat: float
    replications: int
    block_length: float
    method: str


def analytic_tail(t_stat: float, n: int) -> float:
    """``P(T_{n-1} >= t)``: the Student-t tail of the HAC t-statistic."""
    from scipy import stats  # deferred: scipy.stats loads in a fraction of a second

    return float(stats.t.sf(t_stat, df=max(1, n - 1)))


def studentized_p_value(
    x: Any,
    block: float,
    *,
    target: float,
    seed: int = 0,
    min_replications: int = MIN_REPLICATIONS,
    max_replications: int = MAX_REPLICATIONS,
) -> ExcessTest:
    """The adaptive test of the module docstring for one series ``x`` ``(n,)`` (finite, dispersed,
    ``n >= 2``) with expected block length ``block``; ``target``: the per-look level the looks demand
    (the replications continue while the p-value is within three Monte Carlo standard errors of it)."""
    x = np.asarray(x, dtype=np.float64)[None, :]
    rng = np.random.default_rng(int(seed))
    batch = max(1, int(min_replications))
    count, total, t_obs = 0, 0, float(t_statistic(x)[0])
    while True:
        more, _ = exceedances(x, block, batch, rng)
        count, total = count + int(more[0]), total + batch
        p = (1 + count) / (1 + total)
        mc_se = math.sqrt(p * (1.0 - p) / total)
        clear = count >= MIN_EXCEEDANCES and abs(p - target) > 3.0 * mc_se
        if clear or total >= max_replications:
            break
        batch = min(total + 1, max_replications - total)  # doubles the total
    if count > 0:
        return ExcessTest(p, False, t_obs, total, float(block), BOOTSTRAP)
    tail = analytic_tail(t_obs, x.shape[1])
    if tail < SMALLEST_P:
        return ExcessTest(SMALLEST_P, True, t_obs, total, float(block), ANALYTIC)
    if tail < 1.0 / (1 + total):
        return ExcessTest(tail, False, t_obs, total, float(block), ANALYTIC)
    return ExcessTest(1.0 / (1 + total), True, t_obs, total, float(block), BOUND)


def per_look_level(alpha: float, looks: int) -> float:
    """The level one of ``looks`` looks must reach for Sidak's ``1 - (1 - p)^K <= alpha``."""
    return float(-math.expm1(math.log1p(-alpha) / max(1, int(looks))))
