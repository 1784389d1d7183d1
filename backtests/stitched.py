"""One continuous account traded by a sequence of policies: a walk-forward's out-of-sample record.

A walk-forward replaces the policy in charge between test windows (a fold's gate promotes its
challenger or keeps the incumbent). Live, that is one brokerage account whose holdings carry over:
the new policy's first decision starts from the old one's positions and pays the costs of whatever
it changes. :func:`run_stitched` simulates exactly that with the backtest engine: ONE engine run over
the whole span, with one strategy, :class:`SwitchingPolicy`, whose decisions from bar ``switch_bars[i]``
on are taken by ``policies[i]``. So the account is continuous by construction (no re-buy, no missed
decision at a boundary; a decision on bar t fills at bar t + 1 as always) and the baselines run in
the same call over the same bars: buy-and-hold buys from the span's first bar (see
:class:`BenchmarkInCharge` for the volume cap).

Where no champion is in charge yet (a walk-forward before its first promotion) the account holds the
benchmark, :class:`BenchmarkInCharge`: the backtest's buy-and-hold, equal weight of the tickers
tradable at its first decision, bought (at every decision until the volume cap lets the book be
built) and then held (zero orders), with the fills of the baselines (``backtests.engine.InvestorOrder``). From the span's first bar it is the ``buy_and_hold``
column itself, decision for decision.

Each policy sees its own features: the caller builds the span's ``features`` segment by segment, each
segment normalized with the statistics of the policy in charge there (``data.fold_market``).

:func:`segment_figures` cuts the account's figures for one segment (a fold's test window) out of the
run: its return, Sharpe, costs and turnover, and buy-and-hold's return over the same days.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from backtests import baselines as bl
from backtests import metrics as m
from backtests.capacity import CAPACITY_BASELINES, CAPITAL_LEVELS, COST_LEVELS, concat_results, cost_name
from backtests.engine import BacktestResult, InvestorOrder, run_backtest
from data.errors import PodracerError
from data.market import MarketData
from envs import execution
from envs.observation import CASH, TRADABLE, split_obs
from envs.trading import EnvParams

#: The column of the stitched account in the result (the policy in charge, whichever it is).
ACCOUNT = "champion"


def _decide_fn(policy: Any) -> Callable[[Tensor], Tensor]:
    """``obs -> deterministic action`` of a policy (its ``frozen_act`` fast path where it has one)."""
    frozen = getattr(policy, "frozen_act", None)
    fast = frozen() if callable(frozen) else None
    if fast is not None:
        return fast
    if hasattr(policy, "act"):
        return lambda obs: policy.act(obs, deterministic=True)
    return policy


class BenchmarkInCharge:
    """The benchmark as the policy in charge: the ``buy_and_hold`` baseline's orders. From a fresh
    account it orders equal weight of the tickers tradable at the decision bar (``"weights"``) at
    every decision until the book is built (at most ``baselines.BUILT_CASH`` of the value in cash at
    a decision after an order: the volume cap may cut a buy); from then on it places zero
    ``"shares"`` orders, which trade nothing (a ticker that leaves the universe for good is still
    sold by the env, and its proceeds stay in cash). Both are :class:`backtests.engine.InvestorOrder`:
    filled like the ``buy_and_hold`` baseline's orders (the run's execution rules, volume cap
    included), so from the span's first bar the account is that column, decision for decision.

    Whether each row's book is built is the one thing it remembers (a value that fell after the build
    can lift the cash share over the threshold again, and the baseline does not buy again then); a
    call whose rows all hold nothing but cash is a fresh account (a new replay) and forgets it, so
    every replay of the account decides the same. In one call of several rows (one account at several
    sizes, ``capacity``) a row that is built holds (``InvestorOrder.hold``) while the others build.

    >>> import torch
    >>> from data.toy import toy_market
    >>> market = toy_market(num_steps=2 * 390, num_assets=3, num_features=2)
    >>> result = run_stitched(market, EnvParams(decision_interval=30), [BenchmarkInCharge(3, 2)], [0])
    >>> account, bench = result.equity[:, result.index(ACCOUNT)], result.equity[:, result.index("buy_and_hold")]
    >>> bool(torch.allclose(account, bench, rtol=1e-9)), float(result.turnover[1:, result.index(ACCOUNT)].sum())
    (True, 0.0)
    """

    def __init__(self, num_assets: int, num_features: int) -> None:
        self.num_assets, self.num_features = int(num_assets), int(num_features)
        self._built: Tensor | None = None  # (n,) bool: each row's book is built

    def __call__(self, obs: Tensor) -> InvestorOrder:
        glob, per_asset = split_obs(obs, self.num_assets, self.num_features)
        cash = glob[:, CASH]
        if self._built is None or self._built.shape[0] != obs.shape[0] or bool((cash >= 1.0).all()):
            self._built = torch.zeros(obs.shape[0], dtype=torch.bool, device=obs.device)  # a fresh account
        elif not bool(self._built.all()):
            # The first decision after an order at most BUILT_CASH in cash ends the build (for good).
            self._built = self._built | (cash <= bl.BUILT_CASH)
        if not bool(self._built.all()):
            tradable = per_asset[..., TRADABLE]  # (n, A) 1.0 / 0.0
            weights = tradable / tradable.sum(dim=1, keepdim=True).clamp(min=1.0)
            return InvestorOrder(weights, "weights", hold=self._built if bool(self._built.any()) else None)
        return InvestorOrder(torch.zeros(obs.shape[0], self.num_assets, device=obs.device), "shares")


class SwitchingPolicy:
    """Decision ``k`` (on bar ``k * decision_interval`` of the window) is taken by ``policies[i]``, the
    last one whose ``switch_bars[i]`` is at or before that bar. The engine calls a single strategy once
    per decision, in order (``backtests.engine``), which is what the count relies on; :attr:`calls`
    lets the caller check it."""

    def __init__(self, policies: Sequence[Any], switch_bars: Sequence[int], decision_interval: int) -> None:
        if not policies or len(policies) != len(switch_bars):
            raise PodracerError("SwitchingPolicy: one switch bar per policy, at least one policy")
        if list(switch_bars) != sorted(switch_bars) or switch_bars[0] != 0:
            raise PodracerError(f"SwitchingPolicy: switch bars must rise from 0, got {list(switch_bars)}")
        self._fns = [_decide_fn(p) for p in policies]
        self._bars = [int(b) for b in switch_bars]
        self._interval = int(decision_interval)
        self.calls = 0

    def in_charge(self, bar: int) -> int:
        """Index of the policy deciding on ``bar``."""
        return bisect.bisect_right(self._bars, bar) - 1

    def __call__(self, obs: Tensor) -> Tensor:
        fn = self._fns[self.in_charge(self.calls * self._interval)]
        self.calls += 1
        return fn(obs)


def run_stitched(
    market: MarketData,
    params: EnvParams,
    policies: Sequence[Any],
    switch_bars: Sequence[int],
    *,
    baselines: Sequence[str] = bl.DEFAULT_BASELINES,
    device: str | torch.device | None = None,
) -> BacktestResult:
    """The account traded by ``policies[i]`` from bar ``switch_bars[i]`` (bars of ``market``) on, and the
    baselines, over the whole ``market`` window in one engine run (see the module docstring). The
    account's column is :data:`ACCOUNT`."""
    switcher = SwitchingPolicy(policies, switch_bars, params.decision_interval)
    # compile="off": the compiled loop traces one policy function; the switch is plain Python.
    result = run_backtest(
        market, params, {ACCOUNT: switcher}, baselines=baselines, device=device, compile="off"
    )
    if switcher.calls != result.num_steps:
        raise PodracerError(
            f"stitched account: {switcher.calls} policy calls for {result.num_steps} decisions"
        )
    return result


