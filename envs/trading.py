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
  ``open * (1 - slippage)`` (``slippage = slippage_bps / 1e4``), each paying the broker's fees
  (``EnvParams.broker``: at ``"alpaca"``, none on a buy, and on a sell the SEC fee rate of its
  proceeds plus the FINRA TAF per share, at most its cap per asset and fill, at the rates in force on
  the fill bar's session date (``sec_fee_schedule``, ``taf_schedule``: :mod:`envs.fee_schedule`),
  each rounded up to the cent with ``round_fees``; at ``"flat"``, ``cost_rate`` of the notional on
  both sides). Sells execute first and their proceeds
  (net of fees) fund the buys;
  if the buys (plus their cost) need more cash than is available, every buy of that env is scaled
  by the same factor so cash never goes negative (in ``"shares"`` mode the scaled buys are floored
  to whole shares). Holdings never go negative (long-only). With the execution model
  (``EnvParams.execution``, on by default; docs/env.md "Execution", :mod:`envs.execution`) the price
  also pays a half-spread and a square-root impact of the order's size, each order fills at most
  ``max_participation`` of the fill bar's volume, and orders under ``min_order_notional`` are not
  placed.
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

Where the code lives, in the gymnax manner: :func:`step_env` is the rules' step (no autoreset),
:func:`autoreset` the select on ``done``, and :func:`step` calls the step of the kernel that
:mod:`envs.fast_step` chooses, then the autoreset. This module imports its helpers, never the other
way round: :mod:`envs.core` (the arithmetic as pure tensor functions), :mod:`envs.fast_step` (eager,
the native C kernel of :mod:`envs.kernels.native`, or ``torch.compile``) and
:mod:`envs.observation` (the observation layout and its writers). The backtests' leaner step:
:mod:`envs.backtest_step`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import fields
from typing import NamedTuple

import torch
from torch import Tensor

from data.errors import DataError, PodracerError
from data.market import MarketData
from envs.core import ACC_DTYPE, StepCore, lcg_next, step_core
from envs.execution import execution_tables
from envs.fast_step import choose
from envs.fees import fee_table
from envs.kernels import native
from envs.observation import build_obs, fresh_obs

# The env's constants and state live below this module (envs.core and envs.fast_step read them too);
# they stay importable from here, the env's public module.
from envs.params import EnvParams, EnvState
from envs.tradability import fill_modes

# Start bars are drawn from 31 bits of each env's generator state (envs.core.lcg_next).
_DRAW_MASK = (1 << 31) - 1


class ActionError(PodracerError, ValueError):
    """An action of the wrong shape or with NaN/inf entries; raised before any state changes."""


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


def _draw_start(key: Tensor, high: int) -> Tensor:
    """Start bar in ``[0, high]`` from an (already advanced) generator state."""
    return ((key >> 33) & _DRAW_MASK) % (high + 1)


# --- reset -------------------------------------------------------------------------------------
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
        order=torch.zeros(num_envs, market.num_assets, dtype=params.asset_dtype, device=device),
    )
    return state, fresh_obs(market, t)


