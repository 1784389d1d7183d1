"""Probabilistic and deflated Sharpe ratios (Bailey & López de Prado, 2012 and 2014), and the
probability of backtest overfitting (Bailey, Borwein, López de Prado & Zhu, 2015).

A champion picked as the best of many pods has a Sharpe ratio inflated by selection: even with no skill
the best of N noisy estimates is well above zero. The deflated Sharpe ratio (DSR) is the probability
that the true Sharpe ratio exceeds the Sharpe ratio the best of ``num_trials`` skill-less trials would be
expected to show, with the estimator's variance corrected for the returns' skewness and kurtosis.

All Sharpe ratios in this module are **per period** (not annualized): the mean over the standard
deviation of the returns the test is run on (daily returns in podracer). Use
:func:`trial_sharpe_variance` to convert annualized trial Sharpe ratios.

- ``PSR(SR*) = Phi( (SR - SR*) * sqrt(T - 1) / sqrt(1 - g3 * SR + (g4 - 1) / 4 * SR^2) )``, with ``g3``
  the skewness and ``g4`` the (non-excess) kurtosis of the returns (population moments);
- ``E[max SR] = sqrt(V) * ((1 - gamma) * Phi^-1(1 - 1/N) + gamma * Phi^-1(1 - 1/(N e)))``, with ``V``
  the variance of the trials' Sharpe ratios and ``gamma`` the Euler-Mascheroni constant; 0 for N = 1;
- ``DSR = PSR(E[max SR])``.

The DSR deflates one Sharpe ratio for the number of trials; the probability of backtest overfitting
(PBO, :func:`probability_of_backtest_overfitting`) measures the selection process itself: how often the
in-sample best of the trials ranks below the median out of sample, over every split of the window
into halves (combinatorially symmetric cross-validation, CSCV).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

EULER_GAMMA = 0.5772156649015329

_NORMAL = torch.distributions.Normal(
    torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
)


def _as_f64(returns: Any) -> Tensor:
    out = (
        returns.to(torch.float64)
        if isinstance(returns, Tensor)
        else torch.as_tensor(np.asarray(returns, float))
    )
    if out.ndim not in (1, 2):
        raise ValueError(f"returns must be (T,) or (T, N), got shape {tuple(out.shape)}")
    return out


def _norm_cdf(x: Tensor) -> Tensor:
    return 0.5 * torch.erfc(-x / math.sqrt(2.0))


def _norm_ppf(p: float) -> float:
    return float(_NORMAL.icdf(torch.tensor(p, dtype=torch.float64)))


def return_moments(returns: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-period Sharpe ratio (ddof=1 std), skewness, kurtosis (non-excess; population moments) and the
    number of non-NaN observations, per column."""
    r = _as_f64(returns)
    valid = ~torch.isnan(r)
    n = valid.sum(dim=0).to(torch.float64)
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    mean = torch.where(valid, r, zero).sum(dim=0) / n
    dev = torch.where(valid, r - mean, zero)
    m2 = (dev**2).sum(dim=0) / n
    m3 = (dev**3).sum(dim=0) / n
    m4 = (dev**4).sum(dim=0) / n
    std = (m2 * n / (n - 1)).sqrt()
    sharpe = mean / std
    skew = m3 / m2**1.5
    kurt = m4 / m2**2
    return sharpe, skew, kurt, n


def psr_from_stats(
    sharpe: Tensor | float,
    num_obs: Tensor | float,
    skew: Tensor | float = 0.0,
    kurtosis: Tensor | float = 3.0,
    sharpe_benchmark: Tensor | float = 0.0,
) -> Tensor:
    """Probabilistic Sharpe ratio from summary statistics (per-period Sharpe, non-excess kurtosis).

    NaN where the statistics are undefined (fewer than 2 observations, zero variance).
    """
    sr, n, g3, g4, sr0 = (
        torch.as_tensor(v, dtype=torch.float64) for v in (sharpe, num_obs, skew, kurtosis, sharpe_benchmark)
    )
    denom_sq = 1.0 - g3 * sr + (g4 - 1.0) / 4.0 * sr**2
    # A negative variance term only arises from extreme, tiny samples; the test is undefined there.
    z = (sr - sr0) * torch.sqrt(n - 1.0) / torch.sqrt(denom_sq.clamp(min=0.0))
    out = _norm_cdf(z)
    bad = (n < 2) | ~torch.isfinite(sr) | (denom_sq <= 0) | torch.isnan(z)
    return torch.where(bad, torch.full_like(out, math.nan), out)


