"""The execution model's market inputs and its price rule, shared by every kernel of the env step.

A fill of ``q`` shares (``q > 0``) of an asset at the fill bar's open ``p``, on an order of which
``m >= 0`` shares in the same direction were already filled (decayed, see below), pays per share a
fraction

    frac(q; m) = slippage_bps / 1e4 + half[t] + impact_coef * impact[t] * g(q, m)      (at most 1)
    g(q, m) = ((m + q) ** 1.5 - m ** 1.5) / q = (q**2 + 3 m (m + q)) / ((m + q) ** 1.5 + m ** 1.5)

of ``p`` (buys at ``p * (1 + frac)``, sells at ``p * (1 - frac)``), where ``half[t]`` is the half-spread
(a fraction of ``p``) of an order sent at the decision bar ``t``: ``spread_scale * spread_bps / 1e4``
with ``[env] spread = "fixed"``, ``spread_scale * max(MarketData.half_spread[t], spread_bps / 1e4)``
with ``"estimate"`` (per asset and time of day, from bars before the fill bar's session:
``data.liquidity.spread_estimate``), and ``impact[t] = daily_vol[t] /
sqrt(adv[t])`` is the asset's square-root impact scale at the decision bar ``t`` (``data.liquidity``:
bars at or before ``t`` only). The impact paid over an order's fills then sums to the square-root
law on the whole order, ``impact_coef * daily_vol * sqrt(Q / adv)`` per share of ``Q``, however it is
sliced, and one fill with nothing before it (``m = 0``, ``g = sqrt(q)``) pays the law on its own
size. ``m`` is ``EnvState.order``: the signed shares filled so far, each decision's memory
multiplied by ``(1 - impact_decay) ** decision_interval`` (an exponential decay of the order's
impact, Obizhaeva and Wang's resilience, 2013); a fill in the other direction starts a new order.
(The second form of ``g`` avoids the cancellation of the first when ``q`` is small against ``m``.) The rest of the model (the volume cap, the minimum order, the order of the passes)
is ``envs.core.trade``'s; ``envs/kernels/native/step.c`` and ``envs.reference`` repeat it.
"""

from __future__ import annotations

import dataclasses
import weakref

import torch
from torch import Tensor

from data.market import MarketData
from envs.fees import asset_sell_fees

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
    """The size-free part of ``frac`` with ``spread = "fixed"``: slippage plus half-spread, as a
    fraction of the open (with ``"estimate"``: the floor of :func:`half_cost_table`)."""
    return (params.slippage_bps + params.spread_scale * params.spread_bps) * 1e-4


_HALF_TABLES: dict[tuple, Tensor] = {}


def half_cost_table(market: MarketData, params) -> Tensor | None:
    """``(T, A)``, the size-free part of ``frac`` per decision bar and asset with ``spread =
    "estimate"``: ``slippage_bps / 1e4 + spread_scale * max(half_spread, spread_bps / 1e4)`` (summed in
    float64, kept in the params' asset dtype); ``None`` with ``"fixed"`` (every fill pays the scalar
    :func:`half_cost`). Cached while the market's ``half_spread`` lives."""
    if params.spread != "estimate":
        return None
    dtype = params.asset_dtype
    key = (id(market.half_spread), params.slippage_bps, params.spread_bps, params.spread_scale, dtype)
    found = _HALF_TABLES.get(key)
    if found is None:
        floor = params.spread_bps * 1e-4
        half = market.half_spread.to(torch.float64).clamp(min=floor) * params.spread_scale
        found = (half + params.slippage_bps * 1e-4).to(dtype).contiguous()
        _HALF_TABLES[key] = found
        weakref.finalize(market.half_spread, _HALF_TABLES.pop, key, None)
    return found


def execution_tables(market: MarketData, params) -> tuple[Tensor, ...]:
    """The ``(T, A)`` market inputs of the execution model, all read at the decision bar: the fill
    bar's expected volume, :func:`impact_table`, then :func:`half_cost_table` where it is not
    ``None``; ``()`` without the execution model (``envs.core.step_core``'s last arguments)."""
    if not params.execution:
        return ()
    half = half_cost_table(market, params)
    return (market.expected_volume, impact_table(market), *(() if half is None else (half,)))


