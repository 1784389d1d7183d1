"""Probabilistic and deflated Sharpe ratios (Bailey & López de Prado, 2012 and 2014).

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def trial_sharpe_variance(trial_sharpes: Sequence[float], annualization: float = 1.0) -> float | None:
    """Variance (ddof=1) of the trials' Sharpe ratios, converted to per-period units.

    ``trial_sharpes`` annualized with ``annualization`` periods a year (1 = already per period).
    None with fewer than two finite values.
    """
    values = np.asarray([s for s in trial_sharpes if s is not None and math.isfinite(s)], dtype=float)
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