def probabilistic_sharpe_ratio(returns: Any, sharpe_benchmark: float | Tensor = 0.0) -> Tensor:
    """P(true Sharpe > ``sharpe_benchmark``) from the returns ``(T,)``/``(T, N)`` (per-period benchmark)."""
    sharpe, skew, kurt, n = return_moments(returns)
    return psr_from_stats(sharpe, n, skew, kurt, sharpe_benchmark)


def expected_max_sharpe(num_trials: int, sharpe_variance: float) -> float:
    """Expected maximum per-period Sharpe ratio of ``num_trials`` skill-less trials whose Sharpe ratios
    have variance ``sharpe_variance`` (0 for a single trial)."""
    if num_trials < 1:
        raise ValueError("num_trials must be at least 1")
    if sharpe_variance < 0 or not math.isfinite(sharpe_variance):
        raise ValueError(f"sharpe_variance must be a finite non-negative number, got {sharpe_variance}")
    if num_trials == 1:
        return 0.0
    n = float(num_trials)
    z1 = _norm_ppf(1.0 - 1.0 / n)
    z2 = _norm_ppf(1.0 - 1.0 / (n * math.e))
    return math.sqrt(sharpe_variance) * ((1.0 - EULER_GAMMA) * z1 + EULER_GAMMA * z2)


def trial_sharpe_variance(trial_sharpes: Sequence[float | None], annualization: float = 1.0) -> float | None:
    """Variance (ddof=1) of the trials' Sharpe ratios, converted to per-period units.

    ``trial_sharpes`` are annualized with ``annualization`` periods a year (1 = already per period), i.e.
    ``sqrt(annualization)`` times the per-period Sharpe ratio. The DSR's hurdle must be in the periodicity
    of the Sharpe ratio it tests (:func:`deflated_sharpe_ratio` tests per-period Sharpe ratios of the
    returns it is given), so pass the ``annualization`` the trials' Sharpe ratios were annualized with,
    and test returns of that same period: annualized Sharpe ratios of *daily* returns with 252 give a
    per-day variance for a DSR on daily returns. Trials scored on another period (per-decision returns)
    are not comparable and must not be mixed in.

    A trial whose Sharpe ratio is undefined (None, NaN: e.g. a pod that stayed in cash, whose returns
    have no dispersion) or infinite is a trial with no Sharpe ratio and is left out, never counted as 0:
    zeros would shrink the variance and so the DSR's hurdle. (Such trials still count in ``num_trials``,
    which is the caller's business.) None with fewer than two finite values.
    """
    if not (math.isfinite(annualization) and annualization > 0):
        raise ValueError(f"annualization must be a finite positive number, got {annualization}")
    values = np.asarray(
        [float(s) for s in trial_sharpes if s is not None and math.isfinite(float(s))], dtype=float
    )
    if len(values) < 2:
        return None
    return float(np.var(values, ddof=1)) / float(annualization)


def deflated_sharpe_ratio(returns: Any, num_trials: int, sharpe_variance: float | None = None) -> Tensor:
    """Deflated Sharpe ratio of the returns ``(T,)``/``(T, N)`` given ``num_trials`` tried.

    ``sharpe_variance`` is the variance of the trials' per-period Sharpe ratios. When unknown it defaults
    to the sampling variance of a Sharpe estimate under the null, ``1 / (T - 1)`` (each trial then is
    just noise around zero), which is the conservative choice for a pool of similar pods.
    """
    sharpe, skew, kurt, n = return_moments(returns)
    if sharpe_variance is None:
        t = int(n.max()) if n.numel() else 0
        sharpe_variance = 1.0 / (t - 1) if t > 1 else 0.0
    sr0 = expected_max_sharpe(int(num_trials), float(sharpe_variance))
    return psr_from_stats(sharpe, n, skew, kurt, sr0)


# --- probability of backtest overfitting (CSCV) ------------------------------------------------------
#: Fewest rows a CSCV block may have: a half then has at least ``num_splits`` rows.
MIN_BLOCK_ROWS = 2
# Bounds the (combinations x trials) work arrays to ~2M float64 each (C(16, 8) x 200 trials is 2.6M).
_CHUNK_ELEMENTS = 2_000_000


