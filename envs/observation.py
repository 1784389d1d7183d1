"""The observation layout, defined once, and the writers that build observations in it.

One observation (float32) is ``NUM_GLOBAL`` global slots, then one block of ``2 + F`` slots per
asset (:func:`asset_width`)::

    [cash fraction, time of day,  weight_0, tradable_0, features_0 (F),  weight_1, tradable_1, ...]

- ``CASH``: cash / marked value; ``TIME_OF_DAY``: the decision bar's ``market.time_of_day``.
- Per asset, ``WEIGHT``: position value / marked value (marked at the decision bar's close),
  ``TRADABLE``: 1.0 if the decision bar is a tradable bar of the asset (``MarketData.tradable``: a
  real bar inside membership), else 0.0 (what the policy can know at ``t``; whether the fill bar
  ``t + 1`` is tradable it cannot), then ``FEATURES``: the asset's ``F`` features of the decision bar.

Everything that reads or writes observations goes through these names: the env (:mod:`envs.trading`),
the plain-Python reference env, the backtest loop, the agents' networks and paper trading. Two
places cannot import this module and are pinned to it by tests instead: the native kernel
(``envs/kernels/native/step.c``, C; its observations equal this module's to float rounding in
tests/test_native.py) and the torch-free bundle loader of ``app/export.py`` (tests/test_export.py).
"""

from __future__ import annotations

import weakref
from typing import TypeVar

import torch
from torch import Tensor

from data.market import MarketData
from envs import memory

CASH = 0  # global slot: cash / marked value
TIME_OF_DAY = 1  # global slot: the bar's fraction of its session elapsed
NUM_GLOBAL = 2  # global slots before the per-asset blocks
WEIGHT = 0  # per-asset slot: position value / marked value
TRADABLE = 1  # per-asset slot: 1.0 if the decision bar is tradable for the asset, else 0.0
PER_ASSET_FIXED = 2  # per-asset slots before the features
FEATURES = slice(PER_ASSET_FIXED, None)  # per-asset slots: the asset's features

# Floor of the marked value the fractions are divided by (a bust book can be worth ~0).
_MIN_VALUE = 1e-12

Obs = TypeVar("Obs")  # a torch tensor or a numpy array


def asset_width(num_features: int) -> int:
    """Slots of one asset's block: ``PER_ASSET_FIXED + num_features`` (weight, tradable, features)."""
    return PER_ASSET_FIXED + num_features


def obs_dim(num_assets: int, num_features: int) -> int:
    """Length of one observation: ``NUM_GLOBAL + num_assets * (2 + num_features)``."""
    return NUM_GLOBAL + num_assets * asset_width(num_features)


def split_obs(obs: Obs, num_assets: int, num_features: int) -> tuple[Obs, Obs]:
    """Views ``(glob (..., NUM_GLOBAL), per_asset (..., A, 2 + F))`` of observations (a tensor or a
    numpy array; writes into the views land in ``obs``).

    ``glob[..., CASH]`` is the cash fraction, ``glob[..., TIME_OF_DAY]`` the time of day;
    ``per_asset[..., WEIGHT]`` is the position weight, ``per_asset[..., TRADABLE]`` the tradable flag
    and ``per_asset[..., FEATURES]`` the features.
    """
    if obs.shape[-1] != obs_dim(num_assets, num_features):
        raise ValueError(f"obs has {obs.shape[-1]} columns, expected {obs_dim(num_assets, num_features)}")
    lead = obs.shape[:-1]
    return obs[..., :NUM_GLOBAL], obs[..., NUM_GLOBAL:].reshape(*lead, num_assets, asset_width(num_features))


# --- the template table --------------------------------------------------------------------------
# A per-market "observation template" table (T, obs_dim): time of day and features already in their
# interleaved slots, zeros for cash fraction and weights. One row gather builds most of an
# observation in a single contiguous pass; gathering the features and copying them into the strided
# per-asset slots measured slower (docs/benchmarks.md). Costs 1 + 1/F times the features' memory, so
# markets beyond OBS_TABLE_MAX_BYTES fall back to the strided copy.
OBS_TABLE_MAX_BYTES = 2 << 30
_OBS_TABLES: dict[tuple[int, int, int], Tensor] = {}


