"""A policy's backtest decisions compiled in blocks: ``policy(obs)`` then :func:`backtest_step`,
``BLOCK`` decisions per compiled call.

Why (the measurements: docs/benchmarks.md): a one-env decision is dozens of tiny tensor ops, and
eagerly each costs a dispatch. ``torch.compile`` fuses them into a few C++ loops, but a compiled call
still has a fixed cost (guards, the generated wrapper, its buffers); compiling ``BLOCK`` consecutive
decisions as one graph spreads that cost over the block, while the compile time grows with the
block. Four is the trade-off between the two.

Semantics are :func:`backtest_step`'s: a block is only kept when none of its decisions ends an
episode (terminated, or out of data); otherwise it is replayed eagerly from its start, one decision
at a time, with the env's restart. The decisions that do not fill a block, at the end, run eagerly
too. Results equal the eager loop's up to float rounding (the compiled loops sum in another order;
``tests/test_compiled.py`` bounds the difference).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor

from data.market import MarketData
from envs.backtest_step import backtest_core, backtest_step, execution_tables
from envs.core import LCG_INC, LCG_MUL
from envs.fees import fee_table
from envs.kernels.compiled import Compiled
from envs.observation import obs_table, write_portfolio
from envs.tradability import fill_modes
from envs.trading import EnvParams, EnvState, last_decision_bar

#: Decisions per compiled call (see the module docstring for the trade-off).
BLOCK = 4


def _int64(x: int) -> int:
    """``x`` modulo 2**64 as a signed 64-bit integer (the wrap of torch's int64 arithmetic)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def _lcg_power(steps: int) -> tuple[int, int]:
    """Multiplier and increment of ``steps`` generator advances in one (an LCG composed with itself is
    an LCG), so a block advances each env's generator exactly as ``steps`` single steps do."""
    mul, inc = 1, 0
    for _ in range(steps):
        mul, inc = (mul * LCG_MUL) % (1 << 64), (inc * LCG_MUL + LCG_INC) % (1 << 64)
    return _int64(mul), _int64(inc)


class BacktestLoop:
    """Runs ``policy`` over a backtest from ``(state, obs)``; see the module docstring.

    ``policy`` must be a pure tensor function ``(N, obs_dim) float32 -> (N, A)`` float actions
    (e.g. ``agents.policy.Policy.frozen_act()``); ``prices`` is ``envs.backtest_step.asset_prices``.
    Needs the market's observation table (markets up to ``envs.observation.OBS_TABLE_MAX_BYTES``;
    :meth:`supported`). Call it under ``torch.inference_mode()`` with inference-mode inputs (a
    state from a ``reset`` made there), or the first block is compiled twice.
    """

    def __init__(
        self,
        market: MarketData,
        params: EnvParams,
        policy: Callable[[Tensor], Tensor],
        prices: tuple[Tensor, Tensor],
        block: int = BLOCK,
    ) -> None:
        table = obs_table(market)
        if table is None:
            raise ValueError("BacktestLoop needs the market's observation table (the market is too large)")
        self.market, self.params, self.policy, self.prices, self.block = market, params, policy, prices, block
        # The fill modes only when some bar is untradable (the traced graph then reads them).
        modes = () if market.all_tradable else (fill_modes(market),)
        extra = execution_tables(market, params)
        num_extra = len(extra)  # volume, impact and (with spread "estimate") the half-spread table
        self._tensors = (*prices, table, fee_table(market, params), *extra, *modes)
        self._rng_step = _lcg_power(block)
        num_features = market.num_features

        def decide_block(
            obs: Tensor, t: Tensor, cash: Tensor, shares: Tensor, order: Tensor, *tensors: Tensor
        ):
            open_all, close_all, table, fees_all, *rest = tensors
            volume_all, impact_all, half_all = (*rest[:num_extra], None, None, None)[:3]
            modes = rest[num_extra:]
            modes_all = modes[0] if modes else None
            last_bar = last_decision_bar(open_all.shape[0], params)  # from the (symbolic) window length
            outs = []
            for _ in range(block):
                # After an episode ends inside the block (the block is then replayed eagerly) the
                # decision bar may lie past the data: clamped so the later gathers stay in range.
                t = t.clamp(max=last_bar)
                action = policy(obs)
                core = backtest_core(
                    params,
                    last_bar,
                    t,
                    cash,
                    shares,
                    order,
                    action,
                    open_all,
                    close_all,
                    modes_all,
                    volume_all,
                    impact_all,
                    half_all,
                    fees_all,
                )
                t, cash, shares, value, order = core.t, core.cash, core.shares, core.value, core.order
                obs = write_portfolio(
                    table.index_select(0, t), cash, core.pos_value, value, num_features, traced=True
                )
                outs.append((action, value, core.traded_notional, core.traded, core.terminated, core.done))
            return (obs, t, cash, shares, order, *(torch.stack(x) for x in zip(*outs, strict=True)))

        # The window's length is left symbolic, so that the compiled code (and inductor's on-disk
        # cache of it) serves every window of the same universe and features.
        for x in self._tensors:
            torch._dynamo.mark_dynamic(x, 0)
        self._fn = Compiled(decide_block, "backtest decisions", dynamic=True)

    @staticmethod
    def supported(market: MarketData) -> bool:
        return obs_table(market) is not None

    @property
    def compiled(self) -> bool:
        """False once compiling failed (the blocks then run eagerly)."""
        return self._fn.active

    def _eager(self, state: EnvState, obs: Tensor) -> tuple[EnvState, Tensor, tuple[Tensor, ...]]:
        action = self.policy(obs)
        state, obs, term, value, notional, traded = backtest_step(
            self.market, self.params, state, action, self.prices
        )
        return state, obs, (action, value, notional, traded, term)

    def run(self, state: EnvState, obs: Tensor, num: int) -> tuple[EnvState, Tensor, tuple[Tensor, ...]]:
        """``num`` decisions from ``(state, obs)``: the final ``(state, obs)`` and the per-decision
        ``(actions (num, N, A), value (num, N), traded_notional (num, N), shares_traded (num, N, A),
        terminated (num, N))``."""
        rows: list[tuple[Tensor, ...]] = []
        mul, inc = self._rng_step
        done_k = 0
        while num - done_k >= self.block:
            out = self._fn(obs, state.t, state.cash, state.shares, state.order, *self._tensors)
            new_obs, t, cash, shares, order, actions, value, notional, traded, term, done = out
            if bool(done.any()):  # an episode ends inside the block: replay it with the env's restart
                for _ in range(self.block):
                    state, obs, row = self._eager(state, obs)
                    rows.append(tuple(x.unsqueeze(0) for x in row))
            else:
                # As `block` backtest_steps: new bar and accounting, the generator advanced `block`
                # times, the reward-only fields kept.
                state = dataclasses.replace(
                    state,
                    t=t,
                    cash=cash,
                    shares=shares,
                    value=value[-1],
                    rng=state.rng * mul + inc,
                    order=order,
                )
                obs = new_obs
                rows.append((actions, value, notional, traded, term))
            done_k += self.block
        for _ in range(num - done_k):
            state, obs, row = self._eager(state, obs)
            rows.append(tuple(x.unsqueeze(0) for x in row))
        return state, obs, tuple(torch.cat(col) for col in zip(*rows, strict=True))
