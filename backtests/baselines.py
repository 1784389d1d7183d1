"""The baselines a backtest compares policies with: an investor's plain alternatives, costs on.

Each runs through the training env's own ``step`` (the same fills, slippage and costs as a policy)
from the window's first bar, as one group of ``run_backtest``'s columns:

- ``"buy_and_hold"``: equal weight of the universe bought with the first decision and then held (no
  rebalancing): the buy is the env's ``"weights"`` fill at bar 1's open (fractional shares, slippage and
  costs); holding is the env's ``"shares"``-mode step with a zero action, which trades nothing and
  marks ``cash + shares @ close``; that mark is computed for every decision bar at once instead of one
  call per step (a test checks the two agree);
- ``"index"``: buy-and-hold of an index ETF (the first of :data:`INDEX_TICKERS` in the universe; skipped
  when there is none), the same way; its column is named ``index_<TICKER>``;
- ``"equal_weight"``: equal weights over the universe, rebalanced with the first fill of every session
  (the first decision whose fill bar, ``t + 1``, lies in a new session: at that session's open when the
  decision grid lines up with the sessions, as with 390 one-minute bars and ``decision_interval`` 15),
  held in between (no trade), costs on: each rebalance is the env's ``"weights"`` fill; the marks between
  rebalances are computed at once from the held shares, as for buy-and-hold;
- ``"cash"``: never trades;
- ``"linear"``: the linear baseline of ``backtests.linear`` (a ridge on the policy's features, fitted on
  the train window, its top quintile held equal weight, rebalanced at every decision), run only when
  ``run_backtest`` is handed the fitted model (``linear=``), like ``"index"`` without an index ETF.

Baselines are never capped by the env's ``max_weight`` nor by its volume cap ``max_participation``
(they are the investor's own alternative, not the agent under its risk limits); they pay the spread,
the commission and the square-root impact of their size like any fill (:func:`investor`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from backtests.accounting import GroupRun, trade_accounting
from data.market import MarketData
from envs import trading
from envs.observation import WEIGHT, split_obs
from envs.trading import EnvParams

#: Index ETFs used for the ``"index"`` baseline, in order of preference.
INDEX_TICKERS: tuple[str, ...] = ("QQQ", "SPY")
#: Every baseline name ``run_backtest`` understands.
BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "index", "cash", "linear")
DEFAULT_BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "cash", "index", "linear")


def investor(params: EnvParams) -> EnvParams:
    """The env of the baselines: no ``max_weight`` cap and no volume cap (they pay the spread and the
    impact of their size, but are not held to a share of one bar's volume: a buy-and-hold that the cap
    kept mostly in cash for weeks is no investor's alternative)."""
    return dataclasses.replace(params, max_weight=1.0, max_participation=0.0)


def is_baseline(name: str) -> bool:
    """Whether ``name`` is a baseline's column of a backtest (``index_<TICKER>`` included)."""
    return name in BASELINES or name.startswith("index_")


def static_weights(market: MarketData, baselines: Sequence[str]) -> list[tuple[str, Tensor]]:
    """``(name, target weights (A,))`` of every baseline that buys once and then holds."""
    out: list[tuple[str, Tensor]] = []
    num_assets = market.num_assets
    for name in baselines:
        if name == "buy_and_hold":
            out.append((name, torch.full((num_assets,), 1.0 / num_assets)))
        elif name == "cash":
            out.append((name, torch.zeros(num_assets)))
        elif name == "index":
            ticker = next((t for t in INDEX_TICKERS if t in market.tickers), None)
            if ticker is not None:
                w = torch.zeros(num_assets)
                w[market.tickers.index(ticker)] = 1.0
                out.append((f"index_{ticker}", w))
    return out


def run_static(
    market: MarketData,
    params: EnvParams,
    static: list[tuple[str, Tensor]],
    k_steps: int,
    seed: int,
    off_bars: np.ndarray | None = None,
    *,
    through_env: bool = False,
    capital: Tensor | None = None,
) -> GroupRun:
    """Buy the target weights with the first decision, then hold the shares to the end.

    The buy is the env's ``"weights"`` fill (fractional shares, at bar 1's open, with slippage and
    costs). Holding is a ``"shares"``-mode step with a zero action, which trades nothing and marks
    ``cash + shares @ close``; by default that mark is computed for all decision bars at once
    (``through_env=True`` steps the env instead; the tests check both agree). ``capital`` (N,): each
    row's starting cash instead of ``params.initial_cash``.
    """
    names = [s[0] for s in static]
    n = len(names)
    device = market.device
    interval = int(params.decision_interval)
    # Baselines are the investor's own alternative, not the agent under its risk limits: never capped
    # (a 0.1 cap would turn the index baseline into 90% cash). docs/env.md "Risk limits".
    params = investor(params)
    buy_params = dataclasses.replace(params, action_mode="weights")
    hold_params = dataclasses.replace(params, action_mode="shares")
    with torch.inference_mode():
        state, _ = trading.reset(market, buy_params, n, torch.Generator().manual_seed(seed), start=0)
        state = _with_capital(state, capital)
        target = torch.stack([s[1] for s in static]).to(device=device, dtype=torch.float32)
        state, _, _, _, _, info = trading.step(market, buy_params, state, target)
        first_value = info["value"].to(torch.float64)
        bought = info["shares_traded"].to(torch.float64)  # (N, A)
        first_traded = info["traded_notional"].to(torch.float64)
        if through_env:
            values, weights = [first_value], [_weights_of(info["final_obs"], market)]
            zero = torch.zeros(n, market.num_assets, device=device)
            for _ in range(1, k_steps):
                state, _, _, _, _, info = trading.step(market, hold_params, state, zero)
                values.append(info["value"].to(torch.float64))
                weights.append(_weights_of(info["final_obs"], market))
            equity = torch.stack(values)
            w = torch.stack(weights)
        else:
            mark_bars = torch.arange(1, k_steps + 1, device=device) * interval  # (K,)
            close = market.close.index_select(0, mark_bars).to(torch.float64)  # (K, A)
            held = close.unsqueeze(1) * state.shares.unsqueeze(0)  # (K, N, A)
            equity = state.cash.unsqueeze(0) + held.sum(dim=-1)  # (K, N)
            equity[0] = first_value  # the env's own first mark
            w = (held / equity.unsqueeze(-1).clamp(min=1e-12)).to(torch.float32)
        shares = torch.zeros(k_steps, n, market.num_assets, dtype=torch.float64, device=device)
        shares[0] = bought
        fills = trade_accounting(market, params, shares, k_steps)
        turnover = torch.zeros(k_steps, n, dtype=torch.float64, device=device)
        turnover[0] = first_traded / (float(params.initial_cash) if capital is None else capital.to(device))
        off = torch.as_tensor(off_bars if off_bars is not None else np.zeros(0, np.int64), device=device)
        off_close = market.close.index_select(0, off).to(torch.float64)  # (O, A)
        off_equity = state.cash.to(torch.float64).unsqueeze(0) + off_close @ state.shares.to(torch.float64).T
    return GroupRun(
        names=names,
        equity=equity.cpu(),
        weights=w.to(torch.float32).cpu(),
        turnover=turnover.cpu(),
        terminated_at=[-1] * n,
        off_equity=off_equity.cpu(),
        **GroupRun.fill_fields(fills, shares),
    )


def rebalance_rows(market: MarketData, interval: int, k_steps: int) -> np.ndarray:
    """Decision rows of ``"equal_weight"``'s rebalances: row 0 and each first row whose fill bar
    (``k * interval + 1``) lies in a session other than the previous row's fill bar."""
    dates = market.session_dates()
    fill_dates = dates[np.arange(k_steps) * interval + 1]
    return np.flatnonzero(np.r_[True, fill_dates[1:] != fill_dates[:-1]]).astype(np.int64)


def _with_capital(state: trading.EnvState, capital: Tensor | None) -> trading.EnvState:
    """``state`` with each row's starting cash ``capital`` (N,) (unchanged for ``None``)."""
    if capital is None:
        return state
    cash = capital.to(device=state.cash.device, dtype=state.cash.dtype)
    return dataclasses.replace(state, cash=cash.clone(), value=cash.clone(), peak=cash.clone())


def run_equal_weight(
    market: MarketData,
    params: EnvParams,
    k_steps: int,
    seed: int,
    off_bars: np.ndarray,
    capital: Tensor | None = None,
) -> GroupRun:
    """Equal weights bought at each rebalance row (the env's ``"weights"`` fill), held in between.

    Between rebalances nothing trades, so the marks are ``cash + shares @ close`` computed for the
    whole segment at once; at a rebalance the env state is moved to that decision bar (time index and
    value marked at its close) and stepped once in ``"weights"`` mode, which trades, pays costs and
    slippage exactly as for any policy. ``capital`` (N,): one row per starting cash (default: one row
    at ``params.initial_cash``).
    """
    device = market.device
    interval = int(params.decision_interval)
    num_assets = market.num_assets
    params = investor(params)
    buy_params = dataclasses.replace(params, action_mode="weights")
    rows = rebalance_rows(market, interval, k_steps)
    ends = np.r_[rows[1:], k_steps]
    n = 1 if capital is None else int(capital.shape[0])
    equity = torch.zeros(k_steps, n, dtype=torch.float64, device=device)
    weights = torch.zeros(k_steps, n, num_assets, dtype=torch.float64, device=device)
    shares_traded = torch.zeros(k_steps, n, num_assets, dtype=torch.float64, device=device)
    turnover = torch.zeros(k_steps, n, dtype=torch.float64, device=device)
    seg_cash, seg_shares = [], []
    target = torch.full((n, num_assets), 1.0 / num_assets, device=device)
    with torch.inference_mode():
        state, _ = trading.reset(market, buy_params, n, torch.Generator().manual_seed(seed), start=0)
        state = _with_capital(state, capital)
        prev_value = state.value.to(torch.float64).clone()
        for r, end in zip(rows.tolist(), ends.tolist(), strict=True):
            if r > 0:
                t = r * interval
                close_t = market.close[t].to(torch.float64)
                value = state.cash.to(torch.float64) + (state.shares.to(torch.float64) * close_t).sum(-1)
                state = dataclasses.replace(
                    state, t=torch.full_like(state.t, t), value=value.to(state.value.dtype)
                )
                prev_value = equity[r - 1].clone()
            state, _, _, _, _, info = trading.step(market, buy_params, state, target)
            cash = state.cash.to(torch.float64)  # (N,)
            held_shares = state.shares.to(torch.float64)  # (N, A)
            seg_cash.append(cash)
            seg_shares.append(held_shares)
            shares_traded[r] = info["shares_traded"].to(torch.float64)
            turnover[r] = info["traded_notional"].to(torch.float64) / prev_value
            mark_bars = torch.arange(r + 1, end + 1, device=device) * interval
            close = market.close.index_select(0, mark_bars).to(torch.float64)  # (L, A)
            held = close.unsqueeze(1) * held_shares.unsqueeze(0)  # (L, N, A)
            seg_equity = cash.unsqueeze(0) + held.sum(dim=-1)  # (L, N)
            seg_equity[0] = info["value"].to(torch.float64)  # the env's own mark
            equity[r:end] = seg_equity
            weights[r:end] = held / seg_equity.unsqueeze(-1).clamp(min=1e-12)
        fills = trade_accounting(market, params, shares_traded, k_steps)
        # Off-mark closes: the holdings of the last rebalance filled by then (fill bar r * interval + 1).
        off = np.asarray(off_bars, dtype=np.int64)
        seg = np.searchsorted(rows * interval + 1, off, side="right") - 1
        if len(off):
            cash_all = torch.stack(seg_cash)  # (R, N)
            shares_all = torch.stack(seg_shares)  # (R, N, A)
            idx = torch.as_tensor(np.clip(seg, 0, None), device=device)
            off_close = market.close.index_select(0, torch.as_tensor(off, device=device)).to(torch.float64)
            off_equity = cash_all[idx] + (shares_all[idx] * off_close.unsqueeze(1)).sum(dim=-1)
        else:
            off_equity = torch.zeros(0, n, dtype=torch.float64, device=device)
    return GroupRun(
        names=["equal_weight"] * n if n == 1 else [f"equal_weight#{i}" for i in range(n)],
        equity=equity.cpu(),
        weights=weights.to(torch.float32).cpu(),
        turnover=turnover.cpu(),
        terminated_at=[-1] * n,
        off_equity=off_equity.cpu(),
        **GroupRun.fill_fields(fills, shares_traded),
    )


def _weights_of(obs: Tensor, market: MarketData) -> Tensor:
    """Position weights ``(N, A)`` from observations (see ``envs.observation.split_obs``)."""
    return split_obs(obs, market.num_assets, market.num_features)[1][..., WEIGHT].clone()