def obs_table(market: MarketData) -> Tensor | None:
    """The cached template table of ``market`` (``None`` when it would be too large).

    Keyed by the identity of the features and time-of-day tensors (MarketData is immutable; a new
    market or slice gets its own table) and dropped when the features tensor is freed.
    """
    feats, tod, tradable = market.features, market.time_of_day, market.tradable
    key = (id(feats), id(tod), id(tradable))  # a tensor's device never changes
    table = _OBS_TABLES.get(key)
    if table is not None:
        return table
    num_steps, num_assets, num_features = feats.shape
    width = obs_dim(num_assets, num_features)
    if num_steps * width * 4 > OBS_TABLE_MAX_BYTES:
        return None
    table = memory.table_empty((num_steps, width), torch.float32, feats.device).zero_()
    table[:, TIME_OF_DAY] = tod
    per_asset = split_obs(table, num_assets, num_features)[1]
    per_asset[..., TRADABLE] = tradable
    per_asset[..., FEATURES] = feats
    _OBS_TABLES[key] = table
    weakref.finalize(feats, _OBS_TABLES.pop, key, None)
    weakref.finalize(tod, _OBS_TABLES.pop, key, None)
    weakref.finalize(tradable, _OBS_TABLES.pop, key, None)
    return table


# --- writers -------------------------------------------------------------------------------------
def build_obs(market: MarketData, t: Tensor, cash: Tensor, pos_value: Tensor, value: Tensor) -> Tensor:
    """Observations ``(N, obs_dim)`` at bars ``t`` (N,) of books with ``cash`` (N,), position values
    ``pos_value`` (N, A) and marked ``value`` (N,)."""
    num_envs, num_assets = pos_value.shape
    num_features = market.num_features
    table = obs_table(market)
    if table is not None:
        obs = table.index_select(0, t)
    else:
        obs = torch.empty(num_envs, obs_dim(num_assets, num_features), dtype=torch.float32, device=t.device)
        obs[:, TIME_OF_DAY] = market.time_of_day.index_select(0, t)
        per_asset = split_obs(obs, num_assets, num_features)[1]
        per_asset[..., TRADABLE] = market.tradable.index_select(0, t)
        per_asset[..., FEATURES] = market.features.index_select(0, t)
    return write_portfolio(obs, cash, pos_value, value, num_features)


def write_portfolio(
    obs: Tensor, cash: Tensor, pos_value: Tensor, value: Tensor, num_features: int, traced: bool = False
) -> Tensor:
    """Writes the cash fractions and position weights into ``obs`` (in place) and returns it.
    ``traced``: through an assignment instead (``torch.compile`` rejects a strided ``out=``): the same
    values for float64 positions; float32 positions are then scaled in float32 (one rounding apart)."""
    inv_value = value.clamp(min=_MIN_VALUE).reciprocal_()  # (1.0 / x would be reciprocal, then * 1.0)
    obs[:, CASH] = cash * inv_value
    first, stride = (
        NUM_GLOBAL + WEIGHT,
        asset_width(num_features),
    )  # the (N, A) weight slots: obs[:, first::stride]
    if traced:
        obs[:, first::stride] = pos_value * inv_value.unsqueeze(1)
        return obs
    # Written straight into the strided weight slots (no temporary); same-dtype operands, since a
    # float64 factor would make the float32 positions go through a cast copy first.
    if pos_value.dtype != inv_value.dtype:
        inv_value = inv_value.to(pos_value.dtype)
    torch.mul(pos_value, inv_value.unsqueeze(1), out=obs[:, first::stride])
    return obs


def fresh_obs(market: MarketData, t: Tensor) -> Tensor:
    """Observations of freshly reset books (all cash, no positions) at bars ``t``."""
    table = obs_table(market)
    if table is None:
        # float64: the accounting dtype of cash and value (envs.core.ACC_DTYPE).
        ones = torch.ones(t.shape[0], dtype=torch.float64, device=t.device)
        zeros = torch.zeros(t.shape[0], market.num_assets, dtype=torch.float32, device=t.device)
        return build_obs(market, t, ones, zeros, ones)
    obs = table.index_select(0, t)
    obs[:, CASH] = 1.0
    return obs
