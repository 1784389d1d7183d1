"""The trading environment as pure batched functions: ``reset`` and ``step`` over tensors.

``N`` environments step together on one device with no Python loop over environments or assets.
Constants live in the frozen :class:`EnvParams`; everything that changes lives in the frozen,
batch-first :class:`EnvState`. The market data is an argument (it stays on the device once) and is
never copied into the state.

Semantics (one decision per step; ``k = decision_interval``):

- **Observe.** The observation at decision bar ``t`` uses bars ``<= t`` only: cash fraction, time of
  day of bar ``t``, then per asset the position weight (marked at bar ``t``'s close) and the
  features of bar ``t``. Layout: :mod:`envs.observation` (``obs_dim``, ``split_obs``).
- **Fill.** Orders fill at bar ``t+1``'s open: buys at ``open * (1 + slippage)``, sells at
  ``open * (1 - slippage)`` (``slippage = slippage_bps / 1e4``), each paying ``cost_rate`` times its
  notional at the fill price. Sells execute first and their proceeds (net of cost) fund the buys;
  if the buys (plus their cost) need more cash than is available, every buy of that env is scaled
  by the same factor so cash never goes negative (in ``"shares"`` mode the scaled buys are floored
  to whole shares). Holdings never go negative (long-only).
- **Actions.** ``"weights"``: target weights of the value at the fill bar's open; negatives are
  clipped to 0, rows summing above 1 are scaled to sum 1, the rest is cash; fractional shares are
  allowed. ``"shares"``: delta shares ``round(clip(a, -1, 1) * max_shares)``; sells are limited to
  the holdings.
- **Mark.** The portfolio is marked at bar ``t+k``'s close, which is the next decision bar.
  Positions carry across sessions (a decision on a session's last bar fills at the next open).
- **Reward** (times ``reward_scale``): ``"log_return"`` ``log(V'/V)``, ``"return"`` ``V'/V - 1``, or
  ``"diff_sharpe"``, Moody & Saffell's differential Sharpe ratio of the simple return with EMA rate
  ``sharpe_eta``; minus ``drawdown_penalty * (1 - V'/peak')`` where ``peak'`` is the running peak of
  the marked value in the episode.
- **Episodes.** ``reset`` draws each env's start bar uniformly from the starts that leave room for a
  full episode (``start + k * (episode_len - 1) <= T - 1 - k``) or, when the window is shorter than
  one episode, from every bar that allows one decision; each env keeps its own time index.
  ``terminated``: the marked value fell below ``bust_frac`` (10%) of ``initial_cash``.
  ``truncated``: ``episode_len`` decisions were taken or the next decision would need bars past the
  end of the data (and not terminated).
- **Autoreset** happens in the same step: a done env restarts at a fresh start bar, drawn from a
  per-env counter-based generator kept in the state (so ``step`` stays pure and reproducible);
  ``info["final_obs"]`` holds the pre-reset observation (it *is* the returned ``obs`` tensor on steps
  where no env is done; do not write into either).

``step`` returns a :class:`StepResult` ``(state, obs, reward, terminated, truncated, info)``.
``info`` (all ``(N,)`` unless noted, pre-reset quantities of the step just taken): ``cost``,
``traded_notional``, ``value`` (marked value at ``t+k``; alias ``final_value``), ``final_obs``
``(N, obs_dim)``, ``shares_traded`` ``(N, A)``, ``step_count`` (decisions taken in the episode,
including this one), ``bar_t`` (the decision bar), ``t`` (the bar of the returned observation, after
any reset); with ``EnvParams.trade_info`` also ``fill_price`` ``(N, A)`` and ``asset_cost`` ``(N, A)``.

Where the code lives: this module holds the rules (params, state, the accounting in pure tensor
functions, reset/step) and imports its helpers, never the other way round: :mod:`envs.observation`
(the observation layout and its writers), :mod:`envs.backends.native` (the C kernel: ``step`` with
``compiled=True`` on CPU) and :mod:`envs.backends.compiled` (``torch.compile`` of the step core
handed to it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from data.errors import ConfigError, DataError, PodracerError
from data.market import MarketData
from envs.backends import native
from envs.backends.compiled import compiled_partial
from envs.observation import build_obs, fresh_obs
from envs.tradability import EXIT, HOLD, TRADE, fill_modes

# Precision, decided by measurement (docs/env.md). Per-env accounting (cash, value, peak,
# notionals, the Sharpe moments; N) is always float64, and every per-asset sum feeding it
# accumulates in float64: with a float32 value of ~$1e6 (ulp $0.06) a return of ~1e-4 carried a
# ~1e-3 relative error. Per-asset tensors (prices, shares, orders; N x A) follow
# EnvParams.precision: "float32" (default) measured 1.23-1.29x less CPU time per full 1024 x 100
# step than "float64" on this 2-core CPU (the accounting part alone ~1.7x: half the bytes per pass,
# no cast pass per price matrix; the observation is float32 either way) and matches the reference to
# 1e-4 relative with a $1-on-$1M floor, except the differential Sharpe reward, which amplifies the
# ~1e-7 relative rounding of float32 holdings to ~1e-3; "float64" matches everything to 1e-4
# relative (1e-9 in practice) and suits backtests, where the batch is small.
ACC_DTYPE = torch.float64  # (N,) accounting

ActionMode = Literal["weights", "shares"]
RewardMode = Literal["log_return", "return", "diff_sharpe"]
Precision = Literal["float32", "float64"]

# Counter-based generator for autoreset starts (Knuth's MMIX LCG; int64 arithmetic wraps).
_LCG_MUL = 6364136223846793005
_LCG_INC = 1442695040888963407
_DRAW_MASK = (1 << 31) - 1
# Below this a variance is treated as zero in the differential Sharpe ratio's denominator.
_SHARPE_VAR_EPS = 1e-12
_TINY = 1e-12


class EnvParamsError(ConfigError, ValueError):
    """Invalid environment parameters (a ``ValueError`` too, so callers may catch either)."""


class ActionError(PodracerError, ValueError):
    """An action of the wrong shape or with NaN/inf entries; raised before any state changes."""


@dataclass(frozen=True)
class EnvParams:
    """Constants of the trading environment (see the module docstring for the semantics)."""

    initial_cash: float = 1e6  # starting cash of every episode, in $
    cost_rate: float = 0.002  # proportional cost on every fill's notional
    slippage_bps: float = 1.0  # buys fill at open*(1+s), sells at open*(1-s), s = bps/1e4
    decision_interval: int = 15  # bars between decisions (k)
    episode_len: int = 64  # decisions per episode before truncation
    action_mode: ActionMode = "weights"  # "weights" (target weights) or "shares" (delta shares)
    max_shares: float = 100.0  # "shares" mode: |delta| per asset per decision at |a| = 1
    reward: RewardMode = "log_return"  # "log_return" | "return" | "diff_sharpe"
    drawdown_penalty: float = 0.0  # reward -= penalty * current drawdown fraction
    # Risk limits (docs/env.md "Risk limits"; defaults by measurement there).
    max_weight: float = 1.0  # per-asset cap on the position weight at the fill; the excess stays in cash
    turnover_penalty: float = 0.0  # reward -= penalty * traded notional / value at the decision bar
    reward_scale: float = 100.0  # multiplies the reward
    sharpe_eta: float = 0.01  # EMA rate of the differential Sharpe ratio's moments
    bust_frac: float = 0.1  # terminate when value < bust_frac * initial_cash
    trade_info: bool = False  # add per-asset fill_price / asset_cost to info (backtests)
    precision: Precision = "float32"  # dtype of per-asset quantities (shares, orders)

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> EnvParamsError:
            return EnvParamsError(f"EnvParams.{name}: {why} (got {getattr(self, name)!r})")

        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", float) and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise bad(f.name, "must be a number")
            if isinstance(value, float) and not math.isfinite(value):
                raise bad(f.name, "must be finite")
        if self.initial_cash <= 0:
            raise bad("initial_cash", "must be > 0")
        if not 0 <= self.cost_rate < 1:
            raise bad("cost_rate", "must be in [0, 1)")
        if not 0 <= self.slippage_bps < 10_000:
            raise bad("slippage_bps", "must be in [0, 10000)")
        for name in ("decision_interval", "episode_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(name, "must be an integer >= 1")
        if self.action_mode not in ("weights", "shares"):
            raise bad("action_mode", "must be 'weights' or 'shares'")
        if self.max_shares <= 0:
            raise bad("max_shares", "must be > 0")
        if self.reward not in ("log_return", "return", "diff_sharpe"):
            raise bad("reward", "must be 'log_return', 'return' or 'diff_sharpe'")
        if self.drawdown_penalty < 0:
            raise bad("drawdown_penalty", "must be >= 0")
        if not 0 < self.max_weight <= 1:
            raise bad("max_weight", "must be in (0, 1]")
        if self.turnover_penalty < 0:
            raise bad("turnover_penalty", "must be >= 0")
        if self.reward_scale <= 0:
            raise bad("reward_scale", "must be > 0")
        if not 0 < self.sharpe_eta < 1:
            raise bad("sharpe_eta", "must be in (0, 1)")
        if not 0 <= self.bust_frac < 1:
            raise bad("bust_frac", "must be in [0, 1)")
        if not isinstance(self.trade_info, bool):
            raise bad("trade_info", "must be a bool")
        if self.precision not in ("float32", "float64"):
            raise bad("precision", "must be 'float32' or 'float64'")

    @property
    def asset_dtype(self) -> torch.dtype:
        """dtype of the per-asset state and orders (``shares``)."""
        return torch.float64 if self.precision == "float64" else torch.float32


@dataclass(frozen=True)
class EnvState:
    """Everything that changes between steps; batch-first tensors on the market's device."""

    t: Tensor  # (N,) int64: each env's own decision bar (observation uses bars <= t)
    cash: Tensor  # (N,) ACC_DTYPE, $
    shares: Tensor  # (N, A) params.asset_dtype, >= 0
    value: Tensor  # (N,) ACC_DTYPE: cash + sum(shares * close[t])
    peak: Tensor  # (N,) ACC_DTYPE: running peak of value in the episode
    step_count: Tensor  # (N,) int64: decisions taken in the episode
    sharpe_a: Tensor  # (N,) ACC_DTYPE: EMA of returns (differential Sharpe ratio)
    sharpe_b: Tensor  # (N,) ACC_DTYPE: EMA of squared returns
    rng: Tensor  # (N,) int64: per-env generator state for autoreset start bars

    @property
    def num_envs(self) -> int:
        return int(self.t.shape[0])

    @property
    def device(self) -> torch.device:
        return self.t.device


