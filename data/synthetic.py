"""Synthetic minute bars on the real XNAS calendar, with a planted, documented predictable component.

Model (per minute bar ``t`` of asset ``a``; all draws from one seeded ``numpy`` generator):

    r[t, a] = beta[a] * m[t] + load[a] * s[sector(a), t] + i[t, a]     (log return, close to close)

- ``m``: market factor, ``s``: sector factors (``num_sectors`` of them), both i.i.d. Gaussian noise;
- volatility regimes: each session is *calm* or *volatile* (a two-state Markov chain over sessions,
  volatile = 1.8x calm), scaling every component of that session;
- intraday U-shape: volatility and volume are higher near the open and the close;
- an overnight gap on the first bar of each session;
- ``i``: the idiosyncratic part, and **the planted signal**:

      i[t, a] = (phi / L) * (i[t-1, a] + ... + i[t-L, a]) + sigma[a] * eps[t, a],   phi = 0.7 * signal

  with ``L = 520`` bars (a session and a third). An asset that out-performed the others over its
  last ``L`` bars keeps drifting the same way: the expected return of the next ``k`` bars is about
  ``phi * k / L`` times the asset's idiosyncratic return over the last ``L`` bars. ``L`` matches no
  feature window (``data.features``: 1, 12, 14, 15, 26, 60, 390 bars) on purpose: the predictor is
  not handed to the agent as one feature; the longest, ``ret_390``, sees 390 of the 520 bars (about
  75% of the predictor's variance), so a policy has to learn which features carry the edge, and
  harvests less of it than the autocorrelation promises. The edge persists for hundreds of bars, so a
  policy deciding every 15 bars can harvest it net of 0.2% proportional costs (it changes its
  holdings slowly); the known-answer test in ``tests/test_data_synthetic.py`` checks that a simple
  causal top-k rule on ``ret_390`` beats equal-weight buy-and-hold net of costs at ``signal=1`` and
  does not at ``signal=0``. The daily lag-1 autocorrelation each level induces is in docs/data.md
  (``benchmarks/synthetic_autocorrelation.py``).
  With ``signal=0`` (``phi = 0``) the idiosyncratic returns are independent: no strategy can
  predict anything beyond the (unpredictable) regimes.

``phi`` must stay below 1 (a stationary process), so ``signal`` is limited to < 1.4 (phi < 0.98).

That is the default shape, ``minute_momentum``. ``shape`` plants one of two daily shapes instead
(``data.planted``: a 5-session reversal, ``daily_cross_section``, and an interaction no linear model of
the features can use, ``nonlinear``), drawn from the same shocks; ``target_ic`` states the level as
the planted predictor's realized daily rank IC (``data.planted_ic``) and sets the shape's strength
from a measured table (``data.planted_calibration``). At strength 0 every shape gives the same bars.
Everything is vectorized except the AR recursion (a running-sum loop over bars on ``(A,)`` vectors),
which keeps 100 tickers x 60 sessions at a few seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from data.align import Panel
from data.calendar import MINUTES_PER_SESSION, Grid, session_grid, sessions_window
from data.errors import DataError
from data.planted import DAILY_SHAPES, MINUTE_MOMENTUM, SHAPES, daily_drift, daily_predictor
from data.planted_calibration import MAX_TARGET_IC, strength_for_ic
from data.store import BarStore, WriteReport

BARS_PER_FULL_SESSION = MINUTES_PER_SESSION  # one-minute bars
# L above: bars of past idiosyncratic return that drive the planted drift. No feature window, and
# longer than every feature's reach (data.features.lookback: 391 bars), so no input is the predictor;
# a session and a third, so the edge lines up with neither the session nor the 15-bar decision grid.
MOMENTUM_LOOKBACK = 520
PHI_PER_SIGNAL = 0.7  # phi = PHI_PER_SIGNAL * signal
MAX_SIGNAL = 1.4  # phi = 0.98 at most: the AR process stays stationary


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of the synthetic market (all have documented defaults)."""

    num_tickers: int = 8
    """number of assets (tickers SYN000, SYN001, ...)"""
    num_sessions: int = 10
    """number of XNAS sessions (early closes have 210 bars instead of 390)"""
    seed: int = 0
    """seed of the one random generator: same seed, same bars, bit for bit"""
    signal: float = 1.0
    """strength of the planted edge: phi = 0.7 * signal for minute_momentum, kappa for the daily shapes
    (0 = pure noise)"""
    start: str = "2024-01-02"
    """first session on or after this date"""
    num_sectors: int = 5
    """sector factors; asset a belongs to sector a % num_sectors"""
    market_vol: float = 0.010
    """daily volatility of the market factor (calm regime)"""
    sector_vol: float = 0.006
    """daily volatility of each sector factor (calm regime)"""
    idio_vol: tuple[float, float] = (0.010, 0.025)
    """range of the assets' daily idiosyncratic volatility (calm regime)"""
    volatile_mult: float = 1.8
    """volatility multiplier of the volatile regime"""
    regime_switch: float = 0.2
    """probability of switching regime between sessions"""
    market_drift: float = 0.0002
    """daily drift of the market factor"""
    lookback: int = MOMENTUM_LOOKBACK
    """bars of past idiosyncratic return that drive the planted drift (``L``; benchmarks vary it)"""
    shape: str = MINUTE_MOMENTUM
    """the planted edge's shape: minute_momentum, daily_cross_section or nonlinear (data.planted)"""
    target_ic: float | None = None
    """the planted level as the planted predictor's daily rank IC; replaces signal (None: signal)"""

    def __post_init__(self) -> None:
        if self.num_tickers < 1 or self.num_sessions < 1:
            raise DataError("synthetic: need at least one ticker and one session")
        if not 0.0 <= self.signal < MAX_SIGNAL:
            raise DataError(f"synthetic: signal must be in [0, {MAX_SIGNAL}) (got {self.signal})")
        if self.shape not in SHAPES:
            raise DataError(f"synthetic: shape must be one of {', '.join(SHAPES)} (got {self.shape!r})")
        if self.target_ic is not None and not 0.0 <= self.target_ic <= MAX_TARGET_IC:
            raise DataError(f"synthetic: target_ic must be in [0, {MAX_TARGET_IC}] (got {self.target_ic})")
        if self.num_sectors < 1:
            raise DataError("synthetic: num_sectors must be >= 1")
        if self.lookback < 1:
            raise DataError(f"synthetic: lookback must be >= 1 bar (got {self.lookback})")

    @property
    def strength(self) -> float:
        """The shape's strength parameter: ``signal``, or the one that plants ``target_ic``
        (``data.planted_calibration``)."""
        if self.target_ic is None:
            return self.signal
        return strength_for_ic(self.shape, self.target_ic)


