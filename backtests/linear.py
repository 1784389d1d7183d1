"""The linear baseline: a cross-sectional ridge on the policy's own features, traded long-only.

A quant's first question about a learned champion is whether it beats a linear model on the same
inputs. This module answers it with the plainest one:

- **target**: each asset's return over the next decision interval as the env books it, from the
  fill bar's open to the mark bar's close (``close[t + k] / open[t + 1] - 1`` for a decision on bar
  ``t`` and ``decision_interval`` ``k``), demeaned across assets at each decision bar (a
  cross-sectional model: what ranks the names, not the market's move);
- **inputs**: the ``F`` causal features of the observation (``MarketData.features`` at the decision
  bar, normalized on the train window), demeaned across assets the same way;
- **fit**: ridge regression (closed form, float64) on the decision bars of the **train window**;
  the penalty is chosen among :data:`PENALTIES` by the mean cross-sectional information coefficient
  (the Pearson correlation of scores and demeaned returns per decision bar) on the **validation
  window**, the infinite penalty included: the zero model (no asset preferred, information
  coefficient 0), which holds equal weights; so a model without validation skill does not trade
  noise;
- **refit** (``refit=True``, the default): once the validation window has chosen, the ridge is fitted
  again at the chosen penalty on the train and validation windows' decision bars together, as the
  tournament's direct champion is (``agents.tournament.refit``): both judged on the test window
  with the same past behind them. No test-window bar enters (``tests/test_linear_baseline.py``
  replaces the test window by noise and gets the same model);
- **trading**: at every decision, equal weights over the top :data:`TOP_FRACTION` of the tradable
  assets by score (long-only, fully invested; the zero model: equal weights over all of them), filled through the env's own step like every other
  baseline (``backtests.engine.run_backtest(..., linear=model)``: the column ``linear``).

Closed-form ridge is hand-written (a ``(F, F)`` solve) rather than taken from scikit-learn: the
fit is three lines of torch on tensors already on the device, and the penalty path reuses one Gram
matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from data.errors import DataError
from data.market import MarketData
from envs.observation import FEATURES, NUM_GLOBAL, TRADABLE, asset_width, split_obs

#: Ridge penalties tried, as multiples of the mean diagonal of the features' Gram matrix.
PENALTIES: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: Share of the tradable assets held, equal weight, at each decision (the top by score).
TOP_FRACTION = 0.2


@dataclass(frozen=True)
class DecisionRows:
    """Decision-bar rows of a window: features ``x (K, A, F)``, next-interval returns ``y (K, A)``
    and the rows' validity ``ok (K, A)`` (finite, tradable at the decision and fill bars)."""

    x: Tensor
    y: Tensor
    ok: Tensor


def decision_panel(market: MarketData, decision_interval: int) -> DecisionRows:
    """Every decision bar ``t = k * decision_interval`` of ``market`` whose mark bar ``t + interval``
    lies inside the window, with its features and next-interval return (float64)."""
    k = int(decision_interval)
    bars = torch.arange(0, market.num_steps - k, k, device=market.device)
    if bars.numel() == 0:
        raise DataError(f"a window of {market.num_steps} bars has no decision with its mark inside")
    x = market.features.index_select(0, bars).to(torch.float64)
    fill_open = market.open.index_select(0, bars + 1).to(torch.float64)
    mark_close = market.close.index_select(0, bars + k).to(torch.float64)
    y = mark_close / fill_open - 1.0
    ok = torch.isfinite(x).all(dim=-1) & torch.isfinite(y) & (fill_open > 0)
    ok &= market.tradable.index_select(0, bars) & market.tradable.index_select(0, bars + 1)
    return DecisionRows(x=torch.nan_to_num(x), y=torch.nan_to_num(y), ok=ok)


def demean(values: Tensor, ok: Tensor) -> Tensor:
    """``values (K, A, ...)`` less their mean over the valid assets of each row; invalid entries 0."""
    mask = ok.to(values.dtype)
    while mask.ndim < values.ndim:
        mask = mask.unsqueeze(-1)
    count = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    mean = (values * mask).sum(dim=1, keepdim=True) / count
    return (values - mean) * mask


def information_coefficient(scores: Tensor, panel: DecisionRows) -> float:
    """Mean over decision bars of the cross-sectional Pearson correlation of ``scores (K, A)`` with
    the demeaned next-interval returns (rows with fewer than 3 valid assets or no spread skipped)."""
    s = demean(scores.to(torch.float64), panel.ok)
    y = demean(panel.y, panel.ok)
    num = (s * y).sum(dim=1)
    den = (s.square().sum(dim=1) * y.square().sum(dim=1)).sqrt()
    use = (panel.ok.sum(dim=1) >= 3) & (den > 0)
    if not bool(use.any()):
        return float("nan")
    return float((num[use] / den[use]).mean())


