"""The backtest engine: policies and baselines over a window, through the training env's own ``step``.

Every strategy starts with the same cash at the window's first bar (``reset(..., start=0)``) and runs
to the window's end. Decisions are deterministic; a decision taken on bar ``t`` (observation of bars
``<= t``) fills at bar ``t + 1``'s open with slippage and costs and is held to the close of bar
``t + decision_interval``, the next decision bar (the env's timing, see ``envs.trading``).

Row ``k`` of every output is decision ``k``: taken on bar ``t_k = k * decision_interval``, marked to
market at the close of bar ``t_{k+1}``; ``timestamps[k]`` is the start time of that bar. There are
``K = (T - 1) // decision_interval`` decisions in a window of ``T`` bars.

Strategies: policies, any callables ``policy(obs) -> action`` (or objects with
``act(obs, deterministic=True)``) in the env's action space, run as rows of one batched env, each
called on its own rows, or a :class:`PolicyBatch` (one call decides every row); and the baselines of
``backtests.baselines`` (buy-and-hold, index, equal weight, cash, the linear and boosted rankers),
under the same execution rules as the policies (costs, volume cap, impact), in groups of columns.

A strategy whose value falls under the env's termination floor is stopped there: from then on its
equity stays at the value it had when it terminated, with no positions and no trades.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from backtests import baselines as bl
from backtests import metrics as m
from backtests.accounting import GroupRun, fill_volumes
from backtests.policy_loop import InvestorOrder as InvestorOrder  # re-exported: strategies return one
from backtests.policy_loop import PolicyBatch, PolicyFn, inference_fn, run_policies
from data.errors import DataError, PodracerError
from data.market import MarketData
from envs import trading
from envs.kernels.compiled import check_mode
from envs.trading import EnvParams

#: ``compile="auto"`` compiles a policy's decision loop from this many decisions on: enough that the
#: time the compiled decisions save repays even a cold compile (inductor's on-disk cache empty). The
#: rule: docs/backtests.md; the figures: docs/benchmarks.md ("Backtests").
COMPILE_MIN_DECISIONS = 50_000


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
    trade_costs: (
        Tensor  # (K, S, A) float32 cost of each asset's trade ($, commission + slippage + spread + impact)
    )
    initial_value: float
    decision_interval: int
    interval: str
    start_timestamp: np.datetime64  # start of the window's first bar (the first decision bar)
    terminated_at: tuple[int, ...]  # (S,) decision row at which each strategy was stopped, -1 if never
    # (D,) session dates and (D, S) equity at each session's end (see ``daily_returns``); None: the
    # days are the session dates of the marks (a result built without them).
    day_dates: np.ndarray | None = None
    day_equity: Tensor | None = None
    # Per fill (None: a result built without them): shares traded (K, S, A) float32, the fill bars'
    # volume expected at the decision bars (K, A) float32 (the volume cap's base), and the execution costs (K, S, A) float32 ($): slippage + half-spread, impact.
    shares: Tensor | None = None
    fill_volume: Tensor | None = None
    spread_costs: Tensor | None = None
    impact_costs: Tensor | None = None
    # Policies that prefer no asset (:func:`prefers_no_asset`: the zero model, an equal-weight book
    # whatever they observe); the verdict does not state such a book's excess as an edge.
    no_preference: frozenset[str] = frozenset()

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

    def summary(self, annualization: float) -> dict[str, Tensor]:
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
    policies: Mapping[str, PolicyFn] | PolicyBatch | None = None,
    *,
    baselines: Sequence[str] = bl.DEFAULT_BASELINES,
    device: str | torch.device | None = None,
    seed: int = 0,
    num_threads: int | None = 1,
    compile: str = "auto",
    capital: Sequence[float] | None = None,
    linear: PolicyFn | None = None,
    boosted: PolicyFn | None = None,
) -> BacktestResult:
    """Run every policy and baseline over the whole ``market`` window; see the module docstring.

    ``linear``: the fitted linear baseline (``backtests.linear.LinearModel``, fitted on the run's train
    and validation windows), the column ``linear`` when ``"linear"`` is in ``baselines``; without it
    that baseline is skipped. ``boosted``: the same for the boosted ranker (``backtests.boosted``), the
    column ``boosted``. Both trade under the run's own execution rules (``baselines.investor``).

    ``capital``: account sizes ($) to run every strategy at, as one more batch dimension (rows of the
    same batched env, one pass): strategy ``name`` at size ``c`` is the column ``capacity_name(name,
    c)``, and every dollar amount of the result (equity, costs, trades) is in units of its column's
    starting capital, so ``initial_value`` is 1 (shares and volumes stay in shares). The env's
    execution model makes the sizes differ (``backtests.capacity``). Needs ``policies`` as a mapping.

    ``num_threads``: torch's intra-op threads for the run, restored after (None: leave them; see
    :func:`_torch_threads` for why the default is one).

    ``compile``: ``"on"`` runs a single policy's decisions (policy call + env step) through
    ``torch.compile`` (``envs.backtest_loop.BacktestLoop``), ``"off"`` eagerly, ``"auto"`` compiles
    from :data:`COMPILE_MIN_DECISIONS` decisions on, where the faster loop repays the compile.
    Compiled results equal eager ones up to float rounding (docs/benchmarks.md, "Backtests").

    A policy that keeps half its value in the market, beside the default baselines, over two
    sessions of a toy market (no index ETF in its universe, so no index baseline):

    >>> import torch
    >>> from data.toy import toy_market
    >>> from envs.trading import EnvParams
    >>> market = toy_market(num_steps=2 * 390, num_assets=3, num_features=2)
    >>> half = lambda obs: torch.full((obs.shape[0], 3), 0.5 / 3)
    >>> result = run_backtest(market, EnvParams(decision_interval=30), {"half_invested": half})
    >>> result.names
    ('half_invested', 'buy_and_hold', 'cash', 'equal_weight')
    >>> tuple(result.equity.shape)  # (decisions, strategies): (2 * 390 - 1) // 30 decisions
    (25, 4)
    >>> bool((result.equity[:, result.index("cash")] == result.initial_value).all())  # never trades
    True
    >>> round(float(result.weights[-1, result.index("half_invested")].sum()), 1)
    0.5
    >>> dates, daily = result.daily_returns()  # one row per session
    >>> [str(d) for d in dates], tuple(daily.shape)
    (['2024-01-02', '2024-01-03'], (2, 4))
    """
    compile = check_mode(compile)
    policies = _checked_policies(policies, baselines)
    with _torch_threads(num_threads):
        market = market.to(torch.device(device) if device is not None else market.device)
        interval = int(params.decision_interval)
        k_steps = num_decisions(market.num_steps, interval)
        if k_steps < 1:
            raise DataError(
                f"window of {market.num_steps} bars is too short for one decision every {interval} bars"
            )
        params = _long_horizon(params, k_steps)
        plan = _day_plan(market, interval, k_steps)
        rankers = _rankers(baselines, linear=linear, boosted=boosted)
        if capital is not None:
            groups = _capacity_groups(
                market, params, policies, baselines, capital, k_steps, seed, plan.off_bars, rankers
            )
        else:
            use_compile = compile == "on" or (compile == "auto" and k_steps >= COMPILE_MIN_DECISIONS)
            groups = _strategy_groups(
                market, params, policies, baselines, k_steps, seed, plan.off_bars, rankers, use_compile
            )
        initial_value = float(params.initial_cash) if capital is None else 1.0
        return _assembled(market, params, groups, plan, k_steps, initial_value, _no_preference(policies))


def buy_and_hold_on(market: MarketData, params: EnvParams, dates: Any, *, device: Any = "cpu") -> np.ndarray:
    """Buy-and-hold's daily returns on ``market`` (the ``buy_and_hold`` baseline under ``params``'
    execution rules) on ``dates``, NaN on a date it has none: the benchmark of a pod's or a trial's
    daily returns, lined up by date."""
    bench = run_backtest(market, params, baselines=("buy_and_hold",), device=device, num_threads=1)
    when, daily = bench.daily_returns()
    by_date = dict(zip(np.asarray(when, "datetime64[D]").tolist(), daily[:, 0].cpu().numpy(), strict=True))
    return np.array([by_date.get(d, np.nan) for d in np.asarray(dates, "datetime64[D]").tolist()], np.float64)


def prefers_no_asset(policy: Any) -> bool:
    """True when ``policy`` says it prefers no asset (its ``prefers_no_asset()``: the zero model of
    ``agents.policy.Policy``, the linear and boosted rankers, a scored softmax at temperature 0);
    False for a callable that does not say."""
    probe = getattr(policy, "prefers_no_asset", None)
    return bool(probe()) if callable(probe) else False


def _no_preference(policies: Mapping[str, PolicyFn] | PolicyBatch) -> frozenset[str]:
    """The names of the policies that prefer no asset (none of a :class:`PolicyBatch`: its pods are
    one call, not objects to ask)."""
    if isinstance(policies, PolicyBatch):
        return frozenset()
    return frozenset(name for name, policy in policies.items() if prefers_no_asset(policy))


@contextmanager
def _torch_threads(num_threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``num_threads`` inside, restored after (None: left alone).

    The loop runs one small batch per step, where extra threads only add synchronization: more than
    one measured slower (docs/benchmarks.md, "Backtests"). The setting is MKL's too, and MKL runs
    float64 ``sqrt`` and ``exp`` of even a hundred elements (the execution model's per-step math) as
    a parallel team: on a busy 2-core machine such a call can wait a scheduler tick for its second
    thread."""
    if num_threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(int(num_threads))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _checked_policies(
    policies: Mapping[str, PolicyFn] | PolicyBatch | None, baselines: Sequence[str]
) -> dict[str, PolicyFn] | PolicyBatch:
    """The policies as a batch or a dict; a one-line error for an unknown baseline or a policy named
    like one."""
    if not isinstance(policies, PolicyBatch):
        policies = dict(policies or {})
    names = list(policies.names) if isinstance(policies, PolicyBatch) else list(policies)
    unknown = [b for b in baselines if b not in bl.BASELINES]
    if unknown:
        raise PodracerError(
            f"unknown baseline(s) {', '.join(unknown)}; choose from {', '.join(bl.BASELINES)}"
        )
    clash = [n for n in names if bl.is_baseline(n)]
    if clash:
        raise PodracerError(f"policy name(s) {', '.join(clash)} clash with baseline names")
    return policies


