"""The backtest engine: policies and baselines over a window, through the training env's own ``step``.

Every strategy starts with the same cash at the window's first bar (``reset(..., start=0)``) and runs
to the window's end. Decisions are deterministic; a decision taken on bar ``t`` (observation of bars
``<= t``) fills at bar ``t + 1``'s open with slippage and costs and is held to the close of bar
``t + decision_interval``, the next decision bar (the env's timing, see ``envs.trading``).

Row ``k`` of every output is decision ``k``: taken on bar ``t_k = k * decision_interval``, marked to
market at the close of bar ``t_{k+1}``; ``timestamps[k]`` is the start time of that bar. There are
``K = (T - 1) // decision_interval`` decisions in a window of ``T`` bars.

Strategies:

- policies: any callables ``policy(obs) -> action`` (or objects with ``act(obs, deterministic=True)``)
  in the env's action space; they run as rows of one batched env, each called on its own rows;
- ``"buy_and_hold"``: equal weight of the universe bought with the first decision and then held (no
  rebalancing): the buy is the env's ``"weights"`` fill at bar 1's open (fractional shares, slippage and
  costs); holding is the env's ``"shares"``-mode step with a zero action, which trades nothing and
  marks ``cash + shares @ close``; that mark is computed for every decision bar at once instead of one
  call per step (a test checks the two agree);
- ``"index"``: buy-and-hold of an index ETF (the first of :data:`INDEX_TICKERS` in the universe; skipped
  when there is none), the same way;
- ``"equal_weight"``: equal weights over the universe, rebalanced with the first fill of every session
  (the first decision whose fill bar, ``t + 1``, lies in a new session: at that session's open when the
  decision grid lines up with the sessions, as with 390 one-minute bars and ``decision_interval`` 15),
  held in between (no trade), costs on: each rebalance is the env's ``"weights"`` fill; the marks between
  rebalances are computed at once from the held shares, as for buy-and-hold;
- ``"cash"``: never trades.

A strategy whose value falls under the env's termination floor is stopped there: from then on its
equity stays at the value it had when it terminated, with no positions and no trades.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from backtests import metrics as m
from data.errors import DataError, PodracerError
from data.market import MarketData
from envs import trading
from envs.backends.compiled import check_mode
from envs.backtest_loop import BacktestLoop
from envs.backtest_step import asset_prices, backtest_step
from envs.observation import WEIGHT, split_obs
from envs.trading import EnvParams

#: Index ETFs used for the ``"index"`` baseline, in order of preference.
INDEX_TICKERS: tuple[str, ...] = ("QQQ", "SPY")
#: Every baseline name ``run_backtest`` understands.
BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "index", "cash")
DEFAULT_BASELINES: tuple[str, ...] = ("buy_and_hold", "equal_weight", "cash", "index")
#: ``compile="auto"`` compiles a policy's decision loop from this many decisions on. Measured on a
#: 2-core CPU (docs/backtests.md): the compiled decision saves ~120 µs; compiling costs ~3 s with
#: inductor's on-disk cache warm and ~14 s cold, so 50k decisions repay even a cold compile.
COMPILE_MIN_DECISIONS = 50_000

Policy = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class BacktestResult:
    """Per-decision outputs of every strategy over one window (host tensors)."""

    names: tuple[str, ...]  # S strategy names: policies first, then baselines
    tickers: tuple[str, ...]  # A
    timestamps: np.ndarray  # (K,) datetime64[ns] UTC start of the bar each row is marked at
    session_dates: np.ndarray  # (K,) datetime64[D] session date (US/Eastern) of each row
    fill_timestamps: np.ndarray  # (K,) datetime64[ns] UTC start of the bar each decision fills at
    equity: Tensor  # (K, S) float64 portfolio value in $ after each decision's holding period
    returns: Tensor  # (K, S) float64 simple return of each decision step (first one vs initial cash)
    weights: Tensor  # (K, S, A) float32 position weights at the mark
    costs: Tensor  # (K, S) float64 costs paid ($, commission + slippage) by each decision's trades
    turnover: Tensor  # (K, S) float64 traded notional / portfolio value before the trade
    trades: Tensor  # (K, S, A) float32 signed traded notional per asset at the fill price ($, + = buy)
    trade_costs: Tensor  # (K, S, A) float32 cost of each asset's trade ($, commission + slippage)
    initial_value: float
    decision_interval: int
    interval: str
    start_timestamp: np.datetime64  # start of the window's first bar (the first decision bar)
    terminated_at: tuple[int, ...]  # (S,) decision row at which each strategy was stopped, -1 if never
    # (D,) session dates and (D, S) equity at each session's end (see ``daily_returns``); None: the
    # days are the session dates of the marks (a result built without them).
    day_dates: np.ndarray | None = None
    day_equity: Tensor | None = None

    @property
    def num_steps(self) -> int:
        return int(self.equity.shape[0])

    def index(self, name: str) -> int:
        """Column of strategy ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise PodracerError(
                f"no strategy named {name!r} in the backtest ({', '.join(self.names)})"
            ) from None

    def daily_returns(self) -> tuple[np.ndarray, Tensor]:
        """Session dates ``(D,)`` and daily returns ``(D, S)``: close-to-close of the last mark each day
        (the first day against the initial cash), i.e. the decision returns compounded by day.

        A session without a mark (a decision spans more than a session: daily bars, or hourly bars
        with a long ``decision_interval``) is valued at its last bar's close with the holdings of the
        decision in force, so every session of the run is one row and 252 rows are a year.
        """
        if self.day_equity is not None and self.day_dates is not None:
            prev = torch.cat(
                [torch.full_like(self.day_equity[:1], self.initial_value), self.day_equity[:-1]], dim=0
            )
            return self.day_dates, self.day_equity / prev - 1.0
        return np.unique(self.session_dates), m.aggregate_by_day(self.returns, _day_codes(self.session_dates))

    def date_range(self) -> tuple[str, str]:
        """First and last session dates covered, ISO strings."""
        if self.num_steps == 0:
            raise PodracerError("empty backtest")
        first = np.datetime64(self.start_timestamp, "D")
        return str(first), str(self.session_dates[-1])

    def summary(self, annualization: float = 252.0) -> dict[str, Tensor]:
        """Headline metrics on daily returns (``backtests.metrics.summary``), one value per strategy."""
        _, daily = self.daily_returns()
        return m.summary(
            daily,
            step_turnover=self.turnover,
            step_costs=self.costs,
            weights=self.weights,
            initial_value=self.initial_value,
            annualization=annualization,
        )