def tickers_for(num_tickers: int) -> tuple[str, ...]:
    return tuple(f"SYN{i:03d}" for i in range(num_tickers))


def planted_predictor(spec: SyntheticSpec) -> np.ndarray:
    """``(T, A)`` float64, what an oracle would trade at each bar; the same draws as
    :func:`generate`'s bars of ``spec``. ``minute_momentum``: the sum of the asset's last
    ``spec.lookback`` idiosyncratic returns, the bar included (what the planted signal reads: the
    next bar's expected idiosyncratic return is ``phi / lookback`` times it). The daily shapes: the
    direction of the session's drift, at a session's last bar the next session's
    (``data.planted.daily_predictor``)."""
    return predictor_of(spec, _draws(spec))


def predictor_of(spec: SyntheticSpec, draws: dict[str, Any]) -> np.ndarray:
    """:func:`planted_predictor` of ``spec`` from its :func:`_draws` (computed once by callers that
    need the draws too)."""
    if spec.shape in DAILY_SHAPES:
        return daily_predictor(draws["score"], draws["sid"], draws["idio"])
    idio_ret = draws["idio_ret"]
    total = np.cumsum(idio_ret, axis=0)
    lagged = np.zeros_like(total)
    lagged[spec.lookback :] = total[: -spec.lookback]
    return total - lagged


def _draws(spec: SyntheticSpec) -> dict[str, Any]:
    """The random draws of ``spec`` up to the idiosyncratic returns, in :func:`generate`'s order (its
    generator ``rng`` goes on from there)."""
    rng = np.random.default_rng(spec.seed)
    sessions = sessions_window(spec.start, spec.num_sessions)
    grid = session_grid(sessions, "1m")
    num_steps, num_assets = len(grid), spec.num_tickers
    sid = grid.session_id
    # Minute index inside the session (0..389; early closes stop at 209).
    first_of_session = np.r_[True, sid[1:] != sid[:-1]]
    minute = np.arange(num_steps) - np.maximum.accumulate(np.where(first_of_session, np.arange(num_steps), 0))
    x = (minute + 0.5) / BARS_PER_FULL_SESSION
    u_vol = 0.75 + 1.0 * (2 * x - 1) ** 2
    u_vol /= np.sqrt(np.mean(u_vol**2))  # keep the daily variance as specified
    u_volume = 0.5 + 2.0 * (2 * x - 1) ** 2

    # Regimes per session: a two-state Markov chain.
    regime = np.empty(spec.num_sessions)
    state = rng.random() < 0.3
    for s in range(spec.num_sessions):
        if s > 0 and rng.random() < spec.regime_switch:
            state = not state
        regime[s] = spec.volatile_mult if state else 1.0
    scale = regime[sid] * u_vol / np.sqrt(BARS_PER_FULL_SESSION)  # (T,)

    # Asset parameters.
    beta = rng.uniform(0.6, 1.4, num_assets)
    sector = np.arange(num_assets) % spec.num_sectors
    load = rng.uniform(0.3, 0.8, num_assets)
    idio = rng.uniform(*spec.idio_vol, num_assets)
    price0 = np.exp(rng.uniform(np.log(20.0), np.log(400.0), num_assets))
    volume0 = np.exp(rng.uniform(np.log(2e3), np.log(5e4), num_assets))

    market = spec.market_vol * scale * rng.standard_normal(num_steps)
    market += spec.market_drift / BARS_PER_FULL_SESSION
    sectors = spec.sector_vol * scale[:, None] * rng.standard_normal((num_steps, spec.num_sectors))
    eps = idio[None, :] * scale[:, None] * rng.standard_normal((num_steps, num_assets))
    score = None  # the daily shapes' scores (data.planted.daily_drift)
    if spec.shape in DAILY_SHAPES:
        idio_ret, score = daily_drift(eps, sid, idio, regime, spec.shape, spec.strength)
    else:
        idio_ret = _planted_momentum(eps, PHI_PER_SIGNAL * spec.strength, spec.lookback)
    del eps
    names = (
        "rng sessions grid num_steps num_assets sid first_of_session u_volume regime scale beta sector load"
    )
    names += " idio price0 volume0 market sectors idio_ret score"
    values = locals()
    return {name: values[name] for name in names.split()}