@dataclass(frozen=True)
class LinearModel:
    """A fitted linear baseline: ``coef (F,)`` over the features; calling it on observations gives the
    env's ``"weights"`` action (equal weight over the top :attr:`top_fraction` by score)."""

    coef: Tensor  # (F,) float64 (all 0: the zero model)
    penalty: float  # the chosen penalty multiple (one of PENALTIES, or inf: the zero model)
    valid_ic: float  # the train window's fit's mean information coefficient on the validation window
    train_ic: float  # ... and on the train window
    top_fraction: float = TOP_FRACTION
    refit: bool = False  # coef: refitted on the train and validation windows at the chosen penalty

    def scores(self, features: Tensor) -> Tensor:
        """Scores ``(..., A)`` of features ``(..., A, F)``."""
        return features.to(self.coef.dtype) @ self.coef.to(features.device)

    def weights(self, scores: Tensor, tradable: Tensor) -> Tensor:
        """Equal weights ``(N, A)`` float32 over the top ``top_fraction`` tradable assets of each row."""
        if not bool(self.coef.any()):  # the zero model prefers no asset: equal weight
            live = tradable.to(torch.float32)
            return live / live.sum(dim=-1, keepdim=True).clamp(min=1.0)
        return top_weights(scores, tradable, self.top_fraction)

    def __call__(self, obs: Tensor) -> Tensor:
        num_features = int(self.coef.shape[0])
        num_assets = (obs.shape[-1] - NUM_GLOBAL) // asset_width(num_features)
        _, block = split_obs(obs, num_assets, num_features)
        return self.weights(self.scores(block[..., FEATURES]), block[..., TRADABLE] > 0.5)

    def prefers_no_asset(self) -> bool:
        """The zero model: equal weight whatever it observes (``backtests.engine.prefers_no_asset``)."""
        return not bool(self.coef.any())

    def describe(self) -> dict[str, float]:
        """What metrics.json records of the fit."""
        return {"penalty": self.penalty, "train_ic": self.train_ic, "valid_ic": self.valid_ic}


def top_weights(scores: Tensor, tradable: Tensor, fraction: float = TOP_FRACTION) -> Tensor:
    """Equal weights ``(N, A)`` float32 over the top ``fraction`` of the assets by ``scores (N, A)``,
    tradable ones only (how the linear baseline, and any score it is compared with, is traded)."""
    take = max(1, round(fraction * scores.shape[-1]))
    masked = torch.where(tradable, scores, torch.full_like(scores, -torch.inf))
    top = masked.topk(take, dim=-1).indices
    picked = torch.zeros_like(scores, dtype=torch.float32).scatter_(-1, top, 1.0)
    picked = picked * tradable.to(torch.float32)
    return picked / picked.sum(dim=-1, keepdim=True).clamp(min=1.0)


def ridge_path(panel: DecisionRows, penalties: tuple[float, ...] = PENALTIES) -> list[Tensor]:
    """The ridge coefficients ``(F,)`` of ``panel`` for each penalty multiple."""
    x = demean(panel.x, panel.ok).reshape(-1, panel.x.shape[-1])
    y = demean(panel.y, panel.ok).reshape(-1)
    gram = x.T @ x
    rhs = x.T @ y
    scale = float(gram.diagonal().mean().clamp(min=1e-300))
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    return [torch.linalg.solve(gram + p * scale * eye, rhs) for p in penalties]


def join_panels(first: DecisionRows, second: DecisionRows) -> DecisionRows:
    """The rows of ``first`` then ``second`` (two windows' decision rows, each target inside its own
    window)."""
    return DecisionRows(
        x=torch.cat([first.x, second.x]),
        y=torch.cat([first.y, second.y]),
        ok=torch.cat([first.ok, second.ok]),
    )


def fit_linear(
    train: MarketData,
    valid: MarketData,
    decision_interval: int,
    *,
    penalties: tuple[float, ...] = PENALTIES,
    refit: bool = True,
) -> LinearModel:
    """The linear baseline fitted on ``train``'s decision bars, its penalty chosen on ``valid``'s,
    then (``refit``) fitted again at that penalty on both windows' bars (see the module docstring).
    Nothing outside the two windows is read."""
    fit_panel = decision_panel(train, decision_interval)
    valid_panel = decision_panel(valid, decision_interval)
    if int(fit_panel.ok.sum()) <= fit_panel.x.shape[-1]:
        raise DataError("the train window has too few valid decision rows to fit the linear baseline")
    # The infinite penalty first: a finite one is chosen only for a positive validation IC.
    zero = torch.zeros(fit_panel.x.shape[-1], dtype=torch.float64, device=fit_panel.x.device)
    best: tuple[float, float, Tensor] = (0.0, float("inf"), zero)
    for penalty, coef in zip(penalties, ridge_path(fit_panel, penalties), strict=True):
        ic = information_coefficient(valid_panel.x @ coef, valid_panel)
        if ic == ic and ic > best[0]:
            best = (ic, float(penalty), coef)
    ic, penalty, coef = best
    train_ic = information_coefficient(fit_panel.x @ coef, fit_panel) if coef.any() else 0.0
    if refit and coef.any():  # (the zero model stays zero: no validation skill, nothing to refit)
        coef = ridge_path(join_panels(fit_panel, valid_panel), (penalty,))[0]
    return LinearModel(
        coef=coef.cpu(), penalty=penalty, valid_ic=ic, train_ic=train_ic, refit=refit and bool(coef.any())
    )