def _day_codes(dates: np.ndarray) -> np.ndarray:
    return dates.astype("datetime64[D]").astype(np.int64)


def _inference_fn(policy: Any, obs: Tensor, num_assets: int) -> tuple[Callable[[Tensor], Tensor], bool]:
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


def _long_horizon(params: EnvParams, num_decisions: int) -> EnvParams:
    """The env params for a backtest: episodes long enough that the window never truncates, and
    float64 per-asset accounting where the env offers the choice (exact holdings; the batch is small)."""
    changes: dict[str, Any] = {"episode_len": max(int(params.episode_len), num_decisions + 1)}
    if "precision" in {f.name for f in dataclasses.fields(params)}:
        changes["precision"] = "float64"
    return dataclasses.replace(params, **changes)


def num_decisions(num_bars: int, decision_interval: int) -> int:
    """How many decisions fit in a window of ``num_bars`` bars (each needs its fill and mark bars)."""
    return max(0, (num_bars - 1) // int(decision_interval))


def run_backtest(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, Policy] | None = None,
    *,
    baselines: Sequence[str] = DEFAULT_BASELINES,
    device: str | torch.device | None = None,
    seed: int = 0,
    num_threads: int | None = None,
    compile: str = "auto",
) -> BacktestResult:
    """Run every policy and baseline over the whole ``market`` window; see the module docstring.

    ``num_threads`` sets torch's intra-op threads for the run and restores them after (None: leave
    them). The loop runs one small batch per step, where extra threads only add synchronization: on
    a busy 2-core machine 2 threads measured 8-17x slower than 1.

    ``compile``: ``"on"`` runs a single policy's decisions (policy call + env step) through
    ``torch.compile`` (``envs.backtest_loop.BacktestLoop``), ``"off"`` eagerly, ``"auto"`` compiles
    from :data:`COMPILE_MIN_DECISIONS` decisions on, where the faster loop repays the compile.
    Compiled results equal eager ones up to float rounding (~1e-8 relative on a year of equity).
    """
    compile = check_mode(compile)
    if num_threads is not None:
        previous = torch.get_num_threads()
        torch.set_num_threads(int(num_threads))
        try:
            return run_backtest(
                market, params, policies, baselines=baselines, device=device, seed=seed, compile=compile
            )
        finally:
            torch.set_num_threads(previous)
    policies = dict(policies or {})
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise PodracerError(f"unknown baseline(s) {', '.join(unknown)}; choose from {', '.join(BASELINES)}")
    clash = [n for n in policies if n in BASELINES or n.startswith("index_")]
    if clash:
        raise PodracerError(f"policy name(s) {', '.join(clash)} clash with baseline names")
    device = torch.device(device) if device is not None else market.device
    market = market.to(device)
    interval = int(params.decision_interval)
    k_steps = num_decisions(market.num_steps, interval)
    if k_steps < 1:
        raise DataError(
            f"window of {market.num_steps} bars is too short for one decision every {interval} bars"
        )
    params = _long_horizon(params, k_steps)

    plan = _day_plan(market, interval, k_steps)
    groups: list[_Run] = []
    if policies:
        use_compile = compile == "on" or (compile == "auto" and k_steps >= COMPILE_MIN_DECISIONS)
        groups.append(_run_policies(market, params, policies, k_steps, seed, plan.off_bars, use_compile))
    static = _static_baselines(market, baselines)
    if static:
        groups.append(_run_static(market, params, static, k_steps, seed, plan.off_bars))
    if "equal_weight" in baselines:
        groups.append(_run_equal_weight(market, params, k_steps, seed, plan.off_bars))

    cat = lambda key: torch.cat([getattr(g, key) for g in groups], dim=1)  # noqa: E731
    equity = cat("equity")
    prev = torch.cat([torch.full_like(equity[:1], float(params.initial_cash)), equity[:-1]], dim=0)
    mark_bars = (np.arange(1, k_steps + 1) * interval).astype(np.int64)
    dates = market.session_dates()
    # Equity at each session's end: its last mark, or (no mark that session) the off-mark value.
    day_equity = torch.empty(len(plan.dates), equity.shape[1], dtype=torch.float64)
    on_mark = torch.as_tensor(plan.mark_rows >= 0)
    if bool(on_mark.any()):
        day_equity[on_mark] = equity[torch.as_tensor(plan.mark_rows[plan.mark_rows >= 0])]
    if len(plan.off_bars):
        day_equity[~on_mark] = cat("off_equity")
    return BacktestResult(
        names=tuple(n for g in groups for n in g.names),
        tickers=tuple(market.tickers),
        timestamps=np.asarray(market.timestamps)[mark_bars],
        session_dates=dates[mark_bars],
        fill_timestamps=np.asarray(market.timestamps)[mark_bars - interval + 1],
        equity=equity,
        returns=equity / prev - 1.0,
        weights=cat("weights"),
        costs=cat("costs"),
        turnover=cat("turnover"),
        trades=cat("trades"),
        trade_costs=cat("trade_costs"),
        initial_value=float(params.initial_cash),
        decision_interval=interval,
        interval=market.interval,
        start_timestamp=np.asarray(market.timestamps)[0],
        terminated_at=tuple(t for g in groups for t in g.terminated_at),
        day_dates=plan.dates,
        day_equity=day_equity,
    )