def _strategy_groups(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, PolicyFn] | PolicyBatch,
    baselines: Sequence[str],
    k_steps: int,
    seed: int,
    off_bars: np.ndarray,
    rankers: dict[str, PolicyFn],
    use_compile: bool,
) -> list[GroupRun]:
    """The policies, then each baseline asked for, each its own group of columns."""
    groups: list[GroupRun] = []
    names = policies.names if isinstance(policies, PolicyBatch) else list(policies)
    if names:
        groups.append(run_policies(market, params, policies, k_steps, seed, off_bars, use_compile))
    static = bl.static_weights(market, baselines)
    if static:
        groups.append(bl.run_static(market, params, static, k_steps, seed, off_bars))
    if "equal_weight" in baselines:
        groups.append(bl.run_equal_weight(market, params, k_steps, seed, off_bars))
    if rankers:
        groups.append(run_policies(market, _ranker_params(params), rankers, k_steps, seed, off_bars))
    return groups


def _rankers(baselines: Sequence[str], **fitted: PolicyFn | None) -> dict[str, PolicyFn]:
    """The fitted ranker baselines (``baselines.RANKERS``) asked for in ``baselines`` and handed in."""
    return {n: fitted[n] for n in bl.RANKERS if n in baselines and fitted.get(n) is not None}


