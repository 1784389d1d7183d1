"""The env step's arithmetic as pure functions of tensors: the fill and the mark (:func:`trade`), the
reward and the episode's end (:func:`step_core`), and the per-env generator (:func:`lcg_next`).

No market object and no state object here, only tensors and the frozen ``EnvParams`` (read by field
name): this is what :mod:`envs.fast_step` hands to ``torch.compile``, what the C kernel of
:mod:`envs.kernels.native` reproduces, and what :func:`envs.trading.step_env` and
:func:`envs.backtest_step.backtest_step` build on. The semantics are :mod:`envs.trading`'s docstring.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import torch
from torch import Tensor

from envs import execution
from envs import fees as fee_rules
from envs.params import EnvParams
from envs.tradability import EXIT, HOLD, TRADE

# Precision (the measurements: docs/benchmarks.md). Per-env accounting (cash, value, peak, notionals, the
# Sharpe moments; N) is always float64, and every per-asset sum feeding it accumulates in float64: a
# float32 portfolio value rounds a small return too coarsely. Per-asset tensors (prices, shares,
# orders; N x A) follow EnvParams.precision: "float32" (default) is faster (half the bytes per pass,
# no cast pass per price matrix; the observation is float32 either way) and matches the reference to
# 1e-4 relative with a $1-on-$1M floor, except the differential Sharpe reward, which amplifies the
# rounding of float32 holdings; "float64" matches everything to 1e-4 relative and suits backtests,
# where the batch is small.
ACC_DTYPE = torch.float64  # (N,) accounting

# Counter-based generator for autoreset starts (Knuth's MMIX LCG; int64 arithmetic wraps).
LCG_MUL = 6364136223846793005
LCG_INC = 1442695040888963407
# Below this a variance is treated as zero in the differential Sharpe ratio's denominator.
_SHARPE_VAR_EPS = 1e-12
_TINY = 1e-12


def lcg_next(key: Tensor) -> Tensor:
    """Each env's generator state advanced once."""
    return key * LCG_MUL + LCG_INC


def rowsum(x: Tensor) -> Tensor:
    """Row sums of a float32 ``(N, A)`` tensor, accumulated in float64."""
    return x.sum(1, dtype=ACC_DTYPE)


class Fill(NamedTuple):
    """What :func:`trade` computes."""

    traded: Tensor  # (N, A) shares traded (+ bought, - sold)
    shares: Tensor  # (N, A) holdings after the fill
    cash: Tensor  # (N,)
    traded_notional: Tensor  # (N,) at the fill prices
    pos_value: Tensor  # (N, A) holdings marked at the mark bar's close
    value: Tensor  # (N,) cash + the holdings' value
    fees: Tensor  # (N,) the broker's fees (commission and regulatory fees)
    order: Tensor  # (N, A) the impact memory after the fill (EnvState.order)