@dataclass(frozen=True)
class _DayPlan:
    """The sessions a backtest reports, in order: ``dates (D,)``; ``mark_rows (D,)`` the decision row
    whose mark ends the session (its last mark), or -1 for a session without a mark, valued at its
    last bar ``off_bars`` (one per -1, in order)."""

    dates: np.ndarray
    mark_rows: np.ndarray
    off_bars: np.ndarray


def _day_plan(market: MarketData, interval: int, k_steps: int) -> _DayPlan:
    dates = market.session_dates()
    ends = np.flatnonzero(np.r_[dates[1:] != dates[:-1], True])  # last bar of each session
    mark_bars = np.arange(1, k_steps + 1) * interval
    mark_dates = dates[mark_bars]
    last = np.searchsorted(mark_dates, dates[ends], side="right") - 1  # last mark on or before the day
    has_mark = (last >= 0) & (mark_dates[np.clip(last, 0, None)] == dates[ends])
    # A session without a mark is reported when a position can exist by its end (after the first
    # fill at bar 1) and the run still goes on (before the last mark); later sessions lie past the end.
    off = ~has_mark & (ends >= 1) & (ends < k_steps * interval)
    keep = has_mark | off
    return _DayPlan(
        dates=dates[ends][keep],
        mark_rows=np.where(has_mark, last, -1)[keep].astype(np.int64),
        off_bars=ends[off].astype(np.int64),
    )