def _assembled(
    market: MarketData,
    params: EnvParams,
    groups: list[GroupRun],
    plan: _DayPlan,
    k_steps: int,
    initial_value: float,
    no_preference: frozenset[str] = frozenset(),
) -> BacktestResult:
    """The groups' columns side by side, with the marks' times and each session's closing equity."""
    interval = int(params.decision_interval)
    cat = lambda key: torch.cat([getattr(g, key) for g in groups], dim=1)  # noqa: E731
    equity = cat("equity")
    prev = torch.cat([torch.full_like(equity[:1], initial_value), equity[:-1]], dim=0)
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
        shares=cat("shares"),
        fill_volume=fill_volumes(market, params, k_steps, torch.device("cpu")).to(torch.float32),
        spread_costs=cat("spread_costs"),
        impact_costs=cat("impact_costs"),
        initial_value=initial_value,
        decision_interval=interval,
        interval=market.interval,
        start_timestamp=np.asarray(market.timestamps)[0],
        terminated_at=tuple(t for g in groups for t in g.terminated_at),
        day_dates=plan.dates,
        day_equity=day_equity,
        no_preference=no_preference,
    )


def capacity_name(name: str, capital: float) -> str:
    """The column of strategy ``name`` run at ``capital`` dollars (``run_backtest(capital=...)``)."""
    return f"{name}@{capital:g}"


