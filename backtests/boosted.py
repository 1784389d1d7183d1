"""The boosted baseline: gradient-boosted trees on the linear baseline's inputs, traded the same way.

The ridge of ``backtests.linear`` asks whether a learned champion beats a linear model of its
features; the field's next floor is a small tree ensemble, which finds what a linear model cannot
(an interaction, a threshold). This module fits one with LightGBM on exactly the ridge's problem:

- **target and inputs**: ``backtests.linear.decision_panel`` (each asset's return from the fill bar's
  open to the mark's close, and the ``F`` causal features at the decision bar), both demeaned across
  the assets of each decision bar, as the ridge's;
- **fit**: least squares on the decision bars of the **train window**, early-stopped on the
  **validation window** (the split where the ridge chooses its penalty): at most
  :attr:`BoostedSettings.num_trees` trees, stopped after :attr:`BoostedSettings.early_stopping`
  rounds without a better validation loss, and kept only when its mean cross-sectional information
  coefficient on the validation window is positive; otherwise the zero model (no asset preferred:
  equal weights), as the ridge's infinite penalty; then (``refit=True``, the default) grown again to
  the kept number of trees on the train and validation windows' rows together, as the ridge is
  refitted (``backtests.linear``). No test-window bar enters
  (``tests/test_boosted_baseline.py`` replaces the test window by noise and gets the same trees);
- **determinism**: a fixed seed, ``deterministic`` and row-wise histograms, one thread by default:
  the same windows give the same model, byte for byte;
- **trading**: at every decision, equal weights over the top ``backtests.linear.TOP_FRACTION`` of the
  tradable assets by score (``backtests.linear.top_weights``), filled through the env's own step under
  the run's execution rules like every baseline (``run_backtest(..., boosted=model)``: the column
  ``boosted``).

The defaults are small (200 trees at most, 15 leaves, learning rate 0.05) so that a demo's backtest
stays fast; the fit time on the demo's market is in docs/benchmarks.md ("Boosted baseline").
"""

from __future__ import annotations

from dataclasses import dataclass

import lightgbm as lgb
import numpy as np
import torch
from torch import Tensor

from backtests.linear import (
    TOP_FRACTION,
    DecisionRows,
    decision_panel,
    demean,
    information_coefficient,
    top_weights,
)
from data.errors import DataError
from data.market import MarketData
from envs.observation import FEATURES, NUM_GLOBAL, TRADABLE, asset_width, split_obs


@dataclass(frozen=True)
class BoostedSettings:
    """The tree ensemble's size and LightGBM's determinism settings."""

    num_trees: int = 200
    early_stopping: int = 20
    num_leaves: int = 15
    learning_rate: float = 0.05
    min_data_in_leaf: int = 20
    seed: int = 0
    num_threads: int = 1

    def lgb_params(self) -> dict[str, object]:
        """LightGBM's parameters: least squares, deterministic, quiet."""
        return {
            "objective": "regression",
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "seed": self.seed,
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": self.num_threads,
            "verbosity": -1,
        }