@dataclass
class _Run:
    names: list[str]
    equity: Tensor  # (K, N) float64
    weights: Tensor  # (K, N, A) float32
    costs: Tensor  # (K, N) float64
    turnover: Tensor  # (K, N) float64
    trades: Tensor  # (K, N, A) float32
    trade_costs: Tensor  # (K, N, A) float32
    terminated_at: list[int]
    off_equity: Tensor  # (len(off_bars), N) float64 value at the close of sessions without a mark


def _trade_accounting(
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
    shares_traded (K, N, A), terminated (K, N))``."""
    n = len(callables)
    expected = (n, market.num_assets)
    values, traded_notional, shares_traded, terminated, actions = [], [], [], [], []
    # The loop only calls the policies and the env and keeps references to their outputs: no extra
    # tensor op per step. Weights, costs, NaN checks and termination are vectorized afterwards.
    for k in range(k_steps):
        if n == 1:
            action = callables[0](obs)
        else:
            action = torch.cat([p(obs[i : i + 1]) for i, p in enumerate(callables)], dim=0)
        if k == 0 or not (trusted or _plain_action(action, expected, obs)):
            action = trading.check_action(action, n, market.num_assets, market.device)
        # The env's own NaN check costs a host sync per step; the actions are checked once after
        # the loop instead (a run with a bad action is discarded, so nothing wrong is reported).
        actions.append(action)
        # The env's step less the reward (bitwise the same accounting; no env is truncated:
        # episode_len is past the window and the last decision is the last the data allows).
        state, obs, term, value, notional, traded = backtest_step(market, params, state, action, prices)
        values.append(value)
        traded_notional.append(notional)
        shares_traded.append(traded)
        terminated.append(term)
    return tuple(torch.stack(x) for x in (actions, values, traded_notional, shares_traded, terminated))


def _run_policies(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, Policy],
    k_steps: int,
    seed: int,
    off_bars: np.ndarray,
    use_compile: bool = False,
) -> _Run:
    names = list(policies)
    n = len(names)
    # Everything under inference mode, the reset included: compiled code is specialized to
    # inference tensors, and one kind of input throughout means one compile.
    with torch.inference_mode(), _gc_paused():
        state, obs = trading.reset(market, params, n, torch.Generator().manual_seed(seed), start=0)
        fns = [_inference_fn(policies[name], obs, market.num_assets) for name in names]
        callables = [f for f, _ in fns]
        # Every policy's action is checked on the first decision; from then on only the ones that
        # are not known to return plain (n, A) float tensors on the env's device.
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
        # A terminated strategy is stopped: its value stays at the terminal mark, nothing after counts.
        ever = torch.cumsum(term.to(torch.int64), dim=0) > 0
        dead = torch.cat([torch.zeros_like(ever[:1]), ever[:-1]], dim=0)  # (K, N): stopped before row k
        rows = torch.arange(k_steps, device=value.device).unsqueeze(1).expand(k_steps, n)
        last_alive = torch.where(dead, -1, rows).cummax(dim=0).values
        equity = value.gather(0, last_alive.clamp(min=0))
        prev = torch.cat([torch.full_like(equity[:1], float(params.initial_cash)), equity[:-1]], dim=0)
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
        notional, trade_costs = _trade_accounting(market, params, shares, k_steps)
        first_term = torch.where(term, rows, k_steps).amin(dim=0)
        # Off-mark closes: the cash and holdings of the decision in force (cash only changes at fills).
        off = torch.as_tensor(off_bars, device=value.device)
        k_off = (off - 1) // int(params.decision_interval)
        cash = value - held_value.sum(dim=-1)  # (K, N)
        off_close = market.close.index_select(0, off).to(torch.float64).unsqueeze(1)  # (O, 1, A)
        off_value = cash[k_off] + (held[k_off] * off_close).sum(dim=-1)
        off_equity = torch.where(dead[k_off], equity[k_off], off_value)
    return _Run(
        names=names,
        equity=equity.cpu(),
        weights=w.to(torch.float32).cpu(),
        costs=trade_costs.sum(dim=-1).cpu(),
        turnover=(traded / prev).cpu(),
        trades=notional.to(torch.float32).cpu(),
        trade_costs=trade_costs.to(torch.float32).cpu(),
        terminated_at=[int(v) if int(v) < k_steps else -1 for v in first_term.cpu()],
        off_equity=off_equity.cpu(),
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (restored after). The decision loop keeps ~5 small
    tensors per decision alive and creates no reference cycles; the collector's repeated passes
    over them measured ~3 s of a 98k-decision run (~27 s)."""
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