def trade(
    params: EnvParams,
    shares: Tensor,
    cash: Tensor,
    order: Tensor,
    action: Tensor,
    px_open: Tensor,
    px_close: Tensor,
    mode: Tensor | None = None,
    volume: Tensor | None = None,
    impact: Tensor | None = None,
    half: Tensor | None = None,
    fees: Tensor | None = None,
) -> Fill:
    """The fill and the mark of one step (the accounting shared by the env's step and the backtest
    step): a :class:`Fill`. ``order`` (N, A): the impact memory (``EnvState.order``), read and carried
    by the execution model only (returned as it is without it).
    ``px_open`` / ``px_close`` are the fill and mark
    bars' prices in its asset dtype; ``px_close`` must be a fresh tensor (it becomes ``pos_value`` in
    place). ``mode`` (N, A) uint8: the fill bar's :mod:`envs.tradability` modes (``None``: every
    asset tradable). ``volume`` (N, A): the fill bar's volume expected at the decision bar
    (``MarketData.expected_volume``'s decision-bar row) and ``impact`` (N, A): the decision bar's
    :func:`envs.execution.impact_table` row, both needed when ``params.execution``; ``half`` (N, A): its
    :func:`envs.execution.half_cost_table` row (``None``: the scalar half-spread of ``spread = "fixed"``);
    ``fees`` (N, 3): the fill bar's :func:`envs.fees.fee_table` row (``None``: one rate for all,
    ``EnvParams.sell_rates``)."""
    adt = params.asset_dtype
    if params.execution:
        if volume is None or impact is None:
            raise ValueError("the execution model needs the fill bar's volume and the impact scale")
        diff = _orders(params, shares, cash, action, px_open, mode)
        half = None if half is None else half.to(adt)
        volume, impact = volume.to(adt), impact.to(adt)
        return _execute(
            params, shares, cash, order, diff, px_open, px_close, mode, volume, impact, half, fees
        )
    slip = params.slippage_bps * 1e-4
    rate, per_share = params.buy_fee_rate, params.broker == "alpaca"
    # Orders in shares: buy, sell >= 0 and diff = buy - sell. The step is memory-bound (each
    # (N, A) pass streams the operands through the cache), so temporaries are reused in place
    # where that leaves the arithmetic unchanged.
    if params.action_mode == "weights":
        # Only sizes the targets, so a plain (float32) sum is precise enough here.
        held = shares * px_open  # (N, A) scratch: also holds the sells below
        value_open = cash + held.sum(1)
        # A new tensor: in-place below is safe. The cap comes before the sum rule, so the excess of
        # a capped weight stays in cash (it is not handed to the other assets).
        if params.max_weight < 1.0:
            weights = action.to(adt).clamp(min=0.0, max=params.max_weight)
        else:
            weights = action.to(adt).clamp(min=0.0)
        if mode is not None:  # untradable assets: no target (HOLD keeps the position, EXIT sells it)
            weights = weights.masked_fill_(mode != TRADE, 0.0)
        # float64 sum: a float32 one overflows for huge (finite) weights and would zero the targets.
        budget = value_open / weights.sum(1, dtype=ACC_DTYPE).clamp(min=1.0)
        if adt != ACC_DTYPE:  # (.to of the same dtype is a no-op that still costs a call)
            budget = budget.to(adt)
        # Share space (not $): a zero target gives diff = -shares exactly, so full sells leave 0.
        diff = weights.mul_(budget.unsqueeze(1)).div_(px_open).sub_(shares)
        if mode is not None:
            diff = diff.masked_fill_(mode == HOLD, 0.0)
        buy = diff.clamp(min=0.0)
        # sell = buy - diff is needed only for its notional: computed into the scratch buffer.
        sold = torch.sub(buy, diff, out=held)
        if per_share:
            sold = sold.clone()
        sell_at_open = held.mul_(px_open)
    else:
        diff = action.to(adt).clamp(-1.0, 1.0).mul_(params.max_shares).round_()
        if mode is not None:  # HOLD: no order; EXIT: sell everything held
            diff = torch.where(mode == TRADE, diff, torch.where(mode == EXIT, -shares, 0.0))
        buy = diff.clamp(min=0.0)
        if params.max_weight < 1.0:
            # Post-trade holdings at most floor(max_weight * value at the fill bar's open / open)
            # whole shares; a position already above the cap is not sold down (only buys are cut).
            value_open = cash + rowsum(shares * px_open)
            cap = (params.max_weight * value_open).to(adt).unsqueeze(1).div(px_open).floor_()
            buy = torch.minimum(buy, cap.sub_(shares).clamp_(min=0.0))
        sell = torch.minimum((-diff).clamp_(min=0.0), shares)
        sold = sell
        sell_at_open = sell * px_open
    sell_notional = rowsum(sell_at_open) * (1.0 - slip)
    buy_notional = rowsum(buy * px_open) * (1.0 + slip)
    # (per asset, in float64 as the C kernel has them, when each order's fees are rounded)
    proceeds = sell_at_open.to(ACC_DTYPE).mul_(1.0 - slip) if params.rounds_fees else sell_at_open
    sell_fees = fee_rules.sell_fees(params, proceeds, sold, fees, sell_notional)
    available = cash + sell_notional - sell_fees
    needed = buy_notional * (1.0 + rate)
    # Buys scaled by one factor per env so cash never goes negative.
    scale = torch.where(needed > available, available / needed.clamp(min=_TINY), 1.0)
    if params.action_mode == "weights":
        # diff + buy * (scale - 1) = scale * buy - sell; exact when scale == 1. diff is a temporary.
        factor = scale - 1.0
        traded = diff.addcmul_(buy, (factor if adt == ACC_DTYPE else factor.to(adt)).unsqueeze(1))
        buy_notional = buy_notional * scale
        needed = needed * scale
    else:
        buy = buy.mul_(scale.to(adt)[:, None]).floor_()
        buy_notional = rowsum(buy * px_open) * (1.0 + slip)
        needed = buy_notional * (1.0 + rate)
        traded = buy - sell
    new_shares = shares + traded
    # The clamp only absorbs rounding (needed <= available by construction).
    new_cash = (available - needed).clamp_(min=0.0)
    traded_notional = sell_notional + buy_notional
    pos_value = px_close.mul_(new_shares)
    new_value = new_cash + rowsum(pos_value)
    fees = buy_notional * rate + sell_fees
    return Fill(traded, new_shares, new_cash, traded_notional, pos_value, new_value, fees, order)