def run_stitched_capacity(
    market: MarketData,
    params: EnvParams,
    policies: Sequence[Any],
    switch_bars: Sequence[int],
    *,
    levels: Sequence[float] = CAPITAL_LEVELS,
    cost_levels: Sequence[float] = COST_LEVELS,
    device: str | torch.device | None = None,
) -> BacktestResult:
    """The stitched account and the capacity baselines at every account size of ``levels`` in one
    engine run (``backtests.capacity``): the same switches, one policy call per decision for every
    size's row; then at the env's own account size at every multiple of ``cost_levels`` of the cost
    model (one run each, columns ``backtests.capacity.cost_name``), as ``capacity.run_capacity``
    replays a single strategy, so the account's report carries the cost sensitivity too."""
    runs = []
    for level in (None, *cost_levels):
        switcher = SwitchingPolicy(policies, switch_bars, params.decision_interval)
        result = run_backtest(
            market,
            params if level is None else execution.scaled_costs(params, level),
            {ACCOUNT: switcher},
            baselines=CAPACITY_BASELINES,
            device=device,
            compile="off",
            capital=levels if level is None else [float(params.initial_cash)],
        )
        if switcher.calls != result.num_steps:
            raise PodracerError(
                f"stitched account: {switcher.calls} policy calls for {result.num_steps} decisions"
            )
        if level is not None:
            result = dataclasses.replace(result, names=tuple(cost_name(n, level) for n in result.names))
        runs.append(result)
    return concat_results(runs)


def segment_figures(
    result: BacktestResult,
    first: str,
    last: str,
    *,
    annualization: float,
    strategy: str = ACCOUNT,
    benchmark: str = "buy_and_hold",
) -> dict[str, float | int | None]:
    """Figures of ``strategy`` over the sessions ``[first, last]`` (ISO dates) of ``result``: its return
    (from the previous session's close, so the segments' returns compound to the whole), Sharpe and
    volatility of its daily returns (annualized), costs paid ($), turnover (traded notional over
    value, summed), and ``benchmark``'s return over the same sessions."""
    dates, daily = result.daily_returns()
    day = np.asarray(dates, dtype="datetime64[D]")
    keep = (day >= np.datetime64(first, "D")) & (day <= np.datetime64(last, "D"))
    rows = torch.as_tensor(np.flatnonzero(keep))
    col = result.index(strategy)
    mine = daily[rows, col].to(torch.float64)
    steps = np.asarray(result.session_dates, dtype="datetime64[D]")
    step_rows = torch.as_tensor(
        np.flatnonzero((steps >= np.datetime64(first, "D")) & (steps <= np.datetime64(last, "D")))
    )
    out: dict[str, float | int | None] = {
        "sessions": int(keep.sum()),
        "return": _finite(float(torch.prod(1.0 + mine) - 1.0)) if len(rows) else None,
        "sharpe_ratio": _finite(float(m.sharpe_ratio(mine, annualization=annualization)))
        if len(rows)
        else None,
        "annual_volatility": _finite(float(m.annual_volatility(mine, annualization=annualization)))
        if len(rows)
        else None,
        "costs_paid": float(result.costs[step_rows, col].sum()),
        "turnover": float(result.turnover[step_rows, col].sum()),
    }
    if benchmark in result.names and len(rows):
        bench = daily[rows, result.index(benchmark)].to(torch.float64)
        out[f"{benchmark}_return"] = _finite(float(torch.prod(1.0 + bench) - 1.0))
    return out


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