# --- episode starts ----------------------------------------------------------------------------
def last_decision_bar(num_steps: int, params: EnvParams) -> int:
    """The last bar a decision can be taken on (its mark bar ``t + k`` must exist)."""
    return num_steps - 1 - params.decision_interval


def start_high(num_steps: int, params: EnvParams) -> int:
    """Random starts are drawn uniformly from ``[0, start_high]``.

    Starts that leave room for a whole episode when the window allows it, so episodes are not
    systematically cut short near the end; otherwise every bar that allows one decision.
    """
    last = last_decision_bar(num_steps, params)
    if last < 0:
        raise DataError(
            f"market has {num_steps} bars; decision_interval={params.decision_interval} needs at least "
            f"{params.decision_interval + 1}"
        )
    full = last - params.decision_interval * (params.episode_len - 1)
    return full if full >= 0 else last


def _lcg_next(key: Tensor) -> Tensor:
    return key * _LCG_MUL + _LCG_INC


def _draw_start(key: Tensor, high: int) -> Tensor:
    """Start bar in ``[0, high]`` from an (already advanced) generator state."""
    return ((key >> 33) & _DRAW_MASK) % (high + 1)


# --- reset / step ------------------------------------------------------------------------------
def reset(
    market: MarketData,
    params: EnvParams,
    num_envs: int,
    generator: torch.Generator | None = None,
    start: int | None = None,
) -> tuple[EnvState, Tensor]:
    """Fresh episodes: all cash, each env at its own random start bar (or all at ``start``).

    ``generator`` (a CPU ``torch.Generator``) draws the starts and seeds the per-env autoreset
    generators; ``None`` uses a generator seeded with 0. A fixed ``start`` (backtests) must allow
    one decision; the run then goes to the end of the window if ``episode_len`` is large enough.
    Returns ``(state, obs)``.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1 (got {num_envs!r})")
    device = market.device
    high = start_high(market.num_steps, params)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    rng = torch.randint(0, 2**62, (num_envs,), generator=generator, dtype=torch.int64).to(device)
    if start is None:
        t = torch.randint(0, high + 1, (num_envs,), generator=generator, dtype=torch.int64).to(device)
    else:
        last = last_decision_bar(market.num_steps, params)
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= last:
            raise DataError(f"start={start!r} must be an integer bar in [0, {last}] for this market")
        t = torch.full((num_envs,), start, dtype=torch.int64, device=device)
    cash = torch.full((num_envs,), params.initial_cash, dtype=ACC_DTYPE, device=device)
    zeros = torch.zeros(num_envs, dtype=ACC_DTYPE, device=device)
    state = EnvState(
        t=t,
        cash=cash,
        shares=torch.zeros(num_envs, market.num_assets, dtype=params.asset_dtype, device=device),
        value=cash.clone(),
        peak=cash.clone(),
        step_count=torch.zeros(num_envs, dtype=torch.int64, device=device),
        sharpe_a=zeros,
        sharpe_b=zeros.clone(),
        rng=rng,
    )
    return state, fresh_obs(market, t)


def _restart(
    market: MarketData, params: EnvParams, state: EnvState, mask: Tensor, obs: Tensor
) -> tuple[EnvState, Tensor]:
    """Envs in ``mask`` start a fresh episode at the start bar drawn from their (already advanced)
    generator state; their rows of ``obs`` (modified in place) become fresh observations."""
    restart = _draw_start(state.rng, start_high(market.num_steps, params))
    init = torch.tensor(params.initial_cash, dtype=ACC_DTYPE, device=state.device)
    new_state = EnvState(
        t=torch.where(mask, restart, state.t),
        cash=torch.where(mask, init, state.cash),
        shares=state.shares.masked_fill(mask[:, None], 0.0),
        value=torch.where(mask, init, state.value),
        peak=torch.where(mask, init, state.peak),
        step_count=state.step_count.masked_fill(mask, 0),
        sharpe_a=torch.where(mask, 0.0, state.sharpe_a),
        sharpe_b=torch.where(mask, 0.0, state.sharpe_b),
        rng=state.rng,
    )
    idx = mask.nonzero().squeeze(1)
    obs[idx] = fresh_obs(market, new_state.t.index_select(0, idx))
    return new_state, obs


def reset_where(
    market: MarketData, params: EnvParams, state: EnvState, mask: Tensor, obs: Tensor | None = None
) -> tuple[EnvState, Tensor]:
    """Restart only the envs where ``mask`` (N,) is true, at fresh random start bars.

    Used by the Isaac Gym surface's ``reset_idx``. Pure: returns ``(state, obs)``, where ``obs`` is
    a copy of the given current observations (computed from ``state`` when ``None``) with the
    restarted rows replaced by their fresh observations.
    """
    mask = torch.as_tensor(mask, dtype=torch.bool, device=state.device)
    if mask.shape != state.t.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected ({state.num_envs},)")
    # Advance only the restarted envs' generators, so each restart gets a new draw.
    rng = torch.where(mask, _lcg_next(state.rng), state.rng)
    state = EnvState(**{**{f.name: getattr(state, f.name) for f in fields(state)}, "rng": rng})
    base = obs.clone() if obs is not None else observe(market, state)
    return _restart(market, params, state, mask, base)


def observe(market: MarketData, state: EnvState) -> Tensor:
    """The observation of ``state`` (the one ``reset``/``step`` returned with it)."""
    pos_value = state.shares * market.close.index_select(0, state.t).to(state.shares.dtype)
    return build_obs(market, state.t, state.cash, pos_value, state.value)


def _action_tensor(action: Tensor, num_envs: int, num_assets: int, device: torch.device) -> Tensor:
    """The action as a float tensor on ``device`` of shape ``(N, A)``, or :class:`ActionError`."""
    if not isinstance(action, Tensor):
        try:
            action = torch.as_tensor(action, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ActionError(f"action is not numeric: {exc}") from None
    if tuple(action.shape) != (num_envs, num_assets):
        raise ActionError(f"action has shape {tuple(action.shape)}, expected ({num_envs}, {num_assets})")
    if not action.is_floating_point():
        action = action.to(torch.float32)
    return action.to(device)


def check_action(
    action: Tensor, num_envs: int, num_assets: int, device: torch.device, dtype: torch.dtype | None = None
) -> Tensor:
    """The action as a float tensor on ``device`` (cast to ``dtype`` if given), or
    :class:`ActionError` (shape, NaN/inf). Checked after the cast, so a float64 entry beyond the
    range of a float32 step is an error here rather than an inf inside the step."""
    action = _action_tensor(action, num_envs, num_assets, device)
    if dtype is not None:
        action = action.to(dtype)
    # One host sync per step: the price of a clear error instead of silently corrupted state.
    # A sum is NaN/inf whenever an entry is (and ~100x cheaper than isfinite().all()); only if it
    # is not finite do we look closer, since huge finite entries can overflow the sum.
    if not math.isfinite(float(action.sum())) and not bool(torch.isfinite(action).all()):
        raise ActionError("action contains NaN or inf")
    return action


def _rowsum(x: Tensor) -> Tensor:
    """Row sums of a float32 ``(N, A)`` tensor, accumulated in float64."""
    return x.sum(1, dtype=ACC_DTYPE)


def _trade(
    params: EnvParams,
    shares: Tensor,
    cash: Tensor,
    action: Tensor,
    px_open: Tensor,
    px_close: Tensor,
    mode: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The fill and the mark of one step (the accounting shared by :func:`step` and
    :func:`backtest_step`): ``(traded (N, A), new_shares, new_cash, traded_notional, pos_value,
    new_value)``. ``px_open`` / ``px_close`` are the fill and mark bars' prices in the asset dtype;
    ``px_close`` must be a fresh tensor (it becomes ``pos_value`` in place). ``mode`` (N, A) uint8:
    the fill bar's :mod:`envs.tradability` modes (``None``: every asset tradable)."""
    adt = params.asset_dtype
    slip = params.slippage_bps * 1e-4
    rate = params.cost_rate
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
        sell_at_open = torch.sub(buy, diff, out=held).mul_(px_open)
    else:
        diff = action.to(adt).clamp(-1.0, 1.0).mul_(params.max_shares).round_()
        if mode is not None:  # HOLD: no order; EXIT: sell everything held
            diff = torch.where(mode == TRADE, diff, torch.where(mode == EXIT, -shares, 0.0))
        buy = diff.clamp(min=0.0)
        if params.max_weight < 1.0:
            # Post-trade holdings at most floor(max_weight * value at the fill bar's open / open)
            # whole shares; a position already above the cap is not sold down (only buys are cut).
            value_open = cash + _rowsum(shares * px_open)
            cap = (params.max_weight * value_open).to(adt).unsqueeze(1).div(px_open).floor_()
            buy = torch.minimum(buy, cap.sub_(shares).clamp_(min=0.0))
        sell = torch.minimum((-diff).clamp_(min=0.0), shares)
        sell_at_open = sell * px_open
    sell_notional = _rowsum(sell_at_open) * (1.0 - slip)
    buy_notional = _rowsum(buy * px_open) * (1.0 + slip)
    available = cash + sell_notional * (1.0 - rate)
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
        buy_notional = _rowsum(buy * px_open) * (1.0 + slip)
        needed = buy_notional * (1.0 + rate)
        traded = buy - sell
    new_shares = shares + traded
    # The clamp only absorbs rounding (needed <= available by construction).
    new_cash = (available - needed).clamp_(min=0.0)
    traded_notional = sell_notional + buy_notional
    pos_value = px_close.mul_(new_shares)
    new_value = new_cash + _rowsum(pos_value)
    return traded, new_shares, new_cash, traded_notional, pos_value, new_value