def _orders(
    params: EnvParams, shares: Tensor, cash: Tensor, action: Tensor, px_open: Tensor, mode: Tensor | None
) -> Tensor:
    """The orders ``(N, A)`` in shares the action asks for (+ buy, - sell) before execution: the same
    sizing as the frictionless fill of :func:`trade` (targets of the value at the open, the weight
    cap, the fill modes; in ``"shares"`` mode sells limited to holdings and buys to the cap)."""
    adt = params.asset_dtype
    if params.action_mode == "weights":
        value_open = cash + shares.mul(px_open).sum(1)
        if params.max_weight < 1.0:
            weights = action.to(adt).clamp(min=0.0, max=params.max_weight)
        else:
            weights = action.to(adt).clamp(min=0.0)
        if mode is not None:
            weights = weights.masked_fill_(mode != TRADE, 0.0)
        budget = value_open / weights.sum(1, dtype=ACC_DTYPE).clamp(min=1.0)
        if adt != ACC_DTYPE:
            budget = budget.to(adt)
        diff = weights.mul_(budget.unsqueeze(1)).div_(px_open).sub_(shares)
        if mode is not None:
            diff = diff.masked_fill_(mode == HOLD, 0.0)
        return diff
    diff = action.to(adt).clamp(-1.0, 1.0).mul_(params.max_shares).round_()
    if mode is not None:
        diff = torch.where(mode == TRADE, diff, torch.where(mode == EXIT, -shares, 0.0))
    buy = diff.clamp(min=0.0)
    if params.max_weight < 1.0:
        value_open = cash + rowsum(shares * px_open)
        cap = (params.max_weight * value_open).to(adt).unsqueeze(1).div(px_open).floor_()
        buy = torch.minimum(buy, cap.sub_(shares).clamp_(min=0.0))
    return buy - torch.minimum((-diff).clamp_(min=0.0), shares)


