"""Performance metrics in torch, with empyrical's names, signatures, semantics and NaN policy.

Every metric takes returns with time on axis 0, shaped ``(T,)`` or ``(T, N)``, and gives one value per
column: a 0-d tensor for ``(T,)`` input, an ``(N,)`` tensor for ``(T, N)``. So a whole population of
strategies is scored in one call. Inputs of any float dtype (or numpy arrays / lists) are computed in
float64, because Sharpe ratios of minute returns lose digits in float32.

NaN policy, as empyrical-reloaded 0.7:

- NaN returns are skipped (``nanmean``/``nanstd``/``nanprod``), but still count in the length used
  for ``annual_return``'s number of years (as empyrical does);
- too few returns give NaN: fewer than 1 for ``cum_returns_final``, ``annual_return``,
  ``max_drawdown``; fewer than 2 for ``annual_volatility``, ``sharpe_ratio``, ``sortino_ratio``;
- a zero denominator gives ``inf`` (or NaN for 0/0), as numpy's division does; a column of identical
  returns has exactly zero dispersion (so Sharpe of a constant positive return is ``+inf``);
- ``calmar_ratio`` is NaN when there is no drawdown or the ratio is infinite.

Beyond empyrical: ``turnover``, ``costs_paid``, ``exposure``, ``hit_rate``, ``aggregate_by_day``
(intraday returns compounded into daily returns), and ``summary``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from backtests import metrics_model

DAILY = "daily"
WEEKLY = "weekly"
MONTHLY = "monthly"
QUARTERLY = "quarterly"
YEARLY = "yearly"

ANNUALIZATION_FACTORS: dict[str, int] = {DAILY: 252, WEEKLY: 52, MONTHLY: 12, QUARTERLY: 4, YEARLY: 1}
#: Trading sessions a year: the annualization of daily returns where no config says it (benchmarks,
#: tests). A run passes ``[backtest] annualization``: every function below ``app`` that annualizes
#: takes it as a required argument.
TRADING_DAYS_PER_YEAR: int = ANNUALIZATION_FACTORS[DAILY]

#: The metric names ``summary`` returns, in display order (metrics.json's per-strategy keys but the
#: ones the report adds: ``backtests.metrics_model``).
SUMMARY_METRICS: tuple[str, ...] = metrics_model.SUMMARY_METRICS


def annualization_factor(period: str = DAILY, annualization: float | None = None) -> float:
    """Periods per year: ``annualization`` when given, else the factor of ``period`` (daily: 252)."""
    if annualization is not None:
        return float(annualization)
    try:
        return float(ANNUALIZATION_FACTORS[period])
    except KeyError:
        raise ValueError(f"period cannot be {period!r}; can be {', '.join(ANNUALIZATION_FACTORS)}") from None


def _as_f64(returns: Any) -> Tensor:
    if isinstance(returns, Tensor):
        out = returns.to(torch.float64)
    else:
        out = torch.as_tensor(np.asarray(returns, dtype=np.float64))
    if out.ndim not in (1, 2):
        raise ValueError(f"returns must be (T,) or (T, N), got shape {tuple(out.shape)}")
    return out


def _nan_like(returns: Tensor) -> Tensor:
    """NaN with one value per column: 0-d for (T,), (N,) for (T, N)."""
    return torch.full(returns.shape[1:], math.nan, dtype=torch.float64, device=returns.device)


def _adjust(returns: Tensor, adjustment: float | Tensor) -> Tensor:
    if isinstance(adjustment, Tensor):
        return returns - adjustment.to(returns)
    return returns - adjustment if adjustment != 0 else returns


def _nanstd(x: Tensor, ddof: int = 1) -> Tensor:
    valid = ~torch.isnan(x)
    count = valid.sum(dim=0).to(x.dtype)
    mean = torch.nanmean(x, dim=0)
    sq = torch.where(valid, (x - mean) ** 2, torch.zeros((), dtype=x.dtype, device=x.device))
    var = sq.sum(dim=0) / (count - ddof)
    # Fewer than ddof + 1 present values: the deviation is undefined.
    return torch.where(count > ddof, var, torch.full_like(var, math.nan)).sqrt()


def _nanmax(x: Tensor) -> Tensor:
    return torch.where(torch.isnan(x), -math.inf, x).amax(dim=0)


def _nanmin(x: Tensor) -> Tensor:
    return torch.where(torch.isnan(x), math.inf, x).amin(dim=0)


def _zero_dispersion_std(values: Tensor, std: Tensor) -> Tensor:
    # Identical values have exactly zero deviation; the float mean they are centred on can leave a
    # ~1e-18 residue that would turn an infinite ratio into an arbitrary 1e15 (empyrical does the same).
    constant = (_nanmax(values) == _nanmin(values)) & torch.isfinite(std)
    return torch.where(constant, torch.zeros_like(std), std)


def _nanprod1p(returns: Tensor) -> Tensor:
    """prod(1 + r) over time, NaN returns skipped."""
    one_plus = torch.where(torch.isnan(returns), torch.ones_like(returns), returns + 1.0)
    return torch.prod(one_plus, dim=0)


# --- empyrical metrics ----------------------------------------------------------------------------
def cum_returns(returns: Any, starting_value: float = 0.0) -> Tensor:
    """Cumulative returns at every step (NaN returns count as 0), shaped like ``returns``."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return r.clone()
    growth = torch.cumprod(torch.nan_to_num(r, nan=0.0) + 1.0, dim=0)
    return growth - 1.0 if starting_value == 0 else growth * starting_value