def _static_baselines(market: MarketData, baselines: Sequence[str]) -> list[tuple[str, Tensor]]:
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


def _run_static(
    market: MarketData,
    params: EnvParams,
    static: list[tuple[str, Tensor]],
    k_steps: int,
    seed: int,
    off_bars: np.ndarray | None = None,
    *,
    through_env: bool = False,
) -> _Run:
    """Buy the target weights with the first decision, then hold the shares to the end.

    The buy is the env's ``"weights"`` fill (fractional shares, at bar 1's open, with slippage and
    costs). Holding is a ``"shares"``-mode step with a zero action, which trades nothing and marks
    ``cash + shares @ close``; by default that mark is computed for all decision bars at once
    (``through_env=True`` steps the env instead; the tests check both agree).
    """
    names = [s[0] for s in static]
    n = len(names)
    device = market.device
    interval = int(params.decision_interval)
    # Baselines are the investor's own alternative, not the agent under its risk limits: never capped
    # (a 0.1 cap would turn the index baseline into 90% cash). docs/env.md "Risk limits".
    params = dataclasses.replace(params, max_weight=1.0)
    buy_params = dataclasses.replace(params, action_mode="weights")
    hold_params = dataclasses.replace(params, action_mode="shares")
    with torch.inference_mode():
        state, _ = trading.reset(market, buy_params, n, torch.Generator().manual_seed(seed), start=0)
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
        notional, trade_costs = _trade_accounting(market, params, shares, k_steps)
        turnover = torch.zeros(k_steps, n, dtype=torch.float64, device=device)
        turnover[0] = first_traded / float(params.initial_cash)
        off = torch.as_tensor(off_bars if off_bars is not None else np.zeros(0, np.int64), device=device)
        off_close = market.close.index_select(0, off).to(torch.float64)  # (O, A)
        off_equity = state.cash.to(torch.float64).unsqueeze(0) + off_close @ state.shares.to(torch.float64).T
    return _Run(
        names=names,
        equity=equity.cpu(),
        weights=w.to(torch.float32).cpu(),
        costs=trade_costs.sum(dim=-1).cpu(),
        turnover=turnover.cpu(),
        trades=notional.to(torch.float32).cpu(),
        trade_costs=trade_costs.to(torch.float32).cpu(),
        terminated_at=[-1] * n,
        off_equity=off_equity.cpu(),
    )