def _execute(
    params: EnvParams,
    shares: Tensor,
    cash: Tensor,
    order: Tensor,
    diff: Tensor,
    px_open: Tensor,
    px_close: Tensor,
    mode: Tensor | None,
    volume: Tensor,
    impact: Tensor,
    half: Tensor | None,
    fees: Tensor | None = None,
) -> Fill:
    """:func:`trade` through the execution model (docs/env.md "Execution"; the price rule:
    :mod:`envs.execution`). In order: each order is capped at ``max_participation`` of the fill bar's
    volume expected at the decision bar (whole shares in ``"shares"`` mode; an EXIT, the sale of a delisted asset, is not capped);
    sells whose proceeds ``q * open * (1 - frac(q))`` are under ``min_order_notional`` are dropped, the
    rest fill at ``open * (1 - frac(q))`` and fund
    the buys; the buys, priced at their capped size, are scaled by one factor per env when cash is
    short (floored to whole shares in ``"shares"`` mode); scaled buys under ``min_order_notional`` are
    dropped and the rest fill at ``open * (1 + frac(q))`` of their final size (at most the price the
    scale assumed, so cash stays >= 0)."""
    rate = params.buy_fee_rate
    whole = params.action_mode == "shares"
    if params.max_participation > 0:
        limit = volume.mul(params.max_participation)
        if whole:
            limit = limit.floor_()
        capped = torch.minimum(torch.maximum(diff, -limit), limit)
        diff = capped if mode is None else torch.where(mode == EXIT, diff, capped)
    buy0 = diff.clamp(min=0.0)
    sell = (-diff).clamp_(min=0.0)
    min_notional = params.min_order_notional
    # The order worked so far, decayed to this decision, on the side of this decision's order.
    remembered = order * params.impact_memory
    carried = execution.carried_order(remembered, diff)
    # One of buy0 and sell is 0 per asset: one frac prices both (a dropped sell's frac is unused).
    frac = execution.fill_frac(params, buy0 + sell, impact, carried, half)
    if min_notional > 0:  # a sell's proceeds at its fill price (a buy's fill price is above the open)
        dust = sell * px_open * (1.0 - frac) < min_notional
        if mode is not None:
            dust &= mode != EXIT
        # (a multiply by the kept mask: the same values as masked_fill_, which measured ~4x slower on
        # CPU; docs/benchmarks.md)
        sell = sell.mul_(~dust)
    proceeds = sell * px_open * (1.0 - frac)
    sell_notional = rowsum(proceeds)
    sell_fees = fee_rules.sell_fees(params, proceeds, sell, fees, sell_notional)
    available = cash + sell_notional - sell_fees
    needed0 = rowsum(buy0 * px_open * (1.0 + frac)) * (1.0 + rate)
    scale = torch.where(needed0 > available, available / needed0.clamp(min=_TINY), 1.0)
    buy = buy0.mul_(scale.to(buy0.dtype).unsqueeze(1))
    if whole:
        buy = buy.floor_()
    if min_notional > 0:
        buy = buy.mul_(~(buy * px_open < min_notional))
    buy_notional = rowsum(buy * px_open * (1.0 + execution.fill_frac(params, buy, impact, carried, half)))
    needed = buy_notional * (1.0 + rate)
    traded = buy - sell
    new_shares = shares + traded
    new_cash = (available - needed).clamp_(min=0.0)
    pos_value = px_close.mul_(new_shares)
    new_value = new_cash + rowsum(pos_value)
    fees = buy_notional * rate + sell_fees
    new_order = execution.worked_order(remembered, traded)
    return Fill(
        traded, new_shares, new_cash, sell_notional + buy_notional, pos_value, new_value, fees, new_order
    )


def _cap_cut(params: EnvParams, diff: Tensor, volume: Tensor, mode: Tensor | None) -> Tensor:
    """The part of the orders ``diff`` the volume cap cuts (0 for an EXIT, which is not capped)."""
    limit = volume.mul(params.max_participation)
    if params.action_mode == "shares":
        limit = limit.floor_()
    cut = diff - torch.minimum(torch.maximum(diff, -limit), limit)
    return cut if mode is None else cut.masked_fill_(mode == EXIT, 0.0)


@functools.lru_cache(maxsize=16)
def _within_interval(params: EnvParams) -> EnvParams:
    """``params`` for the fills between two decisions: the worked order is not decayed bar by bar
    (its decay is per decision, ``EnvParams.impact_memory``)."""
    return dataclasses.replace(params, impact_decay=0.0)


def work_remainder(
    params: EnvParams,
    t: Tensor,
    fill: Fill,
    remainder: Tensor,
    open_all: Tensor,
    close_all: Tensor,
    modes_all: Tensor | None,
    volume_all: Tensor,
    impact_all: Tensor,
    half_all: Tensor | None,
    fees_all: Tensor | None = None,
) -> Fill:
    """``[env] unfilled = "work"``: ``remainder`` (N, A), the signed shares the volume cap cut from
    the orders filled at bar ``t + 1`` (``fill``), keeps working on bars ``t + 2 .. t + k``. At each
    bar ``b`` it goes through the execution model as an order sent at ``b - 1`` (``envs.core._execute``:
    capped at ``max_participation`` of bar ``b``'s volume expected at ``b - 1``, priced at ``b``'s
    open with ``b - 1``'s impact scale and half-spread, on top of the order worked so far, sells
    first, buys within the cash, no piece under ``min_order_notional``); what fills leaves the
    remainder, an untradable bar fills nothing. The next decision replaces what is left. The fill
    (traded shares, notional, fees summed; cash, holdings, value and impact memory as after the last
    bar) marked at bar ``t + k``'s close. ``fees_all``: :func:`envs.fees.fee_table` (``None``: one
    rate for all); each bar's fills pay the fees of its session, each a separate order."""
    adt = params.asset_dtype
    inner = _within_interval(params)
    traded, shares, cash, notional = fill.traded, fill.shares, fill.cash, fill.traded_notional
    pos_value, value, fees, order = fill.pos_value, fill.value, fill.fees, fill.order
    t_mark = t + params.decision_interval
    for j in range(2, params.decision_interval + 1):
        bar, row = t + j, t + j - 1
        mode = None if modes_all is None else modes_all.index_select(0, bar)
        diff = remainder if mode is None else remainder.masked_fill(mode != TRADE, 0.0)
        half = None if half_all is None else half_all.index_select(0, row).to(adt)
        step = _execute(
            inner, shares, cash, order, diff, open_all.index_select(0, bar).to(adt),
            close_all.index_select(0, t_mark).to(adt), None, volume_all.index_select(0, row).to(adt),
            impact_all.index_select(0, row).to(adt), half,
            None if fees_all is None else fees_all.index_select(0, bar),
        )  # fmt: skip
        remainder = remainder - step.traded
        traded, shares, cash, order = traded + step.traded, step.shares, step.cash, step.order
        notional, fees = notional + step.traded_notional, fees + step.fees
        pos_value, value = step.pos_value, step.value
    return Fill(traded, shares, cash, notional, pos_value, value, fees, order)