class StepCore(NamedTuple):
    """What :func:`_step_core` computes (pre-reset; the first nine are the next :class:`EnvState`'s
    fields, named alike). ``envs.backends.native.NativeStep`` has the same fields up to ``traded``."""

    t: Tensor  # (N,) the mark bar t + k: the next decision bar
    cash: Tensor
    shares: Tensor
    value: Tensor
    peak: Tensor
    step_count: Tensor
    sharpe_a: Tensor
    sharpe_b: Tensor
    rng: Tensor  # advanced once
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


class StepResult(NamedTuple):
    """What :func:`step` returns; unpacks as ``(state, obs, reward, terminated, truncated, info)``."""

    state: EnvState
    obs: Tensor  # (N, obs_dim) float32, after any autoreset
    reward: Tensor  # (N,) float32
    terminated: Tensor  # (N,) bool
    truncated: Tensor  # (N,) bool
    info: dict[str, Tensor]  # see the module docstring


def _step_core(
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
    action: Tensor,
    open_all: Tensor,
    close_all: Tensor,
    modes_all: Tensor | None = None,
) -> StepCore:
    """Everything of :func:`step` but the action check, the observation and the autoreset, as one
    pure function of tensors (``last_bar``: :func:`last_decision_bar` of the market), so that it can
    be compiled (:mod:`envs.backends.compiled`)."""
    k = params.decision_interval
    t_mark = t + k
    adt = params.asset_dtype  # .to(adt) is a no-op for float32 market data and "float32"
    px_open = open_all.index_select(0, t + 1).to(adt)  # (N, A) fill bar
    # A fresh tensor either way (gather, or gather + cast): becomes the positions' value in place.
    px_close = close_all.index_select(0, t_mark).to(adt)  # (N, A) mark bar
    mode = None if modes_all is None else modes_all.index_select(0, t + 1)
    traded, new_shares, new_cash, traded_notional, pos_value, new_value = _trade(
        params, shares, cash, action, px_open, px_close, mode
    )
    cost = params.cost_rate * traded_notional

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
        slip = params.slippage_bps * 1e-4
        fill_price = px_open * (1.0 + slip * torch.sign(traded))  # per-asset dtype
        asset_cost = params.cost_rate * traded.abs() * fill_price
    return StepCore(
        t_mark, new_cash, new_shares, new_value, new_peak, step_count, new_a, new_b, _lcg_next(rng),
        reward, terminated, truncated, done, cost, traded_notional, traded, pos_value, fill_price, asset_cost,
    )  # fmt: skip