def generate(spec: SyntheticSpec) -> Panel:
    """Generate the bars of ``spec`` as a dense panel (host-side numpy, float64)."""
    d = _draws(spec)
    rng, sid, regime, u_volume, sessions = d["rng"], d["sid"], d["regime"], d["u_volume"], d["sessions"]
    grid, num_steps, num_assets, first_of_session = (
        d["grid"],
        d["num_steps"],
        d["num_assets"],
        d["first_of_session"],
    )
    beta, load, idio, price0, volume0 = d["beta"], d["load"], d["idio"], d["price0"], d["volume0"]
    market, sectors, sector, idio_ret, scale = (
        d["market"],
        d["sectors"],
        d["sector"],
        d["idio_ret"],
        d["scale"],
    )
    log_ret = beta[None, :] * market[:, None] + load[None, :] * sectors[:, sector] + idio_ret

    # Overnight gaps land on each session's first bar (not on the very first bar of the data).
    gap = np.zeros((num_steps, num_assets))
    session_starts = np.flatnonzero(first_of_session)[1:]
    gap[session_starts] = 0.004 * rng.standard_normal((len(session_starts), num_assets))
    log_ret = log_ret + gap

    close = price0[None, :] * np.exp(np.cumsum(log_ret, axis=0))
    prev_close = np.vstack([price0[None, :], close[:-1]])
    minute_sigma = idio[None, :] * scale[:, None]
    # The open sits next to the previous close (plus the overnight gap on a session's first bar).
    open_ = prev_close * np.exp(gap + 0.1 * minute_sigma * rng.standard_normal((num_steps, num_assets)))
    wick = 0.3 * minute_sigma
    high = np.maximum(open_, close) * np.exp(wick * np.abs(rng.standard_normal((num_steps, num_assets))))
    low = np.minimum(open_, close) * np.exp(-wick * np.abs(rng.standard_normal((num_steps, num_assets))))
    surprise = np.abs(log_ret) / np.maximum(minute_sigma, 1e-12)
    volume = (
        volume0[None, :]
        * u_volume[:, None]
        * np.sqrt(regime[sid])[:, None]
        * (0.6 + 0.4 * surprise)
        * np.exp(0.3 * rng.standard_normal((num_steps, num_assets)))
    )
    volume = np.maximum(np.round(volume), 1.0)
    return Panel(
        tickers=tickers_for(num_assets),
        grid=Grid(grid.timestamps, grid.session_id, grid.time_of_day, sessions),
        open=open_,
        high=high,
        low=low,
        close=close,
        volume=volume,
        gaps_filled=dict.fromkeys(tickers_for(num_assets), 0),
        interval="1m",
    )


def _planted_momentum(eps: np.ndarray, phi: float, lookback: int) -> np.ndarray:
    """``i[t] = (phi / L) * sum(i[t-L .. t-1]) + eps[t]`` (the planted signal; phi=0 returns eps)."""
    if phi == 0.0:
        return eps.copy()
    out = np.empty_like(eps)
    running = np.zeros(eps.shape[1])
    coef = phi / lookback
    for t in range(eps.shape[0]):
        value = coef * running + eps[t]
        out[t] = value
        running += value
        if t >= lookback:
            running -= out[t - lookback]
    return out


def to_frame(panel: Panel) -> pd.DataFrame:
    """Long bar-schema frame (timestamp, ticker, open, high, low, close, volume) of a panel."""
    num_steps, num_assets = panel.close.shape
    ts = pd.DatetimeIndex(np.tile(panel.grid.timestamps.astype("datetime64[ns]"), num_assets)).tz_localize(
        "UTC"
    )
    return pd.DataFrame(
        {
            "timestamp": ts,
            "ticker": np.repeat(np.array(panel.tickers, dtype=object), num_steps),
            "open": panel.open.T.reshape(-1),
            "high": panel.high.T.reshape(-1),
            "low": panel.low.T.reshape(-1),
            "close": panel.close.T.reshape(-1),
            "volume": panel.volume.T.reshape(-1),
        }
    )


def write_synthetic(home: str | os.PathLike[str], spec: SyntheticSpec) -> WriteReport:
    """Generate ``spec`` and write its minute bars into the store under ``home`` (``data synth``)."""
    return BarStore(home).write(to_frame(generate(spec)), "1m", source="synthetic")
