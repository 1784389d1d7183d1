"""The decision loop of a backtest: policies run as rows of one batched env, eagerly or compiled,
into one ``backtests.accounting.GroupRun`` (see ``backtests.engine`` for the timing of a decision).

The loop only calls the policies and the env; weights, costs, NaN checks and termination are
computed afterwards, vectorized over the whole window.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from backtests import baselines as bl
from backtests.accounting import GroupRun, trade_accounting
from data.market import MarketData
from envs import trading
from envs.backtest_loop import BacktestLoop
from envs.backtest_step import BacktestStepResult, asset_prices, backtest_step
from envs.params import ActionMode
from envs.trading import EnvParams

PolicyFn = Callable[[Tensor], Tensor]


class InvestorOrder(NamedTuple):
    """A decision a strategy hands the engine in place of an action: ``action (n, A)`` read in
    ``action_mode`` and filled as the baselines' orders are (``backtests.baselines.investor``: the run's
    execution rules, the volume cap included, without its ``max_weight``), whatever the run's action
    mode. The walk-forward's benchmark account decides with these
    (``backtests.stitched.BenchmarkInCharge``: buy equal weight until the book is built, then a zero
    ``"shares"`` order, which holds exactly); only a run's single strategy may return one (the eager
    loop)."""

    action: Tensor  # (n, A)
    action_mode: ActionMode
    # (n,) bool or None: rows that hold instead (a zero ``"shares"`` order, which trades nothing) while
    # the others fill ``action``: one account at several sizes whose books are built at different times
    hold: Tensor | None = None


@dataclass(frozen=True)
class PolicyBatch:
    """Several policies decided by one call: ``act(obs (S, obs_dim)) -> actions (S, A)`` gives row ``i``
    the action of strategy ``names[i]`` (a population's pods: one stacked forward for all of them,
    instead of one call per strategy and decision)."""

    names: tuple[str, ...]
    act: Callable[[Tensor], Tensor]


def inference_fn(policy: Any, obs: Tensor, num_assets: int) -> tuple[Callable[[Tensor], Tensor], bool]:
    """``(obs -> deterministic action, trusted)`` for one policy of the loop: a policy's
    ``frozen_act()`` (``agents.policy.Policy``: the same ops as ``act``, less per-call overhead) when
    it takes these observations as they are (float32, its width, its device), else ``act`` or the
    callable itself. ``trusted``: the actions are float tensors ``(n, A)`` on ``obs``'s device."""
    frozen = getattr(policy, "frozen_act", None)
    if (
        callable(frozen)
        and obs.dtype == torch.float32
        and obs.ndim == 2
        and obs.shape[1] == getattr(policy, "obs_dim", None)
        and getattr(policy, "num_assets", None) == num_assets
        and getattr(policy, "device", None) == obs.device
    ):
        fast = frozen()
        if fast is not None:
            return fast, True
    if hasattr(policy, "act"):
        return (lambda o: policy.act(o, deterministic=True)), False
    return policy, False