def _capacity_groups(
    market: MarketData,
    params: EnvParams,
    policies: Mapping[str, PolicyFn] | PolicyBatch,
    baselines: Sequence[str],
    capital: Sequence[float],
    k_steps: int,
    seed: int,
    off_bars: np.ndarray,
    rankers: Mapping[str, PolicyFn],
) -> list[GroupRun]:
    """Every strategy at every size in ``capital``, each group's dollars in units of its columns'
    starting capital. The env's bust floor is checked per column after the run (the env's own floor
    is one number), so the env runs with none."""
    if isinstance(policies, PolicyBatch):
        raise PodracerError("a capacity backtest takes its policies as a mapping of names to policies")
    levels = [float(c) for c in capital]
    if not levels or min(levels) <= 0:
        raise PodracerError(f"capital levels must be positive dollar amounts (got {list(capital)})")
    device = market.device
    env_params = dataclasses.replace(params, bust_frac=0.0)
    per_level = torch.tensor(levels, dtype=torch.float64, device=device)
    groups = []
    if policies:
        # The same inference function as a plain run's (``inference_fn``: a policy's frozen_act when it
        # fits the market's observations), so the sizes replay the report's own decisions.
        probe = trading.reset(market, env_params, 1, torch.Generator().manual_seed(seed), start=0)[1]
        fns = [inference_fn(p, probe, market.num_assets)[0] for p in policies.values()]
        size = len(levels)

        def act(obs: Tensor) -> Any:
            if len(fns) == 1:  # its decision as it is (an InvestorOrder stays one)
                return fns[0](obs)
            return torch.cat([fn(obs[i * size : (i + 1) * size]) for i, fn in enumerate(fns)])

        batch = PolicyBatch(tuple(capacity_name(n, c) for n in policies for c in levels), act)
        rows = per_level.repeat(len(fns))
        run = run_policies(
            market, env_params, batch, k_steps, seed, off_bars, capital=rows, bust_frac=params.bust_frac
        )
        groups.append(_per_capital(run, rows))
    static = [(capacity_name(n, c), w) for n, w in bl.static_weights(market, baselines) for c in levels]
    if static:
        rows = per_level.repeat(len(static) // len(levels))
        groups.append(
            _per_capital(
                bl.run_static(market, env_params, static, k_steps, seed, off_bars, capital=rows), rows
            )
        )
    if "equal_weight" in baselines:
        run = bl.run_equal_weight(market, env_params, k_steps, seed, off_bars, capital=per_level)
        run.names = [capacity_name("equal_weight", c) for c in levels]
        groups.append(_per_capital(run, per_level))
    for name, ranker in rankers.items():
        batch = PolicyBatch(tuple(capacity_name(name, c) for c in levels), ranker)
        run = run_policies(
            market,
            _ranker_params(env_params),
            batch,
            k_steps,
            seed,
            off_bars,
            capital=per_level,
            bust_frac=params.bust_frac,
        )
        groups.append(_per_capital(run, per_level))
    return groups


def _ranker_params(params: EnvParams) -> EnvParams:
    """The ranker baselines' env (linear, boosted): the baselines' (``baselines.investor``: the run's
    execution rules, volume cap included, without its ``max_weight``) in ``"weights"`` mode, whatever
    the run's action mode."""
    return dataclasses.replace(bl.investor(params), action_mode="weights")


def _per_capital(run: GroupRun, capital: Tensor) -> GroupRun:
    """``run`` with every dollar amount divided by its column's starting capital."""
    c = capital.cpu()
    run.equity = run.equity / c
    run.costs = run.costs / c
    run.off_equity = run.off_equity / c
    per_asset = c.to(torch.float32).view(1, -1, 1)
    for name in ("trades", "trade_costs", "spread_costs", "impact_costs"):
        setattr(run, name, getattr(run, name) / per_asset)
    return run


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