def restart(
    market: MarketData, params: EnvParams, state: EnvState, mask: Tensor, obs: Tensor
) -> tuple[EnvState, Tensor]:
    """Envs in ``mask`` start a fresh episode at the start bar drawn from their (already advanced)
    generator state; their rows of ``obs`` (modified in place) become fresh observations."""
    start = _draw_start(state.rng, start_high(market.num_steps, params))
    init = torch.tensor(params.initial_cash, dtype=ACC_DTYPE, device=state.device)
    new_state = EnvState(
        t=torch.where(mask, start, state.t),
        cash=torch.where(mask, init, state.cash),
        shares=state.shares.masked_fill(mask[:, None], 0.0),
        value=torch.where(mask, init, state.value),
        peak=torch.where(mask, init, state.peak),
        step_count=state.step_count.masked_fill(mask, 0),
        sharpe_a=torch.where(mask, 0.0, state.sharpe_a),
        sharpe_b=torch.where(mask, 0.0, state.sharpe_b),
        rng=state.rng,
        order=state.order.masked_fill(mask[:, None], 0.0),
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
    rng = torch.where(mask, lcg_next(state.rng), state.rng)
    state = EnvState(**{**{f.name: getattr(state, f.name) for f in fields(state)}, "rng": rng})
    base = obs.clone() if obs is not None else observe(market, state)
    return restart(market, params, state, mask, base)


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
    # A sum is NaN/inf whenever an entry is (and far cheaper than isfinite().all()); only if it is
    # not finite do we look closer, since huge finite entries can overflow the sum.
    if not math.isfinite(float(action.sum())) and not bool(torch.isfinite(action).all()):
        raise ActionError("action contains NaN or inf")
    return action


# --- step: the rules' step, the kernel's, the autoreset -----------------------------------------
class Transition(NamedTuple):
    """What :func:`step_env` returns: one step of the rules, before any autoreset."""

    state: EnvState  # after the step; envs whose episode ended are not restarted
    obs: Tensor  # (N, obs_dim) float32: the observation of ``state`` (``info["final_obs"]`` of step)
    reward: Tensor  # (N,) float32
    terminated: Tensor  # (N,) bool
    truncated: Tensor  # (N,) bool
    done: Tensor  # (N,) bool: terminated | truncated
    info: dict[str, Tensor]  # step's info less "final_obs" and "t"
    any_done: bool | None = None  # whether some env is done, when known without a device sync


class StepResult(NamedTuple):
    """What :func:`step` returns; unpacks as ``(state, obs, reward, terminated, truncated, info)``."""

    state: EnvState
    obs: Tensor  # (N, obs_dim) float32, after any autoreset
    reward: Tensor  # (N,) float32
    terminated: Tensor  # (N,) bool
    truncated: Tensor  # (N,) bool
    info: dict[str, Tensor]  # see the module docstring


def _transition(
    core: StepCore | native.NativeStep, obs: Tensor, bar_t: Tensor, params: EnvParams, any_done: bool | None
) -> Transition:
    """A :class:`Transition` from a step core's outputs (eager, compiled or native: named alike)."""
    info: dict[str, Tensor] = {
        "cost": core.cost,
        "traded_notional": core.traded_notional,
        "value": core.value,
        "final_value": core.value,
        "shares_traded": core.traded,
        "step_count": core.step_count,
        "bar_t": bar_t,
    }
    if params.trade_info:  # (never native: see native.supports)
        info["fill_price"], info["asset_cost"] = core.fill_price, core.asset_cost
    state = EnvState(*core[:10])  # a core's first ten fields are EnvState's, in order
    return Transition(state, obs, core.reward, core.terminated, core.truncated, core.done, info, any_done)


def step_env(
    market: MarketData,
    params: EnvParams,
    state: EnvState,
    action: Tensor,
    *,
    validate: bool = True,
    core: Callable[..., StepCore] | None = None,
) -> Transition:
    """The rules' step for every env: fill, mark, reward, termination and the observation, with no
    autoreset (envs whose episode ended stay where it ended). Pure: ``state`` is not modified.

    ``validate=False`` skips the action checks (only for actions known to be finite and shaped
    ``(N, A)``). ``core`` runs the accounting: ``None`` is :func:`envs.core.step_core` eagerly;
    :func:`step` hands it the compiled one (:mod:`envs.fast_step`).
    """
    num_envs, num_assets = state.shares.shape
    if validate:
        action = check_action(action, num_envs, num_assets, state.device, params.asset_dtype)
    out = (functools.partial(step_core, params) if core is None else core)(
        last_decision_bar(market.num_steps, params),
        state.t,
        state.cash,
        # (Compiled: inductor rejects a strided out= that a transposed holdings layout would give,
        # and that failure would switch compiling off for the process.)
        state.shares if core is None else state.shares.contiguous(),
        state.value,
        state.peak,
        state.step_count,
        state.sharpe_a,
        state.sharpe_b,
        state.rng,
        state.order if core is None else state.order.contiguous(),
        action,
        market.open,
        market.close,
        None if market.all_tradable else fill_modes(market),
        *execution_tables(market, params),
        fees_all=fee_table(market, params),
    )
    obs = build_obs(market, out.t, out.cash, out.pos_value, out.value)
    return _transition(out, obs, state.t, params, None)


def _native_step_env(
    kernel: Callable[..., int], market: MarketData, params: EnvParams, state: EnvState, action: Tensor
) -> Transition:
    """:func:`step_env` in one call of the native C kernel (it checks the actions' finiteness
    itself, so there is no extra pass for it)."""
    num_envs, num_assets = state.shares.shape
    last_bar = last_decision_bar(market.num_steps, params)
    action = _action_tensor(action, num_envs, num_assets, state.device)
    out = native.step(kernel, market, params, state, action.to(torch.float32).contiguous(), last_bar)
    if out.status == native.BAD_ACTION:
        raise ActionError("action contains NaN or inf")
    if out.status == native.BAD_BAR:
        raise DataError(f"state.t has decision bars outside [0, {last_bar}]")
    return _transition(out, out.obs, state.t, params, out.status > 0)


def autoreset(market: MarketData, params: EnvParams, out: Transition) -> StepResult:
    """Done envs restart at a fresh start bar in the same step; the pre-reset observation goes to
    ``info["final_obs"]``."""
    info = out.info
    info["final_obs"] = out.obs
    # Host branch: autoreset work (and a second observation) only on steps where some env is done.
    if out.any_done if out.any_done is not None else bool(out.done.any()):
        state, obs = restart(market, params, out.state, out.done, out.obs.clone())
    else:
        state, obs = out.state, out.obs
    info["t"] = state.t
    return StepResult(state, obs, out.reward, out.terminated, out.truncated, info)


def step(
    market: MarketData,
    params: EnvParams,
    state: EnvState,
    action: Tensor,
    *,
    validate: bool = True,
    fast: bool = False,
    fallback_to_compile: bool = True,
) -> StepResult:
    """One decision for every env: :func:`step_env` on the chosen kernel, then :func:`autoreset`.
    Pure: ``state`` is not modified.

    Returns a :class:`StepResult` ``(state, obs, reward, terminated, truncated, info)``; see the
    module docstring. ``validate=False`` skips the action checks (only for actions known to be
    finite and shaped ``(N, A)``, e.g. a policy's output inside a benchmark). ``fast=True`` takes
    the fast path (:func:`envs.fast_step.choose` says which): on CPU the native C kernel of
    :mod:`envs.kernels.native` (accounting and observation fused per env; it checks the actions'
    finiteness itself), else the accounting through ``torch.compile`` (:mod:`envs.kernels.compiled`).
    Both equal eager to float rounding and fall back (native to ``torch.compile``, that to eager)
    when they cannot run; ``fallback_to_compile=False`` makes a step the native kernel cannot take
    run eagerly instead (small batches, where compiling does not pay).

    >>> import torch
    >>> from data.toy import toy_market
    >>> from envs import trading
    >>> market = toy_market(num_steps=200, num_assets=3, num_features=2)
    >>> params = trading.EnvParams(decision_interval=5, episode_len=10)
    >>> state, obs = trading.reset(market, params, num_envs=4)
    >>> obs.shape, obs.dtype
    (torch.Size([4, 14]), torch.float32)
    >>> action = torch.full((4, 3), 0.25)  # a quarter of the value in each asset, the rest cash
    >>> state, obs, reward, terminated, truncated, info = trading.step(market, params, state, action)
    >>> reward.shape, reward.dtype, terminated.dtype
    (torch.Size([4]), torch.float32, torch.bool)
    >>> bool((state.t == info["bar_t"] + 5).all()), bool((state.cash >= 0).all())
    (True, True)
    >>> bool((info["cost"] == 0).all())  # Alpaca (the default broker): a buy pays no commission
    True
    """
    kernel = choose(market, params, state, fast, fallback_to_compile)
    if kernel.native is not None:
        out = _native_step_env(kernel.native, market, params, state, action)
    else:
        out = step_env(market, params, state, action, validate=validate, core=kernel.core)
    return autoreset(market, params, out)