def _core(params: EnvParams, compiled: bool) -> Callable[..., StepCore]:
    """The step core for ``params``: eager, or through ``torch.compile`` (once per process)."""
    if not compiled:
        return functools.partial(_step_core, params)
    return compiled_partial(_step_core, params, "envs.trading.step")


def step(
    market: MarketData,
    params: EnvParams,
    state: EnvState,
    action: Tensor,
    *,
    validate: bool = True,
    compiled: bool = False,
    compile_fallback: bool = True,
) -> StepResult:
    """One decision for every env. Pure: ``state`` is not modified.

    Returns a :class:`StepResult` ``(state, obs, reward, terminated, truncated, info)``; see the
    module docstring. ``validate=False`` skips the action checks (only for actions known to be
    finite and shaped ``(N, A)``, e.g. a policy's output inside a benchmark). ``compiled=True`` takes
    the fast path (:func:`step_backend` says which): on CPU the native C kernel of
    :mod:`envs.backends.native` (accounting and observation fused per env; it checks the actions'
    finiteness itself), else the accounting through ``torch.compile`` (:mod:`envs.backends.compiled`).
    Both equal eager to float rounding and fall back (native to ``torch.compile``, that to eager)
    when they cannot run; ``compile_fallback=False`` makes a step the native kernel cannot take run
    eagerly instead (small batches, where compiling does not pay).
    """
    num_envs, num_assets = state.shares.shape
    last_bar = last_decision_bar(market.num_steps, params)
    fn = native.kernel(market, params, state) if compiled else None
    if fn is None and not compile_fallback:
        compiled = False
    core: StepCore | native.NativeStep
    if fn is not None:
        # The kernel checks the actions' finiteness itself (and raises below), so no extra pass.
        action = _action_tensor(action, num_envs, num_assets, state.device)
        core = native.step(fn, market, params, state, action.to(torch.float32).contiguous(), last_bar)
        if core.status == native.BAD_ACTION:
            raise ActionError("action contains NaN or inf")
        if core.status == native.BAD_BAR:
            raise DataError(f"state.t has decision bars outside [0, {last_bar}]")
        final_obs, any_done = core.obs, core.status > 0
    else:
        if validate:
            action = check_action(action, num_envs, num_assets, state.device, params.asset_dtype)
        core = _core(params, compiled)(
            last_bar,
            state.t,
            state.cash,
            # (Compiled: inductor rejects a strided out= that a transposed holdings layout would
            # give, and that failure would switch compiling off for the process.)
            state.shares.contiguous() if compiled else state.shares,
            state.value,
            state.peak,
            state.step_count,
            state.sharpe_a,
            state.sharpe_b,
            state.rng,
            action,
            market.open,
            market.close,
            None if market.all_tradable else fill_modes(market),
        )
        final_obs = build_obs(market, core.t, core.cash, core.pos_value, core.value)
        any_done = None
    info: dict[str, Tensor] = {
        "cost": core.cost,
        "traded_notional": core.traded_notional,
        "value": core.value,
        "final_value": core.value,
        "shares_traded": core.traded,
        "step_count": core.step_count,
        "bar_t": state.t,
    }
    if params.trade_info:  # (never native: see native.supports)
        info["fill_price"], info["asset_cost"] = core.fill_price, core.asset_cost
    info["final_obs"] = final_obs
    new_state = EnvState(
        t=core.t,
        cash=core.cash,
        shares=core.shares,
        value=core.value,
        peak=core.peak,
        step_count=core.step_count,
        sharpe_a=core.sharpe_a,
        sharpe_b=core.sharpe_b,
        rng=core.rng,
    )
    # Host branch: autoreset work (and a second observation) only on steps where some env is done.
    if any_done if any_done is not None else bool(core.done.any()):
        new_state, obs = _restart(market, params, new_state, core.done, final_obs.clone())
    else:
        obs = final_obs
    info["t"] = new_state.t
    return StepResult(new_state, obs, core.reward, core.terminated, core.truncated, info)