def work_unfilled(
    params: EnvParams,
    t: Tensor,
    fill: Fill,
    shares: Tensor,
    cash: Tensor,
    action: Tensor,
    px_open: Tensor,
    mode: Tensor | None,
    volume: Tensor | None,
    open_all: Tensor,
    close_all: Tensor,
    modes_all: Tensor | None,
    volume_all: Tensor | None,
    impact_all: Tensor | None,
    half_all: Tensor | None,
    fees_all: Tensor | None = None,
) -> Fill:
    """``fill`` (:func:`trade` of ``action`` on ``shares`` / ``cash`` at the fill bar's ``px_open``,
    fill modes ``mode`` and expected ``volume``) with ``[env] unfilled = "work"``: the part of the
    orders the volume cap cut keeps working until the next decision (:func:`work_remainder`). ``fill``
    as it is with ``"drop"``, without the execution model (``volume`` ``None``) or without a cap.
    The env's step and the backtest step both call it, so their fills agree."""
    if params.unfilled != "work" or volume is None or volume_all is None or impact_all is None:
        return fill
    if params.max_participation <= 0:
        return fill
    requested = _orders(params, shares, cash, action, px_open, mode)
    remainder = _cap_cut(params, requested, volume.to(params.asset_dtype), mode)
    return work_remainder(
        params, t, fill, remainder, open_all, close_all, modes_all, volume_all, impact_all, half_all, fees_all
    )


class StepCore(NamedTuple):
    """What :func:`step_core` computes (pre-reset; the first ten are the next ``EnvState``'s fields,
    named alike). ``envs.kernels.native.NativeStep`` has the same fields up to ``traded``."""

    t: Tensor  # (N,) the mark bar t + k: the next decision bar
    cash: Tensor
    shares: Tensor
    value: Tensor
    peak: Tensor
    step_count: Tensor
    sharpe_a: Tensor
    sharpe_b: Tensor
    rng: Tensor  # advanced once
    order: Tensor  # (N, A) the impact memory
    reward: Tensor  # (N,) float32
    terminated: Tensor  # (N,) bool
    truncated: Tensor  # (N,) bool
    done: Tensor  # (N,) bool: terminated | truncated
    cost: Tensor
    traded_notional: Tensor
    traded: Tensor  # (N, A) shares traded (+ bought, - sold)
    pos_value: Tensor  # (N, A) holdings marked at the mark bar's close
    fill_price: Tensor | None = None  # (N, A), with EnvParams.trade_info only
    asset_cost: Tensor | None = None  # (N, A), with EnvParams.trade_info only