def rebalance_rows(market: MarketData, interval: int, k_steps: int) -> np.ndarray:
    """Decision rows of ``"equal_weight"``'s rebalances: row 0 and each first row whose fill bar
    (``k * interval + 1``) lies in a session other than the previous row's fill bar."""
    dates = market.session_dates()
    fill_dates = dates[np.arange(k_steps) * interval + 1]
    return np.flatnonzero(np.r_[True, fill_dates[1:] != fill_dates[:-1]]).astype(np.int64)


def _run_equal_weight(
    market: MarketData, params: EnvParams, k_steps: int, seed: int, off_bars: np.ndarray
) -> _Run:
    """Equal weights bought at each rebalance row (the env's ``"weights"`` fill), held in between.

    Between rebalances nothing trades, so the marks are ``cash + shares @ close`` computed for the
    whole segment at once; at a rebalance the env state is moved to that decision bar (time index and
    value marked at its close) and stepped once in ``"weights"`` mode, which trades, pays costs and
    slippage exactly as for any policy.
    """
    device = market.device
    interval = int(params.decision_interval)
    num_assets = market.num_assets
    buy_params = dataclasses.replace(params, action_mode="weights")
    rows = rebalance_rows(market, interval, k_steps)
    ends = np.r_[rows[1:], k_steps]
    equity = torch.zeros(k_steps, 1, dtype=torch.float64, device=device)
    weights = torch.zeros(k_steps, 1, num_assets, dtype=torch.float64, device=device)
    shares_traded = torch.zeros(k_steps, 1, num_assets, dtype=torch.float64, device=device)
    turnover = torch.zeros(k_steps, 1, dtype=torch.float64, device=device)
    seg_cash, seg_shares = [], []
    target = torch.full((1, num_assets), 1.0 / num_assets, device=device)
    with torch.inference_mode():
        state, _ = trading.reset(market, buy_params, 1, torch.Generator().manual_seed(seed), start=0)
        prev_value = float(params.initial_cash)
        for r, end in zip(rows.tolist(), ends.tolist(), strict=True):
            if r > 0:
                t = r * interval
                close_t = market.close[t].to(torch.float64)
                value = state.cash.to(torch.float64) + (state.shares.to(torch.float64) * close_t).sum(-1)
                state = dataclasses.replace(
                    state, t=torch.full_like(state.t, t), value=value.to(state.value.dtype)
                )
                prev_value = float(equity[r - 1, 0])
            state, _, _, _, _, info = trading.step(market, buy_params, state, target)
            cash = state.cash.to(torch.float64)  # (1,)
            held_shares = state.shares.to(torch.float64)  # (1, A)
            seg_cash.append(cash)
            seg_shares.append(held_shares)
            shares_traded[r] = info["shares_traded"].to(torch.float64)
            turnover[r] = info["traded_notional"].to(torch.float64) / prev_value
            mark_bars = torch.arange(r + 1, end + 1, device=device) * interval
            close = market.close.index_select(0, mark_bars).to(torch.float64)  # (L, A)
            held = close.unsqueeze(1) * held_shares.unsqueeze(0)  # (L, 1, A)
            seg_equity = cash.unsqueeze(0) + held.sum(dim=-1)  # (L, 1)
            seg_equity[0] = info["value"].to(torch.float64)  # the env's own mark
            equity[r:end] = seg_equity
            weights[r:end] = held / seg_equity.unsqueeze(-1).clamp(min=1e-12)
        notional, trade_costs = _trade_accounting(market, params, shares_traded, k_steps)
        # Off-mark closes: the holdings of the last rebalance filled by then (fill bar r * interval + 1).
        off = np.asarray(off_bars, dtype=np.int64)
        seg = np.searchsorted(rows * interval + 1, off, side="right") - 1
        if len(off):
            cash_all = torch.stack(seg_cash)  # (R, 1)
            shares_all = torch.stack(seg_shares)  # (R, 1, A)
            idx = torch.as_tensor(np.clip(seg, 0, None), device=device)
            off_close = market.close.index_select(0, torch.as_tensor(off, device=device)).to(torch.float64)
            off_equity = cash_all[idx] + (shares_all[idx] * off_close.unsqueeze(1)).sum(dim=-1)
        else:
            off_equity = torch.zeros(0, 1, dtype=torch.float64, device=device)
    return _Run(
        names=["equal_weight"],
        equity=equity.cpu(),
        weights=weights.to(torch.float32).cpu(),
        costs=trade_costs.sum(dim=-1).cpu(),
        turnover=turnover.cpu(),
        trades=notional.to(torch.float32).cpu(),
        trade_costs=trade_costs.to(torch.float32).cpu(),
        terminated_at=[-1],
        off_equity=off_equity.cpu(),
    )


