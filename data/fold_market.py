"""A window of the market with its features normalized on a part of it: one walk-forward fold's data.

``load_market`` normalizes features with the statistics of ONE train window. A walk-forward retrains
on many windows, and each fold must see features normalized with its own train window's statistics
(and a policy kept from an earlier fold, with the statistics it was trained with: its own spec).
:func:`fold_market` builds that from the loaded market's bars, one fold at a time:

- the raw causal features of bars ``[start, stop)`` are computed from the bars ``[start - lookback,
  stop)`` (every feature window is finite, ``data.features``: a bar's value depends on its last
  ``lookback`` bars only, so this equals the whole history's value up to float rounding, the same
  guarantee paper trading relies on);
- the normalization is fitted on the rows of ``fit`` only (the fold's train window);
- :meth:`FoldMarket.with_spec` gives any part of the window normalized with another spec.

Only the fold's bars are held (views of the market's prices, plus the fold's features): the caller
drops a fold before building the next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from data.errors import DataError
from data.features import (
    DEFAULT_WINDOWS,
    compute_features,
    fit_normalization,
    lookback,
    make_spec,
    normalize,
)
from data.market import MarketData


def raw_features(
    market: MarketData, start: int, stop: int, windows: Mapping[str, int] = DEFAULT_WINDOWS
) -> Tensor:
    """``(stop - start, A, F)`` float32: the raw causal features of bars ``[start, stop)`` of ``market``,
    computed from ``lookback(windows)`` bars before ``start`` on (``compute_features`` works a block
    of assets at a time)."""
    if not 0 <= start < stop <= market.num_steps:
        raise DataError(f"raw_features: bars [{start}, {stop}) outside [0, {market.num_steps}]")
    low = max(0, start - lookback(windows))
    work = torch.float32 if market.device.type == "mps" else torch.float64
    raw = compute_features(market.close[low:stop].to(work), market.volume[low:stop], windows)
    return raw[start - low :] if start > low else raw


@dataclass(frozen=True)
class FoldMarket:
    """Bars ``[start, stop)`` of a market with features normalized by ``spec`` (fitted on ``fit``)."""

    market: MarketData  # the window, features normalized with ``spec``
    raw: Tensor  # (T, A, F) float32: its raw causal features
    spec: dict[str, Any]  # the feature spec (normalization fitted on the ``fit`` rows)
    start: int  # first bar, in the source market's bar index

    def window(self, start: int, stop: int) -> MarketData:
        """Bars ``[start, stop)`` (source market indices) normalized with the fold's own spec."""
        return self.market.slice(start - self.start, stop - self.start)

    def with_spec(self, start: int, stop: int, spec: Mapping[str, Any]) -> MarketData:
        """Bars ``[start, stop)`` (source market indices) with features normalized by ``spec`` (a policy
        trained on another window sees these bars through its own statistics)."""
        view = self.window(start, stop)
        features = normalize(self.raw[start - self.start : stop - self.start], spec)
        return dataclasses.replace(
            view, features=features, feature_names=tuple(spec["names"]), feature_spec=dict(spec)
        )


def fold_market(
    market: MarketData,
    start: int,
    stop: int,
    fit: tuple[int, int],
    *,
    windows: Mapping[str, int] = DEFAULT_WINDOWS,
    fitted_on: tuple[str, str] | None = None,
) -> FoldMarket:
    """Bars ``[start, stop)`` of ``market`` (indices of ``market``) with features normalized on the bars
    ``fit = [fit_start, fit_stop)`` (inside the window: the fold's train window)."""
    if not start <= fit[0] < fit[1] <= stop:
        raise DataError(f"fold_market: the fit window {fit} is not inside the bars [{start}, {stop})")
    raw = raw_features(market, start, stop, windows)
    mean, std = fit_normalization(raw[fit[0] - start : fit[1] - start])
    spec = make_spec(mean, std, windows, interval=market.interval, fitted_on=fitted_on)
    view = market.slice(start, stop)
    normalized = dataclasses.replace(
        view, features=normalize(raw, spec), feature_names=tuple(spec["names"]), feature_spec=spec
    )
    return FoldMarket(market=normalized, raw=raw, spec=spec, start=start)