def step_backend(
    market: MarketData, params: EnvParams, state: EnvState, compiled: bool, compile_fallback: bool = True
) -> str:
    """Which implementation :func:`step` runs for these arguments: ``"eager"``, ``"native"`` or
    ``"torch.compile"`` (``"eager"`` too once compiling failed in this process)."""
    if not compiled:
        return "eager"
    if native.kernel(market, params, state) is not None:
        return "native"
    if not compile_fallback:
        return "eager"
    return "torch.compile" if _core(params, True).active else "eager"


def asset_prices(market: MarketData, params: EnvParams) -> tuple[Tensor, Tensor]:
    """``(open, close)`` ``(T, A)`` in ``params``'s asset dtype, for :func:`backtest_step` (cast
    once per run instead of one cast per price row and step; no copy when the dtypes agree)."""
    adt = params.asset_dtype
    return market.open.to(adt), market.close.to(adt)


class BacktestCore(NamedTuple):
    """What :func:`_backtest_core` computes (pre-reset), named as in :class:`StepCore`."""

    t: Tensor  # (N,) the mark bar
    cash: Tensor
    shares: Tensor
    value: Tensor
    traded_notional: Tensor
    traded: Tensor
    pos_value: Tensor
    terminated: Tensor
    done: Tensor  # terminated, or out of data


