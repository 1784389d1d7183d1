"""The baselines a backtest compares policies with: an investor's plain alternatives, costs on.

Each runs through the training env's own ``step`` from the window's first bar, under the run's own
execution rules (:func:`investor`: the same fees, slippage, spread, volume cap and impact as the
policies; only the agent's position limit ``max_weight`` is lifted), as one group of
``run_backtest``'s columns:

- ``"buy_and_hold"``: equal weight of the assets tradable at the decision bar, bought and then held
  (no rebalancing). The buy is the env's ``"weights"`` fill (fractional shares at the next bar's open,
  slippage and costs); the volume cap (``max_participation`` of the fill bar's expected volume) may cut
  it, so the same order is sent again at each decision until the book is **built** (at most
  :data:`BUILT_CASH` of its value left in cash after a fill: one decision for an account the cap does
  not bind, several for a large one); from then on the shares are held: the marks
  ``cash + shares @ close`` are computed for every holding decision at once instead of one env step
  with a zero ``"shares"`` order each (a test checks the two agree);
- ``"index"``: buy-and-hold of an index ETF (the first of :data:`INDEX_TICKERS` in the universe; skipped
  when there is none), the same way; its column is named ``index_<TICKER>``;
- ``"equal_weight"``: equal weights over the tradable assets, rebalanced with the first fill of every
  session (the first decision whose fill bar, ``t + 1``, lies in a new session: at that session's open
  when the decision grid lines up with the sessions, as with 390 one-minute bars and
  ``decision_interval`` 15) and, like buy-and-hold, at every decision while its book is not built,
  held in between (no trade), costs on;
- ``"cash"``: never trades;
- ``"linear"``: the linear baseline of ``backtests.linear`` (a ridge on the policy's features, fitted on
  the train window, its top quintile held equal weight, rebalanced at every decision), run only when
  ``run_backtest`` is handed the fitted model (``linear=``), like ``"index"`` without an index ETF;
- ``"boosted"``: the boosted ranker of ``backtests.boosted`` (gradient-boosted trees on the same
  features, targets and windows, traded the same way), run only when handed (``boosted=``).

Every fill a baseline makes is at most ``max_participation`` of the fill bar's volume expected at the
decision bar, as the policies' (``tests/test_baselines_capped.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from backtests.accounting import GroupRun, trade_accounting
from data.market import MarketData
from envs import trading
from envs.trading import EnvParams

#: Index ETFs used for the ``"index"`` baseline, in order of preference.
INDEX_TICKERS: tuple[str, ...] = ("QQQ", "SPY")
#: Every baseline name ``run_backtest`` understands.
BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "index", "cash", "linear", "boosted")
DEFAULT_BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "cash", "index", "linear", "boosted")
#: The baselines that score the assets with a model fitted on the run's train window and hold the top
#: quintile (``backtests.linear``, ``backtests.boosted``), each handed to ``run_backtest`` by name.
RANKERS: tuple[str, ...] = ("linear", "boosted")
#: A baseline's book is built once at most this share of its value (beyond the cash its target
#: keeps) is cash after a fill: until then it repeats its order at every decision, because the
#: volume cap may cut a buy from cash (docs/backtests.md "Baselines under the volume cap").
BUILT_CASH = 0.01


def investor(params: EnvParams) -> EnvParams:
    """The env of the baselines: the run's own execution rules (the broker's fees, slippage, the
    half-spread, the volume cap ``max_participation``, square-root impact, the minimum order), so a
    baseline trades like for like with the policies; only the agent's position limit ``max_weight`` is
    lifted (a 0.1 cap would turn the index baseline into 90% cash)."""
    return dataclasses.replace(params, max_weight=1.0)


def is_baseline(name: str) -> bool:
    """Whether ``name`` is a baseline's column of a backtest (``index_<TICKER>`` included)."""
    return name in BASELINES or name.startswith("index_")


