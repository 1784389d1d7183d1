"""The execution model's market inputs and its price rule, shared by every kernel of the env step.

A fill of ``q`` shares (``q > 0``) of an asset at the fill bar's open ``p`` pays, per share, a fraction

    frac(q) = (slippage_bps + spread_bps) / 1e4 + impact_coef * impact[t] * sqrt(q)      (at most 1)

of ``p`` (buys at ``p * (1 + frac)``, sells at ``p * (1 - frac)``), where ``impact[t] = daily_vol[t] /
sqrt(adv[t])`` is the asset's square-root impact scale at the decision bar ``t`` (``data.liquidity``:
bars at or before ``t`` only), so that ``impact_coef * impact * sqrt(q) = impact_coef * daily_vol *
sqrt(q / adv)``. The rest of the model (the volume cap, the minimum order, the order of the passes)
is ``envs.core.trade``'s; ``envs/kernels/native/step.c`` and ``envs.reference`` repeat it.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from data.market import MarketData

_IMPACT_TABLES: dict[tuple[int, int], Tensor] = {}


def impact_table(market: MarketData) -> Tensor:
    """``(T, A)`` float32 square-root impact scale ``daily_vol / sqrt(adv)`` of ``market`` (0 where
    there is no volume history), cached while the market's liquidity tensors live."""
    key = (id(market.daily_vol), id(market.adv))
    found = _IMPACT_TABLES.get(key)
    if found is None:
        adv = market.adv.to(torch.float64)
        scale = market.daily_vol.to(torch.float64) / adv.clamp(min=1e-12).sqrt()
        found = torch.where(adv > 0, scale, 0.0).to(torch.float32).contiguous()
        _IMPACT_TABLES[key] = found
        weakref.finalize(market.daily_vol, _IMPACT_TABLES.pop, key, None)
        weakref.finalize(market.adv, _IMPACT_TABLES.pop, key, None)
    return found


def half_cost(params) -> float:
    """The size-free part of ``frac``: slippage plus half-spread, as a fraction of the open."""
    return (params.slippage_bps + params.spread_bps) * 1e-4


def fill_frac(params, quantity: Tensor, impact: Tensor) -> Tensor:
    """``frac(q)`` of the module docstring for ``quantity`` ``|q|`` (a fresh tensor, same dtype)."""
    frac = quantity.sqrt().mul_(impact.to(quantity.dtype)).mul_(params.impact_coef).add_(half_cost(params))
    return frac.clamp_(max=1.0)


def fill_price(params, px_open: Tensor, traded: Tensor, impact: Tensor) -> Tensor:
    """Per-share fill price of signed ``traded`` shares at ``px_open`` (``px_open`` where nothing trades)."""
    return px_open * (1.0 + torch.sign(traded) * fill_frac(params, traded.abs(), impact))


def asset_fees(params, traded: Tensor, fill_price: Tensor) -> Tensor:
    """The broker's fees ``(N, A)`` of signed ``traded`` shares filled at ``fill_price``: the buy
    rate on a buy's notional; on a sell, the sell rate on its proceeds plus the per-share fee, capped
    per trade (``envs.params.EnvParams.broker``)."""
    notional = traded.abs() * fill_price
    sold = (-traded).clamp(min=0.0)
    per_share = sold.mul(params.sell_fee_per_share).clamp_(max=params.sell_fee_cap)
    return torch.where(
        traded < 0, notional * params.sell_fee_rate + per_share, notional * params.buy_fee_rate
    )


#: ``EnvParams`` overrides that switch the execution model off: the frictionless fill (slippage and
#: commission only), e.g. ``EnvParams(**FRICTIONLESS)``.
FRICTIONLESS: dict[str, float] = {
    "spread_bps": 0.0,
    "max_participation": 0.0,
    "impact_coef": 0.0,
    "min_order_notional": 0.0,
}