class BacktestStepResult(NamedTuple):
    """What :func:`backtest_step` returns."""

    state: EnvState
    obs: Tensor
    terminated: Tensor
    value: Tensor
    traded_notional: Tensor
    shares_traded: Tensor


def _backtest_core(
    params: EnvParams,
    last_bar: int,
    t: Tensor,
    cash: Tensor,
    shares: Tensor,
    action: Tensor,
    open_all: Tensor,
    close_all: Tensor,
    modes_all: Tensor | None = None,
) -> BacktestCore:
    """The fill, mark and termination of :func:`backtest_step` as a pure function of tensors."""
    t_fill = t + 1
    t_mark = t_fill if params.decision_interval == 1 else t + params.decision_interval
    # index_select always gathers into a fresh tensor, as _trade needs for the mark prices.
    mode = None if modes_all is None else modes_all.index_select(0, t_fill)
    traded, new_shares, new_cash, traded_notional, pos_value, new_value = _trade(
        params,
        shares,
        cash,
        action,
        open_all.index_select(0, t_fill),
        close_all.index_select(0, t_mark),
        mode,
    )
    terminated = new_value < params.bust_frac * params.initial_cash
    # A restarted env can run out of data before the run ends: truncated (and restarted) as in step.
    done = terminated | (t_mark > last_bar)
    return BacktestCore(
        t_mark, new_cash, new_shares, new_value, traded_notional, traded, pos_value, terminated, done
    )


def backtest_step(
    market: MarketData,
    params: EnvParams,
    state: EnvState,
    action: Tensor,
    prices: tuple[Tensor, Tensor],
) -> BacktestStepResult:
    """:func:`step` for backtests, with only what a backtest uses: the same fill and mark (the same
    accounting function), observation and termination, without the reward and its state.

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
    core = _backtest_core(
        params,
        last_decision_bar(market.num_steps, params),
        state.t,
        state.cash,
        state.shares,
        action,
        *prices,
        None if market.all_tradable else fill_modes(market),
    )
    obs = build_obs(market, core.t, core.cash, core.pos_value, core.value)
    new_state = _advance(state, core.t, core.cash, core.shares, core.value)
    if bool(core.done.any()):
        new_state, obs = _restart(market, params, new_state, core.done, obs.clone())
    return BacktestStepResult(new_state, obs, core.terminated, core.value, core.traded_notional, core.traded)


def _advance(state: EnvState, t: Tensor, cash: Tensor, shares: Tensor, value: Tensor) -> EnvState:
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
        rng=_lcg_next(state.rng),
    )
