"""What one group of strategies produced over a window, and the accounting of its fills.

The engine runs strategies in groups (the policies as rows of one batched env, the buy-and-hold
baselines, equal weight); each group returns a :class:`GroupRun`, and ``run_backtest`` joins the
groups' columns into one ``BacktestResult``. :func:`trade_accounting` turns the env's traded shares
into notionals and costs for every group the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from data.market import MarketData
from envs import execution
from envs.execution import impact_table
from envs.fees import fee_table
from envs.trading import EnvParams


@dataclass
class GroupRun:
    """One group's per-decision outputs (host tensors), ``N`` strategies over ``K`` decisions."""

    names: list[str]
    equity: Tensor  # (K, N) float64
    weights: Tensor  # (K, N, A) float32
    costs: Tensor  # (K, N) float64
    turnover: Tensor  # (K, N) float64
    trades: Tensor  # (K, N, A) float32
    trade_costs: Tensor  # (K, N, A) float32
    terminated_at: list[int]
    off_equity: Tensor  # (len(off_bars), N) float64 value at the close of sessions without a mark
    shares: Tensor  # (K, N, A) float32 shares traded (+ bought, - sold)
    spread_costs: Tensor  # (K, N, A) float32 slippage + half-spread paid ($)
    impact_costs: Tensor  # (K, N, A) float32 market impact paid ($)

    @staticmethod
    def fill_fields(fills: Fills, shares: Tensor) -> dict[str, Tensor]:
        """The per-fill fields of a :class:`GroupRun` from its :class:`Fills` (host float32)."""
        f32 = lambda x: x.to(torch.float32).cpu()  # noqa: E731
        return {
            "trades": f32(fills.notional),
            "trade_costs": f32(fills.cost),
            "costs": fills.cost.sum(dim=-1).cpu(),
            "shares": f32(shares),
            "spread_costs": f32(fills.spread_cost),
            "impact_costs": f32(fills.impact_cost),
        }


class Fills(NamedTuple):
    """The accounting of a group's fills, each ``(K, N, A)`` float64 (``$`` unless noted)."""

    notional: Tensor  # signed notional at the fill price (+ = buy)
    cost: Tensor  # the broker's fees + slippage + half-spread + impact
    spread_cost: Tensor  # slippage + half-spread
    impact_cost: Tensor  # square-root market impact


def trade_accounting(market: MarketData, params: EnvParams, shares_traded: Tensor, k_steps: int) -> Fills:
    """The notional at the fill price and the cost of every fill, split by kind.

    Recomputed from the env's ``shares_traded`` and its fill rule (bar ``t + 1``'s open, buys at
    ``open * (1 + frac(q))``, sells at ``open * (1 - frac(q))`` with ``frac`` of ``envs.execution``,
    the broker's fees of ``envs.execution.asset_fees``), vectorized over the whole run instead of one
    extra op per step.
    """
    shares = shares_traded.to(torch.float64)
    fill = fill_prices(market, params, shares, k_steps)
    px_open = _fill_bar_rows(market.open, params, k_steps, shares.device).unsqueeze(1)
    notional = shares * fill
    execution_cost = shares.abs() * (fill - px_open).abs()
    half = fill_halves(market, params, k_steps, shares.device).unsqueeze(1)
    spread_cost = torch.minimum(shares.abs() * px_open * half, execution_cost)
    rates = _fill_bar_rows(fee_table(market, params), params, k_steps, shares.device).unsqueeze(1)
    cost = execution.asset_fees(params, shares, fill, rates) + execution_cost
    return Fills(notional, cost, spread_cost, execution_cost - spread_cost)


def _fill_bar_rows(
    table: Tensor, params: EnvParams, k_steps: int, device: torch.device, lag: int = 1
) -> Tensor:
    """Rows ``k * interval + lag`` of a ``(T, A)`` table as float64 ``(K, A)`` (``lag`` 1: the fill
    bars, 0: the decision bars)."""
    bars = torch.arange(k_steps, device=device) * int(params.decision_interval) + lag
    return table.index_select(0, bars.to(table.device)).to(device=device, dtype=torch.float64)


def fill_prices(market: MarketData, params: EnvParams, shares_traded: Tensor, k_steps: int) -> Tensor:
    """Per-share fill price ``(K, N, A)`` of each decision's trades (the fill bar's open where none)."""
    device = shares_traded.device
    px_open = _fill_bar_rows(market.open, params, k_steps, device).unsqueeze(1)
    impact = _fill_bar_rows(impact_table(market), params, k_steps, device, lag=0).unsqueeze(1)
    traded = shares_traded.to(torch.float64)
    half = None
    if params.execution and params.spread == "estimate":
        half = fill_halves(market, params, k_steps, device).unsqueeze(1)
    return execution.fill_price(params, px_open, traded, impact, carried_orders(params, traded), half)


def fill_halves(market: MarketData, params: EnvParams, k_steps: int, device: torch.device) -> Tensor:
    """``(K, A)`` float64: the size-free part of each decision's fill price, slippage + half-spread
    (``envs.execution.half_cost_table`` at the decision bars, or the fixed ``half_cost``)."""
    table = execution.half_cost_table(market, params) if params.execution else None
    if table is None:
        return torch.full(
            (k_steps, market.num_assets), execution.half_cost(params), dtype=torch.float64, device=device
        )
    return _fill_bar_rows(table, params, k_steps, device, lag=0)


def carried_orders(params: EnvParams, traded: Tensor) -> Tensor:
    """``(K, N, A)``: the same-direction order each decision's fill adds to (``m`` of
    ``envs.execution``), replayed from the fills as the env's impact memory carries it (from an empty
    memory; a bust restart, which empties it, is not seen)."""
    carried = torch.zeros_like(traded)
    memory = params.impact_memory if params.execution else 0.0
    if memory == 0.0:
        return carried
    order = torch.zeros_like(traded[0])
    for k in range(traded.shape[0]):
        remembered = order * memory
        carried[k] = execution.carried_order(remembered, traded[k])
        order = execution.worked_order(remembered, traded[k])
    return carried


def fill_volumes(market: MarketData, params: EnvParams, k_steps: int, device: torch.device) -> Tensor:
    """The fill bars' volume ``(K, A)`` in shares as expected at the decision bars
    (``MarketData.expected_volume``): the base of the env's volume cap."""
    return _fill_bar_rows(market.expected_volume, params, k_steps, device, lag=0)
