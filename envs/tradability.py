"""What an order may do at each bar: the fill-mode table the env's step reads (one byte per asset).

``MarketData.tradable`` says whether an order can fill at a bar, ``MarketData.listed`` whether the
ticker will be tradable again. The step needs one of three answers per asset at its fill bar:

- ``TRADE`` (1): tradable: the order executes as usual;
- ``HOLD`` (0): not tradable but listed (a forward-filled bar, before the first real bar): the order
  is skipped and the position stays as it is (not queued; the next decision may try again);
- ``EXIT`` (2): not tradable and never again (after the last real bar, out of the universe for
  good): whatever is still held is sold at the fill bar's open, which for a ticker that stopped
  trading is its last real close carried forward (the last real price).

The table is built once per market and cached like the observation table (``envs.observation``);
the eager step skips it on fully tradable markets (``MarketData.all_tradable``), the native kernel
reads it always (one byte per asset per step).
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from data.market import MarketData
from envs import memory

HOLD = 0
TRADE = 1
EXIT = 2

_TABLES: dict[tuple[int, int], Tensor] = {}


def fill_modes(market: MarketData) -> Tensor:
    """``(T, A)`` uint8 table of ``HOLD`` / ``TRADE`` / ``EXIT`` for ``market`` (cached per mask)."""
    key = (id(market.tradable), id(market.listed))
    table = _TABLES.get(key)
    if table is None:
        modes = torch.where(market.tradable, TRADE, torch.where(market.listed, HOLD, EXIT)).to(torch.uint8)
        # On huge pages where that applies (envs.memory), like the native step's price tables: its
        # random row reads then rarely miss the TLB.
        table = memory.table_empty(tuple(modes.shape), torch.uint8, modes.device).copy_(modes)
        _TABLES[key] = table
        weakref.finalize(market.tradable, _TABLES.pop, key, None)
        weakref.finalize(market.listed, _TABLES.pop, key, None)
    return table