def _weights_of(obs: Tensor, market: MarketData) -> Tensor:
    """Position weights ``(N, A)`` from observations (see ``envs.observation.split_obs``)."""
    return split_obs(obs, market.num_assets, market.num_features)[1][..., WEIGHT].clone()


def evaluate(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, Policy],
    device: str | torch.device | None = None,
    *,
    baselines: Sequence[str] = (),
    num_threads: int | None = None,
) -> BacktestResult:
    """Score policies on a window (the tournament's updater): :func:`run_backtest` without baselines."""
    return run_backtest(market, params, policies, baselines=baselines, device=device, num_threads=num_threads)


FITNESS_KINDS: tuple[str, ...] = ("sharpe", "return", "calmar")
#: Calmar fitness: finite ratios are clipped to +-CALMAR_CAP; a strategy with no drawdown and a positive
#: return scores in (CALMAR_CAP, 2 * CALMAR_CAP), above every strategy with a drawdown, ordered by return.
CALMAR_CAP = 1e3


def fitness(
    result: BacktestResult,
    kind: str = "sharpe",
    *,
    annualization: float = 252.0,
    nan_value: float = -math.inf,
) -> Tensor:
    """One fitness per strategy ``(S,)`` from daily returns, higher is better.

    ``"sharpe"``: annualized Sharpe ratio; ``"return"``: total compounded return; ``"calmar"``: Calmar
    ratio clipped to ``+-CALMAR_CAP``. Undefined values (a flat equity curve has no Sharpe ratio) become
    ``nan_value``, so that sorting ranks them last.

    Calmar with no drawdown (no losing day, positive return) is annual return / 0, undefined as a ratio
    but the best possible risk profile: it must not rank below a weaker strategy that lost on some day,
    so it scores ``CALMAR_CAP * (2 - 1 / (1 + cumulative return))``, above every strategy with a
    drawdown (whose Calmar is at most ``CALMAR_CAP``) and increasing with the return among themselves.
    Flat at zero (all cash) stays undefined.
    """
    _, daily = result.daily_returns()
    if kind == "sharpe":
        out = m.sharpe_ratio(daily, annualization=annualization)
    elif kind == "return":
        out = m.cum_returns_final(daily)
    elif kind == "calmar":
        out = m.calmar_ratio(daily, annualization=annualization).clamp(-CALMAR_CAP, CALMAR_CAP)
        cum = m.cum_returns_final(daily)
        no_drawdown = (m.max_drawdown(daily) == 0) & (cum > 0)
        out = torch.where(no_drawdown, CALMAR_CAP * (2.0 - 1.0 / (1.0 + cum)), out)
    else:
        raise PodracerError(f"unknown fitness {kind!r}; choose from {', '.join(FITNESS_KINDS)}")
    return torch.where(torch.isnan(out), torch.full_like(out, nan_value), out)