def cum_returns_final(returns: Any, starting_value: float = 0.0) -> Tensor:
    """Total compounded return (``starting_value`` > 0: the final value instead)."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return _nan_like(r)
    total = _nanprod1p(r)
    return total - 1.0 if starting_value == 0 else total * starting_value


def annual_return(returns: Any, period: str = DAILY, annualization: float | None = None) -> Tensor:
    """Compound annual growth rate; the number of years is ``len(returns) / annualization``."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return _nan_like(r)
    num_years = r.shape[0] / annualization_factor(period, annualization)
    return _nanprod1p(r) ** (1.0 / num_years) - 1.0


def cagr(returns: Any, period: str = DAILY, annualization: float | None = None) -> Tensor:
    """Alias of :func:`annual_return`."""
    return annual_return(returns, period, annualization)


def annual_volatility(
    returns: Any, period: str = DAILY, alpha: float = 2.0, annualization: float | None = None
) -> Tensor:
    """Sample standard deviation (ddof=1) scaled by ``annualization ** (1 / alpha)``."""
    r = _as_f64(returns)
    if r.shape[0] < 2:
        return _nan_like(r)
    return _nanstd(r) * annualization_factor(period, annualization) ** (1.0 / alpha)


def drawdown_series(returns: Any) -> Tensor:
    """Drawdown from the running peak at every step (the starting value counts as a peak)."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return r.clone()
    wealth = cum_returns(r, starting_value=100.0)
    anchor = torch.full((1, *r.shape[1:]), 100.0, dtype=torch.float64, device=r.device)
    peak = torch.cummax(torch.cat([anchor, wealth], dim=0), dim=0).values[1:]
    return (wealth - peak) / peak


def max_drawdown(returns: Any) -> Tensor:
    """Largest peak-to-trough fall, a non-positive fraction (-0.25 = a 25% drawdown)."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return _nan_like(r)
    return _nanmin(drawdown_series(r))


