"""The env step for backtests: :func:`backtest_step`, the same fill, mark, observation and restarts as
``envs.trading.step`` without the reward and its state.

A backtest scores a policy on the equity curve, so it needs no reward, no Sharpe moments and no
episode truncation; leaving them out makes its many small steps cheaper. The accounting is the one
function both steps share (:func:`envs.core.trade`), so the two agree bit for bit
(``tests/test_env_backtest_step.py``). :mod:`envs.backtest_loop` compiles :func:`backtest_core` in
blocks of decisions.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from data.market import MarketData
from envs.core import lcg_next, trade, work_unfilled
from envs.execution import execution_tables
from envs.fees import fee_table
from envs.observation import build_obs
from envs.tradability import fill_modes
from envs.trading import EnvParams, EnvState, last_decision_bar, restart


def asset_prices(market: MarketData, params: EnvParams) -> tuple[Tensor, Tensor]:
    """``(open, close)`` ``(T, A)`` in ``params``'s asset dtype, for :func:`backtest_step` (cast
    once per run instead of one cast per price row and step; no copy when the dtypes agree)."""
    adt = params.asset_dtype
    return market.open.to(adt), market.close.to(adt)


class BacktestCore(NamedTuple):
    """What :func:`backtest_core` computes (pre-reset), named as in :class:`envs.core.StepCore`."""

    t: Tensor  # (N,) the mark bar
    cash: Tensor
    shares: Tensor
    value: Tensor
    traded_notional: Tensor
    traded: Tensor
    pos_value: Tensor
    terminated: Tensor
    done: Tensor  # terminated, or out of data
    order: Tensor  # (N, A) the impact memory after the fill


class BacktestStepResult(NamedTuple):
    """What :func:`backtest_step` returns."""

    state: EnvState
    obs: Tensor
    terminated: Tensor
    value: Tensor
    traded_notional: Tensor
    shares_traded: Tensor


def backtest_core(
    params: EnvParams,
    last_bar: int,
    t: Tensor,
    cash: Tensor,
    shares: Tensor,
    order: Tensor,
    action: Tensor,
    open_all: Tensor,
    close_all: Tensor,
    modes_all: Tensor | None = None,
    volume_all: Tensor | None = None,
    impact_all: Tensor | None = None,
    half_all: Tensor | None = None,
    fees_all: Tensor | None = None,
) -> BacktestCore:
    """The fill, mark and termination of :func:`backtest_step` as a pure function of tensors
    (``volume_all`` / ``impact_all`` / ``half_all``: as in :func:`envs.core.step_core`; with
    ``[env] unfilled = "work"`` the part the volume cap cut keeps working as in the env's step,
    :func:`envs.core.work_unfilled`; ``fees_all``: :func:`envs.fees.fee_table`, read at the fill bar)."""
    t_fill = t + 1
    t_mark = t_fill if params.decision_interval == 1 else t + params.decision_interval
    # index_select always gathers into a fresh tensor, as trade needs for the mark prices.
    mode = None if modes_all is None else modes_all.index_select(0, t_fill)
    px_open = open_all.index_select(0, t_fill)
    volume = None if volume_all is None else volume_all.index_select(0, t)
    fill = trade(
        params,
        shares,
        cash,
        order,
        action,
        px_open,
        close_all.index_select(0, t_mark),
        mode,
        volume,
        None if impact_all is None else impact_all.index_select(0, t),
        None if half_all is None else half_all.index_select(0, t),
        None if fees_all is None else fees_all.index_select(0, t_fill),
    )
    fill = work_unfilled(
        params, t, fill, shares, cash, action, px_open, mode, volume, open_all, close_all, modes_all,
        volume_all, impact_all, half_all, fees_all,
    )  # fmt: skip
    terminated = fill.value < params.bust_frac * params.initial_cash
    # A restarted env can run out of data before the run ends: truncated (and restarted) as in step.
    done = terminated | (t_mark > last_bar)
    return BacktestCore(
        t_mark,
        fill.cash,
        fill.shares,
        fill.value,
        fill.traded_notional,
        fill.traded,
        fill.pos_value,
        terminated,
        done,
        fill.order,
    )


def backtest_step(
    market: MarketData,
    params: EnvParams,
    state: EnvState,
    action: Tensor,
    prices: tuple[Tensor, Tensor],
) -> BacktestStepResult:
    """``envs.trading.step`` for backtests, with only what a backtest uses: the same fill and mark
    (the same accounting function), observation and termination, without the reward and its state.

    Returns a :class:`BacktestStepResult` ``(state, obs, terminated, value, traded_notional,
    shares_traded)``, bitwise equal to
    ``step``'s ``state.t/cash/shares/value``, ``obs``, ``terminated`` and ``info["value"]``,
    ``info["traded_notional"]``, ``info["shares_traded"]`` as long as no episode reaches
    ``episode_len`` (the caller sets it beyond the run). Terminated envs, and envs whose next
    decision would need bars past the data, restart as in ``step`` (same generator draws).
    Differences: ``peak``, ``step_count`` and the Sharpe moments are left as they were (they only
    feed the reward and the ``episode_len`` truncation), the action is not validated (pass a
    checked ``(N, A)`` float tensor), and ``prices`` is :func:`asset_prices` of ``market`` and
    ``params``.
    """
    core = backtest_core(
        params,
        last_decision_bar(market.num_steps, params),
        state.t,
        state.cash,
        state.shares,
        state.order,
        action,
        *prices,
        None if market.all_tradable else fill_modes(market),
        *execution_tables(market, params),
        fees_all=fee_table(market, params),
    )
    obs = build_obs(market, core.t, core.cash, core.pos_value, core.value)
    new_state = _advance(state, core.t, core.cash, core.shares, core.value, core.order)
    if bool(core.done.any()):
        new_state, obs = restart(market, params, new_state, core.done, obs.clone())
    return BacktestStepResult(new_state, obs, core.terminated, core.value, core.traded_notional, core.traded)


def _advance(
    state: EnvState, t: Tensor, cash: Tensor, shares: Tensor, value: Tensor, order: Tensor
) -> EnvState:
    """``state`` after a backtest step: new bar and accounting, the generator advanced, the
    reward-only fields kept."""
    return EnvState(
        t=t,
        cash=cash,
        shares=shares,
        value=value,
        peak=state.peak,
        step_count=state.step_count,
        sharpe_a=state.sharpe_a,
        sharpe_b=state.sharpe_b,
        rng=lcg_next(state.rng),
        order=order,
    )