def static_weights(market: MarketData, baselines: Sequence[str]) -> list[tuple[str, Tensor]]:
    """``(name, target weights (A,))`` of every baseline that builds its book and then holds."""
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
    """Build the target book, then hold its shares to the end (see :func:`_run_book`).

    Each row orders its target weights (restricted to the assets tradable at the decision bar) at
    the first decision and again at every decision until its book is built, then holds: the marks
    ``cash + shares @ close`` are computed for all holding decisions at once (``through_env=True``
    steps the env with zero ``"shares"`` orders instead; the tests check both agree). ``capital``
    (N,): each row's starting cash instead of ``params.initial_cash``.
    """
    params = investor(params)
    orders = np.zeros(k_steps, dtype=bool)
    orders[0] = True
    books = [
        _run_book(market, params, w, orders, k_steps, seed, off_bars, _row_capital(capital, i), through_env)
        for i, (_, w) in enumerate(static)
    ]
    return _group([s[0] for s in static], books, market, params, k_steps)


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
    """Equal weights ordered at each rebalance row (:func:`rebalance_rows`) and at every decision
    while the book is not built (see :func:`_run_book`), held in between. ``capital`` (N,): one row
    per starting cash (default: one row at ``params.initial_cash``)."""
    params = investor(params)
    orders = np.zeros(k_steps, dtype=bool)
    orders[rebalance_rows(market, int(params.decision_interval), k_steps)] = True
    n = 1 if capital is None else int(capital.shape[0])
    weights = torch.full((market.num_assets,), 1.0 / market.num_assets)
    books = [
        _run_book(market, params, weights, orders, k_steps, seed, off_bars, _row_capital(capital, i))
        for i in range(n)
    ]
    names = ["equal_weight"] if n == 1 else [f"equal_weight#{i}" for i in range(n)]
    return _group(names, books, market, params, k_steps)


def _row_capital(capital: Tensor | None, row: int) -> Tensor | None:
    return None if capital is None else capital[row : row + 1]


@dataclass
class _Book:
    """One account of a baseline over the window: per decision its equity ``(K,)``, weights at the
    mark ``(K, A)``, shares traded ``(K, A)`` and turnover ``(K,)``; ``off_equity (O,)`` its value
    at the off-mark closes."""

    equity: Tensor
    weights: Tensor
    shares: Tensor
    turnover: Tensor
    off_equity: Tensor


def tradable_targets(market: MarketData, weights: Tensor, bar: int) -> Tensor:
    """``weights (A,)`` restricted to the assets tradable at ``bar`` and rescaled to their sum (the
    book a baseline orders there; unchanged when none of its assets trades)."""
    live = market.tradable[bar].to(device=weights.device, dtype=weights.dtype)
    masked = weights * live
    got = masked.sum()
    return masked * (weights.sum() / got) if float(got) > 0 else weights


def _run_book(
    market: MarketData,
    params: EnvParams,
    weights: Tensor,
    orders: np.ndarray,
    k_steps: int,
    seed: int,
    off_bars: np.ndarray | None,
    capital: Tensor | None,
    through_env: bool = False,
) -> _Book:
    """One baseline account: the env's ``"weights"`` fill of ``weights (A,)`` (restricted to the
    tradable assets, :func:`tradable_targets`) at each decision where ``orders (K,)`` is set and at
    every decision while the book is not built: its cash after the fill is more than the target's
    cash share plus :data:`BUILT_CASH` of its value (the volume cap cut a buy). Between orders it
    holds (no trade): the marks ``cash + shares @ close`` of a stretch are computed at once, and the
    env state is moved to the next ordering decision's bar (time, value marked at its close, impact
    memory decayed by the decisions skipped, as zero orders would decay it). ``through_env``: step
    the env with zero ``"shares"`` orders on the holding decisions instead."""
    device = market.device
    interval = int(params.decision_interval)
    buy = dataclasses.replace(params, action_mode="weights")
    hold = dataclasses.replace(params, action_mode="shares")
    memory = params.impact_memory if params.execution else 0.0
    target_w = weights.to(device=device, dtype=torch.float32)
    shares = torch.zeros(k_steps, market.num_assets, dtype=torch.float64, device=device)
    turnover = torch.zeros(k_steps, dtype=torch.float64, device=device)
    env_marks = torch.zeros(k_steps, dtype=torch.float64, device=device)
    rows, cash, held = [], [], []
    built, last = False, -1
    zero = torch.zeros(1, market.num_assets, device=device)
    with torch.inference_mode():
        state, _ = trading.reset(market, buy, 1, torch.Generator().manual_seed(seed), start=0)
        state = _with_capital(state, capital)
        for k in range(k_steps):
            if built and not orders[k]:
                if through_env:
                    state, _, _, _, _, info = trading.step(market, hold, state, zero)
                    env_marks[k] = info["value"][0].to(torch.float64)
                    last = k
                continue
            if last < k - 1:
                state = _moved(market, state, k * interval, memory ** (k - 1 - last))
            before = state.value.to(torch.float64)[0]
            target = tradable_targets(market, target_w, k * interval)
            state, _, _, _, _, info = trading.step(market, buy, state, target.unsqueeze(0))
            value = info["value"][0].to(torch.float64)
            env_marks[k], shares[k] = value, info["shares_traded"][0].to(torch.float64)
            turnover[k] = info["traded_notional"][0].to(torch.float64) / before
            built = float(state.cash[0]) <= (1.0 - float(target.sum()) + BUILT_CASH) * float(value)
            rows.append(k)
            cash.append(state.cash[0].to(torch.float64))
            held.append(state.shares[0].to(torch.float64))
            last = k
        equity, held_value, off_equity = _marks(market, interval, k_steps, rows, cash, held, off_bars)
        if through_env:
            equity = env_marks
        else:
            equity[torch.as_tensor(rows, device=device)] = env_marks[rows]  # the env's own marks
        w = held_value / equity.unsqueeze(-1).clamp(min=1e-12)
    return _Book(equity, w, shares, turnover, off_equity)