def _eager_decisions(
    market: MarketData,
    params: EnvParams,
    state: Any,
    obs: Tensor,
    callables: Sequence[Callable[[Tensor], Tensor]],
    trusted: bool,
    prices: tuple[Tensor, Tensor],
    k_steps: int,
) -> tuple[Tensor, ...]:
    """The decision loop, eagerly: ``(actions (K, N, A), value (K, N), traded_notional (K, N),
    shares_traded (K, N, A), terminated (K, N))``. One callable decides for every row (one policy,
    or a :class:`PolicyBatch`); several are called each on its own row."""
    n = int(obs.shape[0])
    expected = (n, market.num_assets)
    values, traded_notional, shares_traded, terminated, actions = [], [], [], [], []
    # The fills of an InvestorOrder: the baselines' env in either action mode.
    order_params = {m: bl.investor(dataclasses.replace(params, action_mode=m)) for m in ("weights", "shares")}
    # The loop only calls the policies and the env and keeps references to their outputs: no extra
    # tensor op per step. Weights, costs, NaN checks and termination are vectorized afterwards.
    for k in range(k_steps):
        step_params, hold = params, None
        if len(callables) == 1:
            action = callables[0](obs)
            if isinstance(action, InvestorOrder):
                step_params, action, hold = order_params[action.action_mode], action.action, action.hold
        else:
            action = torch.cat([p(obs[i : i + 1]) for i, p in enumerate(callables)], dim=0)
        if k == 0 or not (trusted or _plain_action(action, expected, obs)):
            action = trading.check_action(action, n, market.num_assets, market.device)
        # The env's own NaN check costs a host sync per step; the actions are checked once after
        # the loop instead (a run with a bad action is discarded, so nothing wrong is reported).
        actions.append(action)
        # The env's step less the reward (bitwise the same accounting; no env is truncated:
        # episode_len is past the window and the last decision is the last the data allows).
        if hold is not None and bool(hold.any()):
            step = _holding_step(market, step_params, order_params["shares"], state, action, hold, prices)
        else:
            step = backtest_step(market, step_params, state, action, prices)
        state, obs, term, value, notional, traded = step
        values.append(value)
        traded_notional.append(notional)
        shares_traded.append(traded)
        terminated.append(term)
    return tuple(torch.stack(x) for x in (actions, values, traded_notional, shares_traded, terminated))


def _holding_step(
    market: MarketData,
    params: EnvParams,
    hold_params: EnvParams,
    state: Any,
    action: Tensor,
    hold: Tensor,
    prices: tuple[Tensor, Tensor],
) -> BacktestStepResult:
    """One decision where the rows ``hold`` (n,) place a zero ``"shares"`` order (``hold_params``) and
    the others fill ``action`` under ``params``: both steps from the same state (the step is a pure
    function of it), each row's outcome taken from its own."""
    filled = backtest_step(market, params, state, action, prices)
    held = backtest_step(market, hold_params, state, torch.zeros_like(action), prices)

    def pick(a: Tensor, b: Tensor) -> Tensor:
        mask = hold.to(a.device).view(-1, *([1] * (a.ndim - 1)))
        return torch.where(mask, b, a)

    merged = {
        f.name: pick(getattr(filled.state, f.name), getattr(held.state, f.name))
        for f in dataclasses.fields(state)
    }
    return BacktestStepResult(
        dataclasses.replace(filled.state, **merged),
        *(pick(a, b) for a, b in zip(filled[1:], held[1:], strict=True)),
    )


