"""What one group of strategies produced over a window, and the accounting of its fills.

The engine runs strategies in groups (the policies as rows of one batched env, the buy-and-hold
baselines, equal weight); each group returns a :class:`GroupRun`, and ``run_backtest`` joins the
groups' columns into one ``BacktestResult``. :func:`trade_accounting` turns the env's traded shares
into notionals and costs for every group the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from data.market import MarketData
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


def trade_accounting(
    market: MarketData, params: EnvParams, shares_traded: Tensor, k_steps: int
) -> tuple[Tensor, Tensor]:
    """Signed notional ``(K, N, A)`` at the fill price and per-asset cost (commission + slippage).

    Recomputed from the env's ``shares_traded`` and its fill rule (bar ``t + 1``'s open, buys at
    ``open * (1 + s)``, sells at ``open * (1 - s)``, commission ``cost_rate`` of the fill notional),
    vectorized over the whole run instead of one extra op per step.
    """
    interval = int(params.decision_interval)
    fill_bars = torch.arange(k_steps, device=shares_traded.device) * interval + 1
    px_open = market.open.index_select(0, fill_bars).to(torch.float64).unsqueeze(1)  # (K, 1, A)
    slip = float(params.slippage_bps) * 1e-4
    fill = px_open * (1.0 + slip * torch.sign(shares_traded))
    notional = shares_traded * fill
    cost = float(params.cost_rate) * notional.abs() + shares_traded.abs() * px_open * slip
    return notional, cost
