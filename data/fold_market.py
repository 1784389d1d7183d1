"""A window of the market with its features normalized on a part of it: one walk-forward fold's data.

``load_market`` normalizes features with the statistics of ONE train window. A walk-forward retrains
on many windows, and each fold must see features normalized with its own train window's statistics
(and a policy kept from an earlier fold, with the statistics it was trained with: its own spec).
:func:`fold_market` builds that from the loaded market's bars, one fold at a time:

- the raw causal features of bars ``[start, stop)`` are computed from the bars ``[start - lookback,
  stop)`` (every feature window is finite, ``data.features``: a bar's value depends on its last
  ``lookback`` bars only, so this equals the whole history's value up to float rounding, the same
  guarantee paper trading relies on);
- the normalization is fitted on the rows of ``fit`` only (the fold's train window; with
  ``min_coverage``, on the fold's universe's columns only);
- :meth:`FoldMarket.with_spec` gives any part of the window normalized with another spec;
- with ``min_coverage``, the fold trades only its own universe (:func:`fold_universe`): the tickers
  tradable (a real bar, inside index membership) on at least ``min_coverage`` of its train window's
  sessions; the others are untradable over the whole fold (and sold where still held). Nothing after
  the train window decides which tickers a fold trades, and a ticker that joins the index (or whose
  bars start) later enters the first fold whose train window covers it.

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
    FeatureBars,
    compute_set,
    fit_normalization,
    lookback,
    make_spec,
    normalize,
)
from data.market import MarketData


def market_windows(market: MarketData) -> dict[str, int]:
    """The feature windows ``market`` was built with (its spec's; ``DEFAULT_WINDOWS`` without one)."""
    return dict((market.feature_spec or {}).get("windows") or DEFAULT_WINDOWS)


def market_bars(market: MarketData, start: int = 0, stop: int | None = None) -> FeatureBars:
    """Bars ``[start, stop)`` of ``market`` as the feature code reads them (close in float64 where the
    device allows, as ``data.loader`` feeds it; the library set upcasts the rest itself)."""
    work = torch.float32 if market.device.type == "mps" else torch.float64
    rows = slice(start, market.num_steps if stop is None else stop)
    m = market
    return FeatureBars(
        m.open[rows], m.high[rows], m.low[rows], m.close[rows].to(work), m.volume[rows], m.session_id[rows]
    )


def raw_features(
    market: MarketData, start: int, stop: int, windows: Mapping[str, int] | None = None
) -> Tensor:
    """``(stop - start, A, F)`` float32: the raw causal features of bars ``[start, stop)`` of ``market``,
    computed from ``lookback(windows)`` bars before ``start`` on (``compute_set`` works a block
    of assets at a time). ``windows``: default the market's own (:func:`market_windows`)."""
    if not 0 <= start < stop <= market.num_steps:
        raise DataError(f"raw_features: bars [{start}, {stop}) outside [0, {market.num_steps}]")
    windows = market_windows(market) if windows is None else windows
    low = max(0, start - lookback(windows))
    raw = compute_set(market_bars(market, low, stop), windows)
    return raw[start - low :] if start > low else raw


def fold_universe(market: MarketData, fit: tuple[int, int], min_coverage: float) -> Tensor:
    """``(A,)`` bool: the tickers tradable on at least ``min_coverage`` of the sessions of bars
    ``fit = [fit_start, fit_stop)`` (a fold's train window; the loader's coverage rule, judged there
    and only on those bars)."""
    if not 0 <= fit[0] < fit[1] <= market.num_steps:
        raise DataError(f"fold_universe: bars {fit} outside [0, {market.num_steps}]")
    session = market.session_id[fit[0] : fit[1]]
    session = session - session[0]
    num_sessions = int(session[-1]) + 1
    bars = torch.zeros(num_sessions, market.num_assets, dtype=torch.int32, device=market.device)
    bars.index_add_(0, session, market.tradable[fit[0] : fit[1]].int())  # tradable bars per session
    return (bars > 0).float().mean(0) >= min_coverage


def in_universe(market: MarketData, universe: Tensor) -> MarketData:
    """``market`` with the tickers outside ``universe`` (``(A,)`` bool) untradable and never listed
    again there (``envs.tradability``: what is still held is sold at the first bar)."""
    return dataclasses.replace(market, tradable=market.tradable & universe, listed=market.listed & universe)


@dataclass(frozen=True)
class FoldMarket:
    """Bars ``[start, stop)`` of a market with features normalized by ``spec`` (fitted on ``fit``)."""

    market: MarketData  # the window, features normalized with ``spec``
    raw: Tensor  # (T, A, F) float32: its raw causal features
    spec: dict[str, Any]  # the feature spec (normalization fitted on the ``fit`` rows)
    start: int  # first bar, in the source market's bar index
    universe: Tensor | None = None  # (A,) bool: the tickers the fold trades (None = every one)

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
    windows: Mapping[str, int] | None = None,
    fitted_on: tuple[str, str] | None = None,
    min_coverage: float | None = None,
) -> FoldMarket:
    """Bars ``[start, stop)`` of ``market`` (indices of ``market``) with features normalized on the bars
    ``fit = [fit_start, fit_stop)`` (inside the window: the fold's train window); with
    ``min_coverage``, only the fold's universe (:func:`fold_universe` on ``fit``) is tradable.
    ``windows``: default the market's own feature set (:func:`market_windows`)."""
    windows = market_windows(market) if windows is None else windows
    if not start <= fit[0] < fit[1] <= stop:
        raise DataError(f"fold_market: the fit window {fit} is not inside the bars [{start}, {stop})")
    raw = raw_features(market, start, stop, windows)
    fit_rows = raw[fit[0] - start : fit[1] - start]
    universe = None if min_coverage is None else fold_universe(market, fit, min_coverage)
    if universe is not None:
        if not bool(universe.any()):
            raise DataError(
                f"fold_market: no ticker is tradable on {min_coverage:.0%} of the train window's "
                f"sessions {fitted_on or fit} (min_coverage)"
            )
        # Fitted on the fold's own tickers only: a ticker outside it (its bars start later, it joins
        # the index later) must not move the statistics the fold's policy learns with.
        fit_rows = fit_rows[:, universe]
    mean, std = fit_normalization(fit_rows)
    spec = make_spec(mean, std, windows, interval=market.interval, fitted_on=fitted_on)
    view = market.slice(start, stop)
    if universe is not None:
        view = in_universe(view, universe)
    normalized = dataclasses.replace(
        view, features=normalize(raw, spec), feature_names=tuple(spec["names"]), feature_spec=spec
    )
    return FoldMarket(market=normalized, raw=raw, spec=spec, start=start, universe=universe)