def run_policies(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, PolicyFn] | PolicyBatch,
    k_steps: int,
    seed: int,
    off_bars: np.ndarray,
    use_compile: bool = False,
    capital: Tensor | None = None,
    bust_frac: float | None = None,
) -> GroupRun:
    """``capital`` (N,): each row's starting cash instead of ``params.initial_cash``, with its own bust
    floor ``bust_frac * capital`` checked after each decision (run the env with ``bust_frac`` 0)."""
    names = list(policies.names) if isinstance(policies, PolicyBatch) else list(policies)
    n = len(names)
    # Everything under inference mode, the reset included: compiled code is specialized to
    # inference tensors, and one kind of input throughout means one compile.
    with torch.inference_mode(), _gc_paused():
        state, obs = trading.reset(market, params, n, torch.Generator().manual_seed(seed), start=0)
        start_cash = torch.full((n,), float(params.initial_cash), dtype=torch.float64, device=market.device)
        if capital is not None:
            start_cash = capital.to(device=market.device, dtype=torch.float64)
            state = dataclasses.replace(
                state, cash=start_cash.clone(), value=start_cash.clone(), peak=start_cash.clone()
            )
        if isinstance(policies, PolicyBatch):
            # One call for all rows; its actions are checked like an unknown callable's.
            callables, trusted = [policies.act], False
        else:
            fns = [inference_fn(policies[name], obs, market.num_assets) for name in names]
            callables = [f for f, _ in fns]
            # Every policy's action is checked on the first decision; from then on only the ones
            # that are not known to return plain (n, A) float tensors on the env's device.
            trusted = all(t for _, t in fns)
        prices = asset_prices(market, params)  # cast once, not one cast per row and step
        if use_compile and n == 1 and trusted and BacktestLoop.supported(market):
            # One policy with a plain tensor function: policy calls and env steps compiled together.
            loop = BacktestLoop(market, params, callables[0], prices)
            _, _, decisions = loop.run(state, obs, k_steps)
        else:
            decisions = _eager_decisions(market, params, state, obs, callables, trusted, prices, k_steps)
        actions, value, traded_notional, shares_traded, term = decisions
        value = value.to(torch.float64)  # (K, N)
        ok = torch.isfinite(actions).all(dim=2) & torch.isfinite(value)  # (K, N)
        if not bool(ok.all()):
            k, i = (int(v) for v in (~ok).nonzero()[0])
            raise trading.ActionError(
                f"policy {names[i]!r} returned a NaN or inf action at decision {k} "
                f"(bar {k * int(params.decision_interval)})"
            )
        if capital is not None and bust_frac:
            term = term | (value < bust_frac * start_cash)
        # A terminated strategy is stopped: its value stays at the terminal mark, nothing after counts.
        ever = torch.cumsum(term.to(torch.int64), dim=0) > 0
        dead = torch.cat([torch.zeros_like(ever[:1]), ever[:-1]], dim=0)  # (K, N): stopped before row k
        rows = torch.arange(k_steps, device=value.device).unsqueeze(1).expand(k_steps, n)
        last_alive = torch.where(dead, -1, rows).cummax(dim=0).values
        equity = value.gather(0, last_alive.clamp(min=0))
        prev = torch.cat([start_cash.unsqueeze(0), equity[:-1]], dim=0)
        traded = traded_notional.to(torch.float64).masked_fill(dead, 0.0)
        shares = shares_traded.to(torch.float64)  # (K, N, A)
        # Holdings at each mark: the env adds each step's trade to the previous holdings, in order
        # (rows after a termination hold the reset env's shares and are masked below).
        held = torch.cumsum(shares, dim=0)
        close = market.close.index_select(0, (rows[:, 0] + 1) * int(params.decision_interval))  # (K, A)
        held_value = held * close.unsqueeze(1).to(torch.float64)  # (K, N, A) positions' value
        w = held_value / value.unsqueeze(-1)
        w = w.masked_fill(dead.unsqueeze(-1), 0.0)
        shares = shares.masked_fill(dead.unsqueeze(-1), 0.0)
        fills = trade_accounting(market, params, shares, k_steps)
        first_term = torch.where(term, rows, k_steps).amin(dim=0)
        # Off-mark closes: the cash and holdings of the decision in force (cash only changes at fills).
        off = torch.as_tensor(off_bars, device=value.device)
        k_off = (off - 1) // int(params.decision_interval)
        cash = value - held_value.sum(dim=-1)  # (K, N)
        off_close = market.close.index_select(0, off).to(torch.float64).unsqueeze(1)  # (O, 1, A)
        off_value = cash[k_off] + (held[k_off] * off_close).sum(dim=-1)
        off_equity = torch.where(dead[k_off], equity[k_off], off_value)
    return GroupRun(
        names=names,
        equity=equity.cpu(),
        weights=w.to(torch.float32).cpu(),
        turnover=(traded / prev).cpu(),
        terminated_at=[int(v) if int(v) < k_steps else -1 for v in first_term.cpu()],
        off_equity=off_equity.cpu(),
        **GroupRun.fill_fields(fills, shares),
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (restored after). The decision loop keeps ~5 small
    tensors per decision alive and creates no reference cycles, so the collector's repeated passes
    over them are pure cost, a measurable share of a long run (docs/benchmarks.md, "Backtests")."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plain_action(action: Any, shape: tuple[int, int], obs: Tensor) -> bool:
    """Whether ``action`` is already a float tensor of the right shape on the env's device."""
    return (
        isinstance(action, Tensor)
        and tuple(action.shape) == shape
        and action.is_floating_point()
        and action.device == obs.device
    )