def calmar_ratio(returns: Any, period: str = DAILY, annualization: float | None = None) -> Tensor:
    """Annual return over the absolute max drawdown; NaN without a drawdown or when infinite."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return _nan_like(r)
    max_dd = max_drawdown(r)
    ratio = annual_return(r, period, annualization) / max_dd.abs()
    ok = (max_dd < 0) & ~torch.isinf(ratio)
    return torch.where(ok, ratio, torch.full_like(ratio, math.nan))


def sharpe_ratio(
    returns: Any, risk_free: float | Tensor = 0.0, period: str = DAILY, annualization: float | None = None
) -> Tensor:
    """Annualized Sharpe ratio: mean / std (ddof=1) of excess returns times sqrt(annualization)."""
    r = _as_f64(returns)
    if r.shape[0] < 2:
        return _nan_like(r)
    adj = _adjust(r, risk_free)
    std = _zero_dispersion_std(adj, _nanstd(adj))
    return torch.nanmean(adj, dim=0) / std * math.sqrt(annualization_factor(period, annualization))


def downside_risk(
    returns: Any,
    required_return: float | Tensor = 0.0,
    period: str = DAILY,
    annualization: float | None = None,
) -> Tensor:
    """Annualized root-mean-square of the returns below ``required_return``."""
    r = _as_f64(returns)
    if r.shape[0] == 0:
        return _nan_like(r)
    below = _adjust(r, required_return).clamp(max=0.0)
    return torch.nanmean(below**2, dim=0).sqrt() * math.sqrt(annualization_factor(period, annualization))


def sortino_ratio(
    returns: Any,
    required_return: float | Tensor = 0.0,
    period: str = DAILY,
    annualization: float | None = None,
) -> Tensor:
    """Annualized mean excess return over the annualized downside risk."""
    r = _as_f64(returns)
    if r.shape[0] < 2:
        return _nan_like(r)
    factor = annualization_factor(period, annualization)
    mean_annual = torch.nanmean(_adjust(r, required_return), dim=0) * factor
    return mean_annual / downside_risk(r, required_return, period, annualization)


# --- trading metrics beyond empyrical ---------------------------------------------------------------
def beta(returns: Any, factor_returns: Any) -> Tensor:
    """Beta of ``returns`` ``(T,)``/``(T, N)`` to ``factor_returns`` ``(T,)``: their covariance over
    the factor's variance (ddof=1; empyrical's ``beta``, no risk-free rate). NaN with fewer than 2
    returns or a flat factor."""
    r, f = _as_f64(returns), _as_f64(factor_returns)
    f = f.reshape(f.shape[0], *([1] * (r.dim() - 1)))
    if r.shape[0] < 2:
        return _nan_like(r)
    fd = f - f.mean(dim=0)
    var = (fd**2).sum(dim=0) / (r.shape[0] - 1)
    cov = ((r - r.mean(dim=0)) * fd).sum(dim=0) / (r.shape[0] - 1)
    return torch.where(var > 0, cov / var.clamp(min=1e-300), torch.full_like(cov, math.nan))


def alpha(
    returns: Any, factor_returns: Any, period: str = DAILY, annualization: float | None = None
) -> Tensor:
    """Jensen's alpha, annualized as empyrical's ``alpha``: ``(1 + mean(r - beta f))^ann - 1``."""
    r, f = _as_f64(returns), _as_f64(factor_returns)
    b = beta(r, f)
    f = f.reshape(f.shape[0], *([1] * (r.dim() - 1)))
    per_period = (r - b * f).mean(dim=0)
    return (1.0 + per_period) ** annualization_factor(period, annualization) - 1.0


def information_ratio(
    returns: Any, factor_returns: Any, period: str = DAILY, annualization: float | None = None
) -> Tensor:
    """Annualized information ratio: mean over standard deviation (ddof=1) of the excess returns
    ``r - f``, times sqrt(annualization) (empyrical's ``excess_sharpe``, annualized). NaN when the
    excess has no dispersion."""
    r, f = _as_f64(returns), _as_f64(factor_returns)
    f = f.reshape(f.shape[0], *([1] * (r.dim() - 1)))
    return sharpe_ratio(r - f, period=period, annualization=annualization)


def turnover(step_turnover: Any, num_periods: int) -> Tensor:
    """Average one-way turnover per period: total traded notional / portfolio value, over ``num_periods``.

    ``step_turnover`` is ``(T,)`` or ``(T, N)``: traded notional divided by the portfolio value at
    each decision. With ``num_periods`` = the number of sessions this is the mean daily turnover
    (1.0 = the whole book traded once a day). NaN when ``num_periods`` is 0.
    """
    x = _as_f64(step_turnover)
    if num_periods <= 0:
        return _nan_like(x)
    return torch.nansum(x, dim=0) / num_periods


def costs_paid(step_costs: Any, initial_value: float) -> Tensor:
    """Total transaction costs (commission and slippage) as a fraction of the initial value."""
    x = _as_f64(step_costs)
    if initial_value <= 0:
        raise ValueError("initial_value must be positive")
    return torch.nansum(x, dim=0) / initial_value


def exposure(weights: Any) -> Tensor:
    """Mean fraction of the portfolio invested (sum of absolute asset weights), over time.

    ``weights`` is ``(T, A)`` or ``(T, N, A)``; the result is 0-d or ``(N,)``. NaN when T = 0.
    """
    w = (
        weights.to(torch.float64)
        if isinstance(weights, Tensor)
        else torch.as_tensor(np.asarray(weights, float))
    )
    if w.ndim not in (2, 3):
        raise ValueError(f"weights must be (T, A) or (T, N, A), got shape {tuple(w.shape)}")
    gross = w.abs().sum(dim=-1)
    if gross.shape[0] == 0:
        return _nan_like(gross)
    return gross.mean(dim=0)


def hit_rate(returns: Any) -> Tensor:
    """Fraction of winning periods among periods with a non-zero return (NaN when there are none)."""
    r = _as_f64(returns)
    active = (r != 0) & ~torch.isnan(r)
    wins = (r > 0).sum(dim=0).to(torch.float64)
    count = active.sum(dim=0).to(torch.float64)
    return torch.where(count > 0, wins / count, torch.full_like(count, math.nan))


# --- aggregation and summary ------------------------------------------------------------------------
def aggregate_by_day(returns: Any, day_index: Any) -> Tensor:
    """Compound per-step returns ``(T,)``/``(T, N)`` into per-day returns ``(D,)``/``(D, N)``.

    ``day_index`` ``(T,)`` gives each step's day (any integers, non-decreasing); the days, in order of
    first appearance, are the output rows. NaN steps count as 0 return.
    """
    r = _as_f64(returns)
    idx = torch.as_tensor(np.asarray(day_index)) if not isinstance(day_index, Tensor) else day_index
    idx = idx.to(device=r.device, dtype=torch.int64)
    if idx.shape != r.shape[:1]:
        raise ValueError(f"day_index has shape {tuple(idx.shape)}, returns have {r.shape[0]} steps")
    if r.shape[0] == 0:
        return r.clone()
    if bool((idx[1:] < idx[:-1]).any()):
        raise ValueError("day_index must be non-decreasing")
    _, dense = torch.unique_consecutive(idx, return_inverse=True)
    num_days = int(dense[-1]) + 1
    # log1p sums are exact enough in float64 and handle every column in one scatter.
    logs = torch.log1p(torch.nan_to_num(r, nan=0.0))
    out = torch.zeros((num_days, *r.shape[1:]), dtype=torch.float64, device=r.device)
    out.index_add_(0, dense, logs)
    return torch.expm1(out)


def summary(
    daily_returns: Any,
    *,
    step_turnover: Any | None = None,
    step_costs: Any | None = None,
    weights: Any | None = None,
    initial_value: float = 1.0,
    period: str = DAILY,
    annualization: float | None = None,
) -> dict[str, Tensor]:
    """Every headline metric of ``daily_returns`` ``(D,)``/``(D, N)``, keyed as in :data:`SUMMARY_METRICS`.

    ``turnover`` is per period of ``daily_returns`` (so per day), ``costs_paid`` a fraction of
    ``initial_value``, ``exposure`` the mean invested fraction; those three are NaN when their input is
    not given.
    """
    r = _as_f64(daily_returns)
    kw = {"period": period, "annualization": annualization}
    nan = _nan_like(r)
    return {
        "cum_returns_final": cum_returns_final(r),
        "annual_return": annual_return(r, **kw),
        "annual_volatility": annual_volatility(r, **kw),
        "sharpe_ratio": sharpe_ratio(r, **kw),
        "sortino_ratio": sortino_ratio(r, **kw),
        "max_drawdown": max_drawdown(r),
        "calmar_ratio": calmar_ratio(r, **kw),
        "turnover": turnover(step_turnover, r.shape[0]) if step_turnover is not None else nan,
        "costs_paid": costs_paid(step_costs, initial_value) if step_costs is not None else nan,
        "exposure": exposure(weights) if weights is not None else nan,
        "hit_rate": hit_rate(r),
    }


def to_floats(values: Tensor | Sequence[float]) -> list[float | None]:
    """A metric tensor as JSON-able floats, NaN/inf as None."""
    arr = values.detach().cpu().reshape(-1).tolist() if isinstance(values, Tensor) else list(values)
    return [float(v) if v is not None and math.isfinite(v) else None for v in arr]
