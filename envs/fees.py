"""The regulatory fees' tensor side (the schedules, their dates and the rounding rule:
:mod:`envs.fee_schedule`): :func:`fee_table`, the rates in force on each bar's session, and
:func:`sell_fees`, a batch of sells' fees with each fee of each order rounded up to the cent at
Alpaca. Each fee is computed in float64 from the per-asset proceeds and shares (float32 or float64),
the same way in ``envs/kernels/native/step.c``.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from data.calendar import session_dates
from envs.fee_schedule import CENT_SLACK, rates_on, rates_on_date, round_up_cent

if TYPE_CHECKING:
    from data.market import MarketData

__all__ = [
    "asset_sell_fees",
    "fee_table",
    "rates_on",
    "rates_on_date",
    "round_up_cent",
    "round_up_cents",
    "sell_fees",
]

# The params are an ``envs.params.EnvParams``, read by field name (that module imports the schedules).
EnvParams = Any


def round_up_cents(fee: Tensor) -> Tensor:
    """``fee`` ($, float64, >= 0) rounded up to the cent, in place (0 stays 0)."""
    return fee.mul_(100.0).sub_(CENT_SLACK).ceil_().clamp_(min=0.0).div_(100.0)


_FEE_TABLES: dict[tuple, Tensor] = {}


def fee_table(market: MarketData, params: EnvParams) -> Tensor:
    """``(T, 3)`` float64 on the market's device: :func:`rates_on` of each bar's session date
    (``data.calendar.session_dates``), so a fill at bar ``b`` reads row ``b``. Cached while the
    market's timestamps live."""
    key = (
        id(market.timestamps), str(market.device), params.broker, params.cost_rate,
        params.sec_fee_schedule, params.taf_schedule, params.fee_scale,
    )  # fmt: skip
    found = _FEE_TABLES.get(key)
    if found is None:
        dates = session_dates(market.timestamps).values.astype("datetime64[D]")
        found = torch.as_tensor(rates_on(params, dates), dtype=torch.float64).to(market.device)
        _FEE_TABLES[key] = found
        weakref.finalize(market.timestamps, _FEE_TABLES.pop, key, None)
    return found


def sell_fees(
    params: EnvParams,
    proceeds: Tensor,
    sold: Tensor,
    rates: Tensor | None,
    sell_notional: Tensor | None = None,
) -> Tensor:
    """``(N,)`` float64: the fees of a batch of sells. ``proceeds`` / ``sold`` ``(N, A)``: each
    asset's sale proceeds in $ and shares sold (>= 0); ``rates`` ``(N, 3)``: each env's row of
    :func:`fee_table` at its fill bar (``None``: :attr:`EnvParams.sell_rates`, one rate for all).
    Each asset's sale pays ``rate * proceeds`` plus ``min(per_share * sold, cap)``, each rounded up
    to the cent with ``params.round_fees`` (at Alpaca): :func:`asset_sell_fees` summed. Without the
    rounding, ``sell_notional`` (the row sums of ``proceeds`` in float64, when the caller has them)
    prices the first term on the sum. The flat profile's commission is ``cost_rate`` on the sum."""
    if params.rounds_fees:
        return asset_sell_fees(params, proceeds, sold, rates).sum(1)
    notional = proceeds.sum(1, dtype=torch.float64) if sell_notional is None else sell_notional
    if params.broker == "flat":
        return notional * params.cost_rate
    fee = notional * (params.sell_rates[0] if rates is None else rates[:, 0])
    return fee + _share_fees(params, sold, rates).sum(1)


def asset_sell_fees(params: EnvParams, proceeds: Tensor, sold: Tensor, rates: Tensor | None) -> Tensor:
    """The per-asset terms of :func:`sell_fees` (``(..., A)`` float64, not summed): ``rates``
    ``(..., 3)`` on ``proceeds``' leading dimensions, or ``None``."""
    sec = params.sell_rates[0] if rates is None else rates[..., 0:1]
    fee = proceeds.to(torch.float64) * sec
    if params.rounds_fees:
        fee = round_up_cents(fee)
    if params.broker == "alpaca":
        fee = fee + _share_fees(params, sold, rates)
    return fee


def _share_fees(params: EnvParams, sold: Tensor, rates: Tensor | None) -> Tensor:
    """Per asset, ``min(per_share * sold, cap)`` in float64 (rounded up to the cent with rounding)."""
    if rates is None:
        _, per_share, cap = params.sell_rates
        fee = (sold.to(torch.float64) * per_share).clamp_(max=cap)
    else:
        fee = torch.minimum(sold.to(torch.float64) * rates[..., 1:2], rates[..., 2:3])
    return round_up_cents(fee) if params.rounds_fees else fee