@dataclass(frozen=True, eq=False)
class PBOResult:
    """Probability of backtest overfitting and what it was computed from.

    ``pbo``: fraction of the CSCV combinations whose logit is <= 0, or None with fewer than 2 valid
    trials; ``logits``: one per combination, float64, in ``itertools.combinations`` order of the
    in-sample blocks (empty when ``pbo`` is None), for a histogram; ``num_trials``: valid trials ranked;
    ``num_splits``: blocks S actually used; ``excluded``: column indices left out (no Sharpe ratio);
    ``num_rows``: rows used (the first ``T - num_rows`` are dropped so that the blocks are equal).
    """

    pbo: float | None
    logits: np.ndarray
    num_combinations: int
    num_trials: int
    num_splits: int
    excluded: tuple[int, ...] = ()
    num_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (``pbo`` None -> null)."""
        return {
            "pbo": self.pbo,
            "num_trials": self.num_trials,
            "num_splits": self.num_splits,
            "num_combinations": self.num_combinations,
            "num_rows": self.num_rows,
            "excluded": list(self.excluded),
            "logits": [float(v) for v in self.logits],
        }


def cscv_splits(num_rows: int, num_splits: int = 16) -> int:
    """The number of CSCV blocks used for ``num_rows`` rows: ``num_splits``, or the largest even number
    below it that leaves every block at least ``MIN_BLOCK_ROWS`` rows; 0 when not even 2 blocks fit."""
    s = min(int(num_splits), int(num_rows) // MIN_BLOCK_ROWS)
    return max(0, s - s % 2)


def _half_masks(num_splits: int) -> np.ndarray:
    """(C, S) bool: row c marks the in-sample blocks of combination c (C = S choose S/2)."""
    half = num_splits // 2
    combos = np.asarray(list(itertools.combinations(range(num_splits), half)), dtype=np.int64)
    mask = np.zeros((len(combos), num_splits), dtype=bool)
    mask[np.repeat(np.arange(len(combos)), half), combos.reshape(-1)] = True
    return mask


def _halves_sharpe(mask: np.ndarray, stats: tuple[np.ndarray, ...]) -> np.ndarray:
    """(C, N) per-period Sharpe ratios of the rows of the blocks marked in ``mask``, from per-block
    counts, sums, sums of squares (each (S, N)) and, for columns with flat or empty blocks, per-block
    min/max to detect a half with no dispersion exactly (a float variance is only approximately 0)."""
    count, total, squares, bmin, bmax, flat_cols = stats
    w = mask.astype(np.float64)
    # 0/1 weights: every product is exact, each sum is a plain sum of the selected blocks' values.
    n = w @ count
    s = w @ total
    q = w @ squares
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = s / n
        m2 = np.maximum(q - s * mean, 0.0)
        if flat_cols.any():
            lo = np.where(mask[:, :, None], bmin[None, :, flat_cols], np.inf).min(axis=1)
            hi = np.where(mask[:, :, None], bmax[None, :, flat_cols], -np.inf).max(axis=1)
            m2[:, flat_cols] = np.where(lo == hi, 0.0, m2[:, flat_cols])
        # numpy's division semantics, as backtests.metrics: c / 0 = +-inf, 0 / 0 = NaN.
        sharpe = mean / np.sqrt(m2 / (n - 1.0))
    sharpe[n < 2] = np.nan
    return sharpe


def _undefined_last(sharpe: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(sharpe), -np.inf, sharpe)


def _check_num_splits(num_splits: Any) -> None:
    """A ValueError unless ``num_splits`` is an even integer >= 2."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, int | np.integer):
        raise ValueError(f"num_splits must be an even integer >= 2, got {num_splits!r}")
    if num_splits < 2 or num_splits % 2:
        raise ValueError(f"num_splits must be an even integer >= 2, got {num_splits}")