@dataclass(frozen=True, eq=False)
class BoostedModel:
    """A fitted boosted baseline; calling it on observations gives the env's ``"weights"`` action
    (equal weight over the top :attr:`top_fraction` by score; the zero model: over every tradable
    asset)."""

    booster: lgb.Booster | None  # None: the zero model
    num_features: int
    num_trees: int  # trees kept (the early-stopped iteration; 0 for the zero model)
    valid_ic: float  # the train window's trees' mean information coefficient on the validation window
    train_ic: float  # ... and on the train window
    num_threads: int = 1
    top_fraction: float = TOP_FRACTION
    refit: bool = False  # booster: grown again to num_trees on the train and validation windows

    def scores(self, features: Tensor, tradable: Tensor) -> Tensor:
        """Scores ``(..., A)`` float64 of features ``(..., A, F)``, demeaned over the ``tradable``
        assets of each row as in the fit (all 0 for the zero model)."""
        x = demean(torch.nan_to_num(features.to(torch.float64)), tradable)
        if self.booster is None:
            return torch.zeros(x.shape[:-1], dtype=torch.float64, device=x.device)
        flat = x.reshape(-1, self.num_features).cpu().numpy()
        pred = self.booster.predict(flat, num_iteration=self.num_trees, num_threads=self.num_threads)
        return torch.as_tensor(np.asarray(pred), dtype=torch.float64).reshape(x.shape[:-1]).to(x.device)

    def __call__(self, obs: Tensor) -> Tensor:
        num_assets = (obs.shape[-1] - NUM_GLOBAL) // asset_width(self.num_features)
        _, block = split_obs(obs, num_assets, self.num_features)
        tradable = block[..., TRADABLE] > 0.5
        if self.booster is None:  # no asset preferred: equal weight
            live = tradable.to(torch.float32)
            return live / live.sum(dim=-1, keepdim=True).clamp(min=1.0)
        return top_weights(self.scores(block[..., FEATURES], tradable), tradable, self.top_fraction)

    def prefers_no_asset(self) -> bool:
        """The zero model: equal weight whatever it observes (``backtests.engine.prefers_no_asset``)."""
        return self.booster is None

    def describe(self) -> dict[str, float]:
        """What metrics.json records of the fit."""
        return {"num_trees": float(self.num_trees), "train_ic": self.train_ic, "valid_ic": self.valid_ic}

    def model_text(self) -> str:
        """The trees as LightGBM writes them ("" for the zero model): equal text, equal model."""
        return "" if self.booster is None else self.booster.model_to_string(num_iteration=self.num_trees)


def _rows(panel: DecisionRows) -> tuple[np.ndarray, np.ndarray]:
    """The valid rows of ``panel``: demeaned features ``(M, F)`` and demeaned returns ``(M,)``."""
    x, y = demean(panel.x, panel.ok), demean(panel.y, panel.ok)
    ok = panel.ok
    return x[ok].cpu().numpy(), y[ok].cpu().numpy()


def fit_panels(
    fit: DecisionRows, valid: DecisionRows, settings: BoostedSettings | None = None, *, refit: bool = True
) -> BoostedModel:
    """The boosted baseline of the decision rows ``fit``, early-stopped and judged on ``valid``, then
    (``refit``) grown again to the kept number of trees on both (see the module docstring)."""
    settings = settings or BoostedSettings()
    num_features = int(fit.x.shape[-1])
    x_fit, y_fit = _rows(fit)
    x_valid, y_valid = _rows(valid)
    if len(y_fit) <= settings.min_data_in_leaf or len(y_valid) == 0:
        raise DataError("the train window has too few valid decision rows to fit the boosted baseline")
    params = settings.lgb_params()
    train_set = lgb.Dataset(x_fit, y_fit, params=params, free_raw_data=False)
    valid_set = lgb.Dataset(x_valid, y_valid, reference=train_set, free_raw_data=False)
    booster = lgb.train(
        params,
        train_set,
        num_boost_round=settings.num_trees,
        valid_sets=[valid_set],
        callbacks=[lgb.early_stopping(settings.early_stopping, verbose=False)],
    )
    kept = int(booster.best_iteration) or int(booster.current_iteration())
    model = BoostedModel(booster, num_features, kept, 0.0, 0.0, settings.num_threads)
    valid_ic = information_coefficient(model.scores(valid.x, valid.ok), valid)
    if not valid_ic > 0.0:  # no validation skill (or none measurable): the zero model
        return BoostedModel(None, num_features, 0, 0.0, 0.0, settings.num_threads)
    train_ic = information_coefficient(model.scores(fit.x, fit.ok), fit)
    if refit:  # the same number of trees on both windows' rows (the validation window has chosen it)
        both = lgb.Dataset(np.concatenate([x_fit, x_valid]), np.concatenate([y_fit, y_valid]), params=params)
        booster = lgb.train(params, both, num_boost_round=kept)
    return BoostedModel(booster, num_features, kept, valid_ic, train_ic, settings.num_threads, refit=refit)


def fit_boosted(
    train: MarketData,
    valid: MarketData,
    decision_interval: int,
    settings: BoostedSettings | None = None,
    *,
    refit: bool = True,
) -> BoostedModel:
    """The boosted baseline fitted on ``train``'s decision bars, early-stopped on ``valid``'s, then
    (``refit``) grown again on both (see the module docstring). Nothing outside the two windows is
    read."""
    return fit_panels(
        decision_panel(train, decision_interval),
        decision_panel(valid, decision_interval),
        settings,
        refit=refit,
    )