def order_growth(quantity: Tensor, carried: Tensor | None) -> Tensor:
    """``g(q, m)`` of the module docstring (``sqrt(q)`` without ``carried``; 0 where ``q = m = 0``)."""
    if carried is None:
        return quantity.sqrt()
    total = carried + quantity
    num = quantity * quantity + 3.0 * carried * total
    den = total * total.sqrt() + carried * carried.sqrt()
    return num / den.clamp(min=1e-30)


def fill_frac(
    params, quantity: Tensor, impact: Tensor, carried: Tensor | None = None, half: Tensor | None = None
) -> Tensor:
    """``frac(q; m)`` of the module docstring for ``quantity`` ``|q|`` and ``carried`` ``m``
    (:func:`carried_order`; ``None``: 0), a fresh tensor of ``quantity``'s dtype; ``half``: the
    decision bar's :func:`half_cost_table` row (``None``: the scalar :func:`half_cost`)."""
    grow = order_growth(quantity, None if carried is None else carried.to(quantity.dtype))
    frac = grow.mul_(impact.to(quantity.dtype)).mul_(params.impact_coef)
    frac = frac.add_(half_cost(params) if half is None else half.to(quantity.dtype))
    return frac.clamp_(max=1.0)


def fill_price(
    params,
    px_open: Tensor,
    traded: Tensor,
    impact: Tensor,
    carried: Tensor | None = None,
    half: Tensor | None = None,
) -> Tensor:
    """Per-share fill price of signed ``traded`` shares at ``px_open`` (``px_open`` where nothing trades)."""
    frac = fill_frac(params, traded.abs(), impact, carried, half)
    return px_open * (1.0 + torch.sign(traded) * frac)


def carried_order(remembered: Tensor, side: Tensor) -> Tensor:
    """``m >= 0``: the shares of the decayed order ``remembered`` (signed) on the side of ``side``
    (signed shares of this decision's order), 0 where the sides differ."""
    return torch.where(side > 0, remembered.clamp(min=0.0), (-remembered).clamp(min=0.0))


def worked_order(remembered: Tensor, traded: Tensor) -> Tensor:
    """The impact memory after a fill: ``traded`` added to the decayed order ``remembered`` when both
    go the same way, replacing it when they do not; ``remembered`` where nothing traded."""
    same = torch.where(traded > 0, remembered.clamp(min=0.0), remembered.clamp(max=0.0))
    return torch.where(traded == 0, remembered, same + traded)


def asset_fees(params, traded: Tensor, fill_price: Tensor, rates: Tensor | None = None) -> Tensor:
    """The broker's fees ``(..., A)`` float64 of signed ``traded`` shares filled at ``fill_price``: the
    buy rate on a buy's notional; on a sell, :func:`envs.fees.asset_sell_fees` (the rate on its
    proceeds plus the per-share fee capped per trade, each rounded up to the cent at Alpaca) at
    ``rates`` (``(..., 3)``, the fill bars' :func:`envs.fees.fee_table` rows; ``None``: one rate for
    all)."""
    notional = traded.abs() * fill_price
    sold = (-traded).clamp(min=0.0)
    sells = asset_sell_fees(params, notional.mul(traded < 0), sold, rates)
    return torch.where(traded < 0, sells, notional.to(torch.float64) * params.buy_fee_rate)


def scaled_costs(params, level: float):
    """``params`` (an ``EnvParams``) with every cost term of the fill times ``level``: the broker's
    fees (commission; the SEC fee, the TAF and its cap through ``fee_scale``), slippage, half-spread
    and impact. The volume cap and the minimum order are limits, not costs, and stay."""
    return dataclasses.replace(
        params,
        cost_rate=params.cost_rate * level,
        fee_scale=params.fee_scale * level,
        slippage_bps=params.slippage_bps * level,
        spread_scale=params.spread_scale * level,
        impact_coef=params.impact_coef * level,
    )


#: ``EnvParams`` overrides that switch the execution model off: the frictionless fill (slippage and
#: commission only), e.g. ``EnvParams(**FRICTIONLESS)``.
FRICTIONLESS: dict[str, float | str] = {
    "spread": "fixed",
    "spread_bps": 0.0,
    "max_participation": 0.0,
    "impact_coef": 0.0,
    "min_order_notional": 0.0,
}