def _moved(market: MarketData, state: trading.EnvState, bar: int, decay: float) -> trading.EnvState:
    """``state`` moved to decision ``bar`` without a trade: its value marked at the bar's close and its
    impact memory decayed by ``decay``."""
    close = market.close[bar].to(torch.float64)
    value = state.cash.to(torch.float64) + (state.shares.to(torch.float64) * close).sum(-1)
    return dataclasses.replace(
        state, t=torch.full_like(state.t, bar), value=value.to(state.value.dtype), order=state.order * decay
    )


def _marks(
    market: MarketData,
    interval: int,
    k_steps: int,
    rows: list[int],
    cash: list[Tensor],
    held: list[Tensor],
    off_bars: np.ndarray | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Equity ``(K,)`` and the positions' values ``(K, A)`` at every mark, and the off-mark values
    ``(O,)``, of the holdings after each ordering decision ``rows`` (cash and shares held until the
    next)."""
    device = market.device
    order_rows = np.asarray(rows, dtype=np.int64)
    seg = torch.as_tensor(np.searchsorted(order_rows, np.arange(k_steps), side="right") - 1, device=device)
    cash_all, held_all = torch.stack(cash), torch.stack(held)  # (S,), (S, A)
    mark_bars = torch.arange(1, k_steps + 1, device=device) * interval
    value = market.close.index_select(0, mark_bars).to(torch.float64) * held_all[seg]  # (K, A)
    equity = cash_all[seg] + value.sum(dim=-1)
    off = np.asarray(off_bars if off_bars is not None else np.zeros(0, np.int64), dtype=np.int64)
    # Off-mark closes: the holdings of the last order filled by then (fill bar row * interval + 1).
    off_seg = np.clip(np.searchsorted(order_rows * interval + 1, off, side="right") - 1, 0, None)
    idx = torch.as_tensor(off_seg, device=device)
    off_close = market.close.index_select(0, torch.as_tensor(off, device=device)).to(torch.float64)
    off_equity = cash_all[idx] + (held_all[idx] * off_close).sum(dim=-1)
    return equity, value, off_equity


def _group(
    names: list[str], books: list[_Book], market: MarketData, params: EnvParams, k_steps: int
) -> GroupRun:
    """The books as one group of columns, their fills accounted as every group's."""
    stack = lambda key: torch.stack([getattr(b, key) for b in books], dim=1)  # noqa: E731
    shares = stack("shares")  # (K, N, A)
    fills = trade_accounting(market, params, shares, k_steps)
    return GroupRun(
        names=names,
        equity=stack("equity").cpu(),
        weights=stack("weights").to(torch.float32).cpu(),
        turnover=stack("turnover").cpu(),
        terminated_at=[-1] * len(names),
        off_equity=stack("off_equity").cpu(),
        **GroupRun.fill_fields(fills, shares),
    )
