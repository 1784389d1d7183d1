"""``MarketData``: the aligned bars and causal features of one universe, as device tensors.

Everything downstream (envs, agents, backtests, export) reads market data only through this class.
Time is axis 0, assets axis 1, features axis 2. Prices are float32 on ``device``.

Layout contract (relied on by ``envs.trading`` and the agents):
- ``open``/``high``/``low``/``close``/``volume``: ``(T, A)``; bars aligned to the exchange session
  grid, gaps forward-filled within a session (volume 0).
- ``features``: ``(T, A, F)``; feature ``f`` of asset ``a`` at bar ``t`` uses bars ``<= t`` only,
  already normalized with statistics fitted on the train window only.
- ``timestamps``: ``(T,)`` numpy ``datetime64[ns]`` (UTC bar start); host-side, never on the device.
- ``session_id``: ``(T,)`` int64, 0-based index of the trading session each bar belongs to.
- ``time_of_day``: ``(T,)`` float32 in [0, 1]: fraction of the session elapsed at the bar's close.
- ``tradable``: ``(T, A)`` bool: an order can fill at this bar (a real bar of the ticker, inside its
  index membership when a universe is given). False before a ticker's first real bar, after its
  last, on forward-filled bars and outside membership. All True for synthetic data.
- ``listed``: ``(T, A)`` bool: the ticker has a tradable bar at or after this bar (computed over the
  whole loaded history, then sliced with it): False once it stopped being tradable for good, which
  is when the env sells what is still held (docs/env.md "Tradable bars").
- ``daily_vol`` / ``adv``: ``(T, A)`` float32 trailing daily volatility and average daily volume
  (shares) at each bar, from bars at or before it (``data.liquidity``; computed over the whole loaded
  history, then sliced with it): the env's market impact reads them at the decision bar.
- ``expected_volume``: ``(T, A)`` float32, row ``t`` the volume expected at bar ``t + 1`` from what
  is known at bar ``t`` (``data.liquidity.expected_volume``; computed over the whole loaded history,
  then sliced with it): the env's volume cap for an order sent at ``t``.
- ``half_spread``: ``(T, A)`` float32, a fraction of the price: row ``t`` the half-spread expected
  for an order sent at bar ``t`` (filled at ``t + 1``), Abdi and Ranaldo's estimate by time-of-day
  bucket over the sessions before bar ``t + 1``'s (``data.liquidity.spread_estimate``; computed over
  the whole loaded history, then sliced with it): the env's spread with ``[env] spread = "estimate"``.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from data.calendar import exchange_dates
from data.errors import DataError
from data.liquidity import expected_volume, spread_estimate, trailing_liquidity


def listed_from(tradable: Tensor) -> Tensor:
    """``(T, A)`` bool: a tradable bar exists at or after each bar (a reverse cumulative any)."""
    return tradable.flip(0).int().cummax(0).values.flip(0).bool()


# id(tradable) -> every entry True (MarketData.all_tradable), dropped when the tensor is freed.
_ALL_TRADABLE: dict[int, bool] = {}


@dataclass(frozen=True)
class MarketData:
    tickers: tuple[str, ...]
    timestamps: np.ndarray  # (T,) datetime64[ns] UTC bar start
    open: Tensor  # (T, A) float32
    high: Tensor  # (T, A) float32
    low: Tensor  # (T, A) float32
    close: Tensor  # (T, A) float32
    volume: Tensor  # (T, A) float32
    features: Tensor  # (T, A, F) float32, causal and train-normalized
    feature_names: tuple[str, ...]
    session_id: Tensor  # (T,) int64
    time_of_day: Tensor  # (T,) float32 in [0, 1]
    interval: str = "1m"
    # JSON-able description of how features were computed and normalized (see data.features).
    feature_spec: dict[str, Any] = field(default_factory=dict)
    tradable: Tensor | None = None  # (T, A) bool; None = every bar tradable (set in __post_init__)
    listed: Tensor | None = None  # (T, A) bool; None = derived from tradable over these bars
    daily_vol: Tensor | None = None  # (T, A) float32 trailing daily volatility; None = from these bars
    adv: Tensor | None = None  # (T, A) float32 trailing average daily volume (shares); None = from these bars
    expected_volume: Tensor | None = None  # (T, A) float32: row t, bar t + 1's volume estimated at t
    half_spread: Tensor | None = (
        None  # (T, A) float32 fraction: row t, bar t + 1's half-spread estimated at t
    )

    def __post_init__(self) -> None:
        num_steps, num_assets = self.close.shape
        if self.tradable is None:
            object.__setattr__(
                self,
                "tradable",
                torch.ones(num_steps, num_assets, dtype=torch.bool, device=self.close.device),
            )
        if self.tradable.shape != (num_steps, num_assets) or self.tradable.dtype != torch.bool:
            raise DataError(f"MarketData: tradable must be bool {(num_steps, num_assets)}")
        if self.listed is None:
            object.__setattr__(self, "listed", listed_from(self.tradable))
        if self.listed.shape != (num_steps, num_assets) or self.listed.dtype != torch.bool:
            raise DataError(f"MarketData: listed must be bool {(num_steps, num_assets)}")

        if len(self.tickers) != num_assets:
            raise DataError(f"MarketData: {len(self.tickers)} tickers but close has {num_assets} columns")
        for name in ("open", "high", "low", "volume"):
            if getattr(self, name).shape != (num_steps, num_assets):
                raise DataError(f"MarketData: {name} has shape {tuple(getattr(self, name).shape)}")
        if self.features.shape[:2] != (num_steps, num_assets):
            raise DataError(f"MarketData: features has shape {tuple(self.features.shape)}")
        if self.features.shape[2] != len(self.feature_names):
            raise DataError("MarketData: feature_names does not match features' last axis")
        if len(self.timestamps) != num_steps or self.session_id.shape != (num_steps,):
            raise DataError("MarketData: timestamps/session_id length does not match bars")
        if self.daily_vol is None or self.adv is None:
            daily_vol, adv = trailing_liquidity(self.close, self.volume, self.session_id)
            object.__setattr__(self, "daily_vol", daily_vol)
            object.__setattr__(self, "adv", adv)
        if self.expected_volume is None:
            object.__setattr__(self, "expected_volume", expected_volume(self.volume, self.session_id))
        if self.half_spread is None:
            spread = spread_estimate(self.high, self.low, self.close, self.session_id)
            object.__setattr__(self, "half_spread", spread)
        for name in ("daily_vol", "adv", "expected_volume", "half_spread"):
            if getattr(self, name).shape != (num_steps, num_assets):
                raise DataError(f"MarketData: {name} must be {(num_steps, num_assets)}")

    # --- sizes -------------------------------------------------------------------------------
    @property
    def all_tradable(self) -> bool:
        """Every bar of every asset is tradable (synthetic data): the env then skips the mask.
        Computed once per mask tensor (one host sync) and cached while the tensor lives."""
        key = id(self.tradable)
        found = _ALL_TRADABLE.get(key)
        if found is None:
            found = _ALL_TRADABLE[key] = bool(self.tradable.all())
            weakref.finalize(self.tradable, _ALL_TRADABLE.pop, key, None)
        return found

    @property
    def num_steps(self) -> int:
        return int(self.close.shape[0])

    @property
    def num_assets(self) -> int:
        return int(self.close.shape[1])

    @property
    def num_features(self) -> int:
        return int(self.features.shape[2])

    @property
    def device(self) -> torch.device:
        return self.close.device

    @property
    def num_sessions(self) -> int:
        if self.num_steps == 0:
            return 0
        return int(torch.unique(self.session_id).numel())

    # --- views -------------------------------------------------------------------------------
    def to(self, device: str | torch.device) -> MarketData:
        """The same data on ``device`` (a no-op when already there)."""
        device = torch.device(device)
        if device == self.device:
            return self
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **moved)

    def slice(self, start: int, stop: int) -> MarketData:
        """Bars ``[start, stop)`` (views, no copy). Session ids are kept as they are."""
        if not 0 <= start <= stop <= self.num_steps:
            raise DataError(f"MarketData.slice({start}, {stop}) outside [0, {self.num_steps}]")
        cut = {
            f.name: getattr(self, f.name)[start:stop]
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor | np.ndarray)
        }
        return dataclasses.replace(self, **cut)

    def join(self, later: MarketData) -> MarketData:
        """This window's bars then ``later``'s (the next window of the same market: the same names and
        features, its first bar after this one's last), as :meth:`slice` of the market they were cut
        from would give them."""
        if later.tickers != self.tickers or later.feature_names != self.feature_names:
            raise DataError("MarketData.join: the windows hold different tickers or features")
        if self.num_steps and later.num_steps and not later.timestamps[0] > self.timestamps[-1]:
            raise DataError("MarketData.join: the later window does not start after this one ends")
        joined = {}
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(later, f.name)
            if isinstance(a, Tensor):
                joined[f.name] = torch.cat([a, b.to(a.device)])
            elif isinstance(a, np.ndarray):
                joined[f.name] = np.concatenate([a, b])
        return dataclasses.replace(self, **joined)

    def session_dates(self) -> np.ndarray:
        """``(T,)`` datetime64[D] of each bar's session date (``data.calendar.exchange_dates``)."""
        return exchange_dates(self.timestamps).values.astype("datetime64[D]")

    def window(self, start: str | np.datetime64 | None, end: str | np.datetime64 | None) -> MarketData:
        """Bars whose session date lies in ``[start, end]`` (inclusive dates, either may be None)."""
        dates = self.session_dates()
        mask = np.ones(len(dates), dtype=bool)
        if start is not None:
            mask &= dates >= np.datetime64(start, "D")
        if end is not None:
            mask &= dates <= np.datetime64(end, "D")
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            raise DataError(f"no bars between {start} and {end}")
        if idx[-1] - idx[0] + 1 != len(idx):
            raise DataError("window is not contiguous")
        return self.slice(int(idx[0]), int(idx[-1]) + 1)

    def split_sessions(
        self, train_frac: float, valid_frac: float
    ) -> tuple[MarketData, MarketData, MarketData]:
        """Split by whole sessions into train / valid / test, in time order, with no overlap."""
        if not (0 < train_frac < 1 and 0 < valid_frac < 1 and train_frac + valid_frac < 1):
            raise DataError(f"bad split fractions train={train_frac} valid={valid_frac}")
        sessions = torch.unique(self.session_id).cpu().numpy()
        n = len(sessions)
        n_train = int(round(n * train_frac))
        n_valid = int(round(n * valid_frac))
        if n_train < 1 or n_valid < 1 or n - n_train - n_valid < 1:
            raise DataError(f"{n} sessions are too few for a train/valid/test split")
        sid = self.session_id.cpu().numpy()
        cut1 = int(np.searchsorted(sid, sessions[n_train], side="left"))
        cut2 = int(np.searchsorted(sid, sessions[n_train + n_valid], side="left"))
        return self.slice(0, cut1), self.slice(cut1, cut2), self.slice(cut2, self.num_steps)

    def date_range(self) -> tuple[str, str]:
        """First and last session dates as ISO strings."""
        dates = self.session_dates()
        return str(dates[0]), str(dates[-1])