def _selection_logits(
    masks: np.ndarray, stats: tuple[np.ndarray, ...], n_valid: int, splits: int
) -> np.ndarray:
    """One logit per in-sample choice in ``masks``: where the IS-best trial ranks out of sample,
    ``ln(w / (1 - w))`` with ``w = rank / (N + 1)`` (see :func:`probability_of_backtest_overfitting`)."""
    logits = np.empty(len(masks), dtype=np.float64)
    # The flat-half check works on (chunk, S, flat columns) arrays: size the chunks for that.
    chunk = max(1, _CHUNK_ELEMENTS // (n_valid * (splits if stats[-1].any() else 1)))
    rows = np.arange(min(chunk, len(masks)))
    for lo in range(0, len(masks), chunk):
        m = masks[lo : lo + chunk]
        is_sr = _undefined_last(_halves_sharpe(m, stats))
        oos_sr = _undefined_last(_halves_sharpe(~m, stats))
        best = np.argmax(is_sr, axis=1)
        star = oos_sr[rows[: len(m)], best][:, None]
        rank = (oos_sr < star).sum(axis=1) + ((oos_sr == star).sum(axis=1) + 1) / 2.0
        # ln(w / (1 - w)) with w = rank / (N + 1), written so that the median gives exactly 0.
        logits[lo : lo + chunk] = np.log(rank / (n_valid + 1.0 - rank))
    return logits


def probability_of_backtest_overfitting(returns: Any, num_splits: int = 16) -> PBOResult:
    """Probability of backtest overfitting by combinatorially symmetric cross-validation (CSCV).

    ``returns`` ``(T, N)``: per-period returns of N trials (pods) over the same T periods (the
    validation window, daily or per decision). The rows are cut into ``S = num_splits`` contiguous
    blocks of equal size (the ``T mod S`` oldest rows are dropped); for every choice of S/2 blocks as
    in-sample (IS), the rest being out-of-sample (OOS), each trial's per-period Sharpe ratio (mean / std,
    ddof=1) is computed on both halves, the IS-best trial ``n*`` is picked, its OOS rank among the N
    trials (1 = worst, ties averaged) gives ``w = rank / (N + 1)`` and ``logit = ln(w / (1 - w))``.
    PBO is the fraction of combinations with ``logit <= 0``.

    Conventions:

    - ``logit == 0`` (``n*`` exactly at the OOS median) counts as overfit: the selection bought no
      out-of-sample edge over a random pick there; this is the paper's ``(-inf, 0]`` indicator, and the
      conservative side for a warning;
    - NaN returns are skipped (as ``backtests.metrics``); a trial whose Sharpe ratio over the rows used
      is undefined (fewer than 2 returns, or no dispersion with zero mean: all NaN, all cash) is a trial
      with no Sharpe ratio and is **excluded** (listed in ``excluded``), not ranked as a Sharpe of 0;
    - within a half, a trial with no dispersion has Sharpe ``+-inf`` by its mean's sign (as
      ``backtests.metrics``), and an undefined Sharpe (NaN: flat at zero, e.g. in cash for the whole
      half, or fewer than 2 returns) ranks below every defined one, conservative again: a chosen pod
      that sits out the OOS half earned nothing from being chosen. Exact IS ties go to the lowest index;
    - S must be even (ValueError otherwise); when T is too short for blocks of ``MIN_BLOCK_ROWS`` rows,
      S is reduced to the largest even value that fits (``num_splits`` of the result says which), and
      fewer than ``2 * MIN_BLOCK_ROWS`` rows is a ValueError;
    - fewer than 2 valid trials: ``pbo`` is None (nothing to select from), ``logits`` empty.

    Vectorized over the ``C(S, S/2)`` combinations (12,870 for S = 16) from per-block sums.
    """
    _check_num_splits(num_splits)
    r = _as_f64(returns)
    if r.ndim != 2:
        raise ValueError(f"returns must be (T, N): one column per trial, got shape {tuple(r.shape)}")
    x = r.detach().cpu().numpy()
    if np.isinf(x).any():
        raise ValueError("returns must be finite (or NaN for a missing period)")
    num_rows, num_trials = x.shape
    splits = cscv_splits(num_rows, num_splits)
    if splits < 2:
        raise ValueError(
            f"CSCV needs at least {2 * MIN_BLOCK_ROWS} rows (2 blocks of {MIN_BLOCK_ROWS}), got {num_rows}"
        )
    block = num_rows // splits
    used = splits * block
    xb = x[num_rows - used :].reshape(splits, block, num_trials)
    valid = ~np.isnan(xb)
    zeros = np.where(valid, xb, 0.0)
    count = valid.sum(axis=1).astype(np.float64)
    total = zeros.sum(axis=1)
    squares = (zeros * zeros).sum(axis=1)
    bmin = np.where(valid, xb, np.inf).min(axis=1)
    bmax = np.where(valid, xb, -np.inf).max(axis=1)
    # Columns with a block that is flat or empty are the only ones whose halves can be flat.
    flat_cols = ((bmin == bmax) | (count == 0)).any(axis=0)

    # Exclusion: the Sharpe ratio over all rows used is undefined.
    all_blocks = np.ones((1, splits), dtype=bool)
    full = _halves_sharpe(all_blocks, (count, total, squares, bmin, bmax, flat_cols))[0]
    keep = ~np.isnan(full)
    excluded = tuple(int(j) for j in np.flatnonzero(~keep))
    n_valid = int(keep.sum())
    if n_valid < 2:
        return PBOResult(None, np.empty(0), 0, n_valid, splits, excluded, used)
    stats = tuple(a[:, keep] for a in (count, total, squares, bmin, bmax)) + (flat_cols[keep],)

    masks = _half_masks(splits)
    logits = _selection_logits(masks, stats, n_valid, splits)
    pbo = float(np.mean(logits <= 0.0))
    return PBOResult(pbo, logits, len(masks), n_valid, splits, excluded, used)
