"""The trading env's constants (:class:`EnvParams`) and state (:class:`EnvState`).

Below :mod:`envs.trading` (the rules), :mod:`envs.core` (the arithmetic) and :mod:`envs.fast_step` (the
kernel choice), which all read them, so none of those imports another to name them. ``EnvParams`` holds
the defaults of the ``[env]`` config section, each field described once, in the string under it
(``app.settings_docs``); the semantics: :mod:`envs.trading`'s docstring. Torch is imported only where a
tensor is made, so the config (``app.config``) reads these settings without loading it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

from data.errors import ConfigError
from envs.fee_schedule import SEC_FEE_SCHEDULE, TAF_SCHEDULE, check_schedule, rates_on_date

if TYPE_CHECKING:  # the state's tensor types only: the settings load without torch (app.config)
    import torch
    from torch import Tensor

#: The values of every compile / fast-path key (``[env] fast_step``, ``[agent] compile``,
#: ``[backtest] compile``): ``envs.kernels.compiled`` and ``agents.args`` check against it.
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
ActionMode = Literal["weights", "shares"]
RewardMode = Literal["log_return", "return", "diff_sharpe"]
FeeProfile = Literal["alpaca", "flat"]
SpreadMode = Literal["estimate", "fixed"]
UnfilledMode = Literal["drop", "work"]
Precision = Literal["float32", "float64"]


class EnvParamsError(ConfigError, ValueError):
    """Invalid environment parameters (a ``ValueError`` too, so callers may catch either)."""


@dataclass(frozen=True)
class EnvParams:
    """Constants of the trading environment (the semantics: :mod:`envs.trading`'s docstring)."""

    initial_cash: float = 1e6
    """starting cash of every episode, in $"""
    broker: FeeProfile = "alpaca"
    """fee profile: alpaca (no commission; sells pay the SEC and FINRA TAF fees) or flat (cost_rate)"""
    cost_rate: float = 0.002
    """broker flat: commission on every fill's notional (alpaca: unused)"""
    sec_fee_schedule: tuple[tuple[str, float], ...] = SEC_FEE_SCHEDULE
    """broker alpaca: the SEC Section 31 fee per $ of sale proceeds, as rows ["YYYY-MM-DD", rate]: each
    rate holds from its date to the next row's, by the fill's session date (docs/env.md "Fees")"""
    taf_schedule: tuple[tuple[str, float, float], ...] = TAF_SCHEDULE
    """broker alpaca: FINRA's Trading Activity Fee, as rows ["YYYY-MM-DD", $ per share sold, cap per
    trade in $] (a trade: one asset's sell at one fill), by the fill's session date"""
    round_fees: bool = True
    """broker alpaca: round each regulatory fee of each order (one asset's sell at one fill) up to the
    cent, as Alpaca does (a small sale pays at least a cent of TAF)"""
    fee_scale: float = 1.0
    """multiplies the regulatory fees (the cost sensitivity's multiples; 1 in the config)"""
    slippage_bps: float = 1.0
    """buys fill at open*(1+s), sells at open*(1-s), s = bps/1e4"""
    decision_interval: int = 15
    """bars between decisions (k)"""
    episode_len: int = 64
    """decisions per episode before truncation"""
    action_mode: ActionMode = "weights"
    """weights: target weights; shares: delta shares"""
    max_shares: float = 100.0
    """shares mode: the |delta| per asset per decision at |a| = 1"""
    reward: RewardMode = "log_return"
    """log_return, return or diff_sharpe (the differential Sharpe ratio)"""
    drawdown_penalty: float = 0.0
    """reward -= penalty * current drawdown fraction"""
    # Risk limits (docs/env.md "Risk limits"; defaults by measurement there).
    max_weight: float = 1.0
    """per-asset cap on the position weight at the fill; the excess stays in cash"""
    turnover_penalty: float = 0.0
    """reward -= penalty * traded notional / value at the decision bar"""
    reward_scale: float = 100.0
    """multiplies the reward"""
    sharpe_eta: float = 0.01
    """diff_sharpe: EMA rate of the return moments"""
    bust_frac: float = 0.1
    """an episode ends when value < bust_frac * initial_cash"""
    # Execution (docs/env.md "Execution"; all four 0 restores the frictionless fill of slippage_bps).
    spread: SpreadMode = "estimate"
    """half-spread per fill: estimate (per asset and time of day from the bars, MarketData.half_spread,
    at least spread_bps) or fixed (spread_bps on every fill)"""
    spread_bps: float = 1.0
    """half-spread in bps of the fill bar's open: every fill's (fixed), the estimate's floor (estimate)"""
    spread_scale: float = 1.0
    """multiplies the half-spread of either mode (the cost sensitivity's multiples; 1 in the config)"""
    max_participation: float = 0.025
    """a fill takes at most this share of the fill bar's volume expected at the decision bar (0: no cap)"""
    unfilled: UnfilledMode = "drop"
    """the part of an order the volume cap cut: drop (the next decision sees the position) or work (it
    keeps filling on the following bars, each capped by its expected volume, until the next decision)"""
    impact_coef: float = 0.5
    """square-root impact: impact_coef * daily_vol * sqrt(shares / adv) of the fill price"""
    impact_decay: float = 0.0115
    """share of a worked order's impact memory lost per bar: same-direction fills pay the square-root
    law on the order accumulated so far (0: never forgotten; 1: each fill on its own)"""
    min_order_notional: float = 1.0
    """orders under this many $ are not placed"""
    trade_info: bool = False
    """add per-asset fill_price / asset_cost to info (backtests)"""
    precision: Precision = "float32"
    """dtype of per-asset quantities: shares, orders (accounting is always float64)"""

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
        if self.broker not in ("alpaca", "flat"):
            raise bad("broker", "must be 'alpaca' or 'flat'")
        if not 0 <= self.cost_rate < 1:
            raise bad("cost_rate", "must be in [0, 1)")
        for name, width in (("sec_fee_schedule", 1), ("taf_schedule", 2)):
            try:  # a config's or a manifest's lists become tuples: the params stay hashable
                object.__setattr__(self, name, check_schedule(name, getattr(self, name), width))
            except ValueError as err:
                raise EnvParamsError(f"EnvParams.{err}") from None
        if any(row[1] >= 1 for row in self.sec_fee_schedule):
            raise bad("sec_fee_schedule", "each rate must be in [0, 1)")
        if not isinstance(self.round_fees, bool):
            raise bad("round_fees", "must be a bool")
        if self.fee_scale < 0:
            raise bad("fee_scale", "must be >= 0")
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
        if self.spread not in ("estimate", "fixed"):
            raise bad("spread", "must be 'estimate' or 'fixed'")
        if not 0 <= self.spread_bps < 10_000:
            raise bad("spread_bps", "must be in [0, 10000)")
        if self.spread_scale < 0:
            raise bad("spread_scale", "must be >= 0")
        if not 0 <= self.max_participation <= 1:
            raise bad("max_participation", "must be in [0, 1] (0: no volume cap)")
        if self.unfilled not in ("drop", "work"):
            raise bad("unfilled", "must be 'drop' or 'work'")
        if self.impact_coef < 0:
            raise bad("impact_coef", "must be >= 0")
        if not 0 <= self.impact_decay <= 1:
            raise bad("impact_decay", "must be in [0, 1]")
        if self.min_order_notional < 0:
            raise bad("min_order_notional", "must be >= 0")
        if not isinstance(self.trade_info, bool):
            raise bad("trade_info", "must be a bool")
        if self.precision not in ("float32", "float64"):
            raise bad("precision", "must be 'float32' or 'float64'")

    @property
    def execution(self) -> bool:
        """Whether fills go through the execution model (spread, volume cap, impact, minimum order)."""
        return (
            self.spread_bps > 0
            or self.spread == "estimate"
            or self.max_participation > 0
            or self.impact_coef > 0
            or self.min_order_notional > 0
        )

    @property
    def impact_memory(self) -> float:
        """Share of the order's accumulated size still remembered at the next decision:
        ``(1 - impact_decay) ** decision_interval`` (0 without impact)."""
        return (1.0 - self.impact_decay) ** self.decision_interval if self.impact_coef > 0 else 0.0

    @property
    def buy_fee_rate(self) -> float:
        """Fee per $ of a buy's notional at its fill price: the flat commission, or 0 at Alpaca."""
        return self.cost_rate if self.broker == "flat" else 0.0

    @functools.cached_property
    def sell_rates(self) -> tuple[float, float, float]:
        """A sell's fee rates where no date is at hand: ``(per $ of proceeds, per share sold, the
        per-share fee's cap per trade)``, the flat commission, or at Alpaca the schedules' last rows
        (the rates in force from the last date on) times ``fee_scale``. Fills read the rates of their
        session date instead (``envs.fees.fee_table``)."""
        return rates_on_date(self, "9999-12-31")

    @property
    def sell_fee_rate(self) -> float:
        """Fee per $ of a sell's proceeds of :attr:`sell_rates` (the commission, or the SEC fee)."""
        return self.sell_rates[0]

    @property
    def rounds_fees(self) -> bool:
        """Whether each regulatory fee of each order is rounded up to the cent (Alpaca's rounding)."""
        return self.round_fees and self.broker == "alpaca"

    @property
    def asset_dtype(self) -> torch.dtype:
        """dtype of the per-asset state and orders (``shares``)."""
        import torch  # here, not at module top: the settings (this class) load without torch

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
    order: Tensor  # (N, A) params.asset_dtype: signed shares of the order being worked (impact memory)

    @property
    def num_envs(self) -> int:
        return int(self.t.shape[0])

    @property
    def device(self) -> torch.device:
        return self.t.device