def step_core(
    params: EnvParams,
    last_bar: int,
    t: Tensor,
    cash: Tensor,
    shares: Tensor,
    value: Tensor,
    peak: Tensor,
    step_count: Tensor,
    sharpe_a: Tensor,
    sharpe_b: Tensor,
    rng: Tensor,
    order: Tensor,
    action: Tensor,
    open_all: Tensor,
    close_all: Tensor,
    modes_all: Tensor | None = None,
    volume_all: Tensor | None = None,
    impact_all: Tensor | None = None,
    half_all: Tensor | None = None,
    fees_all: Tensor | None = None,
) -> StepCore:
    """The rules' step but the action check, the observation and the autoreset, as one pure function
    of tensors, so that it can be compiled. ``last_bar`` is the market's last decision bar, ``open_all`` / ``close_all`` ``(T, A)`` its prices
    and ``modes_all`` its fill modes (``None``: every bar tradable); ``volume_all`` / ``impact_all``
    ``(T, A)``: its ``expected_volume`` and :func:`envs.execution.impact_table`, ``half_all`` its
    :func:`envs.execution.half_cost_table` (``None``: the fixed half-spread), all read at the decision
    bar (with ``params.execution``); ``fees_all`` ``(T, 3)``: :func:`envs.fees.fee_table`, read at the
    fill bar (``None``: one rate for all, ``EnvParams.sell_rates``)."""
    k = params.decision_interval
    t_mark = t + k
    adt = params.asset_dtype  # .to(adt) is a no-op for float32 market data and "float32"
    px_open = open_all.index_select(0, t + 1).to(adt)  # (N, A) fill bar
    # A fresh tensor either way (gather, or gather + cast): becomes the positions' value in place.
    px_close = close_all.index_select(0, t_mark).to(adt)  # (N, A) mark bar
    mode = None if modes_all is None else modes_all.index_select(0, t + 1)
    volume = impact = half = None
    if params.execution and volume_all is not None and impact_all is not None:
        volume, impact = volume_all.index_select(0, t), impact_all.index_select(0, t)
        half = None if half_all is None else half_all.index_select(0, t)
    fees = None if fees_all is None else fees_all.index_select(0, t + 1)
    fill = trade(params, shares, cash, order, action, px_open, px_close, mode, volume, impact, half, fees)
    fill = work_unfilled(
        params, t, fill, shares, cash, action, px_open, mode, volume, open_all, close_all, modes_all,
        volume_all, impact_all, half_all, fees_all,
    )  # fmt: skip
    traded, new_shares, new_cash, traded_notional, pos_value, new_value, cost, new_order = fill

    # Reward.
    ratio = new_value / value
    if params.reward == "log_return":
        reward = torch.log(ratio.clamp(min=_TINY))
        new_a, new_b = sharpe_a, sharpe_b
    elif params.reward == "return":
        reward = ratio - 1.0
        new_a, new_b = sharpe_a, sharpe_b
    else:
        ret = ratio - 1.0
        a, b = sharpe_a, sharpe_b
        d_a = ret - a
        d_b = ret * ret - b
        var = (b - a * a).clamp(min=_SHARPE_VAR_EPS)
        reward = (b * d_a - 0.5 * a * d_b) / (var * var.sqrt())
        new_a = a + params.sharpe_eta * d_a
        new_b = b + params.sharpe_eta * d_b
    new_peak = torch.maximum(peak, new_value)
    if params.drawdown_penalty > 0:
        reward = reward - params.drawdown_penalty * (1.0 - new_value / new_peak)
    if params.turnover_penalty > 0:
        reward = reward - params.turnover_penalty * traded_notional / value
    if params.reward_scale != 1.0:
        reward = reward * params.reward_scale
    reward = reward.to(torch.float32)

    step_count = step_count + 1
    terminated = new_value < params.bust_frac * params.initial_cash
    out_of_data = t_mark > last_bar
    done = (step_count >= params.episode_len) | out_of_data | terminated
    truncated = done ^ terminated  # done and not terminated: terminated wins
    fill_price = asset_cost = None
    if params.trade_info:
        if impact is None:
            impact = torch.zeros_like(px_open)
        carried = execution.carried_order(order * params.impact_memory, traded)
        fill_price = execution.fill_price(params, px_open, traded, impact, carried, half)  # per-asset dtype
        asset_cost = execution.asset_fees(params, traded, fill_price, fees)
    return StepCore(
        t_mark, new_cash, new_shares, new_value, new_peak, step_count, new_a, new_b, lcg_next(rng), new_order,
        reward, terminated, truncated, done, cost, traded_notional, traded, pos_value, fill_price, asset_cost,
    )  # fmt: skip
