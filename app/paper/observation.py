"""Bars -> the observation of one decision, exactly as the env builds it for training.

The latest bars go onto the XNAS bar grid (``data.calendar``, as in training); the decision bar is
the last *completed* bar (a bar that started less than one interval ago is still forming; a ``1d``
bundle decides only on completed sessions, since today's daily bar is still forming until the close).
Its features come from ``data.features.latest_features`` with the bundle's train-window spec (the very
code training used), and the observation is laid out as the env's (``envs.observation``): cash
fraction, time of day, then per ticker the position weight (marked at the decision bar's close, like
the env), the tradable flag and the features.

A ticker without a real bar in the decision bar's session is *skipped*: its features are carried
forward as training saw such bars, but no order may be based on its stale price
(``DecisionSnapshot.skipped``). A decision bar older than one decision interval is refused
(:func:`check_fresh`).

torch is used only by the shared feature code (``data.features`` is written in torch, and computing
features with the same code as training matters more).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import torch

from app.bundle import Bundle
from app.paper.broker import BrokerAccount, Position
from app.paper.fill_model import execution_costs, fill_inputs
from app.paper.orders import DecisionSnapshot
from data.align import align_panel, align_ticker
from data.calendar import (
    INTERVAL_MINUTES,
    bars_per_session,
    exchange_date,
    session_bounds,
    session_dates,
    sessions_in_range,
)
from data.errors import DataError
from data.features import FeatureBars, latest_set
from data.liquidity import WINDOW_SESSIONS
from envs.observation import CASH, FEATURES, TIME_OF_DAY, TRADABLE, WEIGHT, split_obs


def fetch_start(now: datetime, interval: str, lookback: int) -> datetime:
    """Start of the bar history that covers ``lookback`` bars before ``now`` and the execution
    model's trailing windows (``data.liquidity.WINDOW_SESSIONS`` sessions), one spare session."""
    sessions_needed = max(math.ceil(lookback / bars_per_session(interval)), WINDOW_SESSIONS) + 1
    today = exchange_date(now)
    span = timedelta(days=int(sessions_needed * 7 / 5) + 10)
    sessions = sessions_in_range(today - span, today)
    sessions = sessions[sessions <= today][-sessions_needed:]
    if len(sessions) == 0:
        return now - span
    opens, _ = session_bounds(sessions[:1])
    return pd.Timestamp(opens[0], tz="UTC").to_pydatetime()


def _session_closed(timestamps: pd.DatetimeIndex, now: pd.Timestamp) -> np.ndarray:
    """Whether the XNAS session of each daily bar has closed by ``now`` (False off-calendar).

    ``timestamps``: date-only stamps (midnight UTC) or session opens, both on the session's UTC date."""
    if len(timestamps) == 0:
        return np.zeros(0, dtype=bool)
    ts = timestamps.tz_localize("UTC") if timestamps.tz is None else timestamps.tz_convert("UTC")
    days = ts.tz_localize(None).normalize()
    sessions = sessions_in_range(days.min(), days.max())
    _, closes = session_bounds(sessions)
    close_of = dict(zip(sessions, closes, strict=True))
    now_ns = now.value
    return np.array([d in close_of and close_of[d] <= now_ns for d in days], dtype=bool)


def build_decision(
    bundle: Bundle,
    bars: pd.DataFrame,
    account: BrokerAccount,
    positions: dict[str, Position],
    now: datetime,
) -> DecisionSnapshot:
    """The observation of the last completed bar, exactly as the env would build it, with the
    execution model's inputs for each ticker's order (``app.paper.fill_model``)."""
    interval = bundle.interval
    now_ts = pd.Timestamp(now)
    now_ts = now_ts.tz_localize("UTC") if now_ts.tzinfo is None else now_ts.tz_convert("UTC")
    frames = ticker_frames(completed_bars(bars, interval, now_ts), bundle.tickers, interval)
    if not frames:
        raise DataError(f"no bars for any of {', '.join(bundle.tickers)} before {now_ts.isoformat()}")
    panel = align_panel(frames, interval, min_coverage=0.0)
    row = _decision_row(frames, panel, interval, now_ts)
    grid_ts = pd.DatetimeIndex(panel.grid.timestamps, tz="UTC")
    col_of = {t: j for j, t in enumerate(panel.tickers)}
    present = [t for t in bundle.tickers if t in col_of]
    latest, execution = _decision_inputs(bundle, panel, row, [col_of[t] for t in present])
    num_assets = len(bundle.tickers)
    features = np.zeros((num_assets, bundle.num_features), dtype=np.float32)
    tradable = np.zeros(num_assets, dtype=np.float32)  # the decision bar is a real bar of the ticker
    prices = np.full(num_assets, np.nan)
    skipped: list[str] = []
    for i, ticker in enumerate(bundle.tickers):
        if ticker not in col_of:
            skipped.append(ticker)
            continue
        real = frames[ticker].loc[~frames[ticker]["filled"].astype(bool), "timestamp"]
        real = real[real <= grid_ts[row]]
        same_session = len(real) and (
            panel.grid.session_id[int(grid_ts.searchsorted(real.max(), side="right")) - 1]
            == panel.grid.session_id[row]
        )
        if not same_session:
            skipped.append(ticker)  # no trade yet in this session: its price would be stale
        tradable[i] = float(len(real) > 0 and real.max() == grid_ts[row])  # as MarketData.tradable
        # Features as training saw such bars (carried forward); only its orders are skipped.
        features[i] = latest[present.index(ticker)]
        prices[i] = panel.close[row, col_of[ticker]]
    return _snapshot(
        bundle, account, positions, grid_ts[row], panel.grid.time_of_day[row], prices, features,
        tradable, tuple(skipped), {t: x for t, x in zip(present, execution, strict=True)},
    )  # fmt: skip


def completed_bars(bars: pd.DataFrame, interval: str, now_ts: pd.Timestamp) -> pd.DataFrame:
    """Only completed bars: a bar that started less than one interval ago is still forming; a daily
    bar is complete only once its session has closed."""
    if not len(bars):
        return bars
    if interval == "1d":
        # Alpaca stamps a daily bar at midnight New York time, which the calendar would read as an
        # intraday bar outside the session: keep the session date only (midnight UTC).
        dates = session_dates(bars["timestamp"]).tz_localize("UTC")
        bars = bars.assign(timestamp=dates)
        return bars[_session_closed(pd.DatetimeIndex(bars["timestamp"]), now_ts)]
    # Intraday bundles read 1-minute bars and aggregate them onto the interval's grid (align_ticker).
    return bars[bars["timestamp"] + pd.Timedelta(minutes=1) <= now_ts]


def ticker_frames(bars: pd.DataFrame, tickers: tuple[str, ...], interval: str) -> dict[str, pd.DataFrame]:
    """Each ticker's bars on the interval's grid (tickers without a bar left out)."""
    frames: dict[str, pd.DataFrame] = {}
    for ticker in tickers:
        rows = bars[bars["ticker"] == ticker] if len(bars) else bars
        if len(rows):
            aligned = align_ticker(rows.reset_index(drop=True), interval).frame
            if len(aligned):
                frames[ticker] = aligned
    return frames


def _decision_row(frames: dict[str, pd.DataFrame], panel, interval: str, now_ts: pd.Timestamp) -> int:
    """The decision bar's grid row: the newest completed grid bar that some ticker actually traded in."""
    step = pd.Timedelta(minutes=INTERVAL_MINUTES[interval] or 0)
    last_real = max(f.loc[~f["filled"].astype(bool), "timestamp"].max() for f in frames.values())
    grid_ts = pd.DatetimeIndex(panel.grid.timestamps, tz="UTC")
    done = _session_closed(grid_ts, now_ts) if interval == "1d" else grid_ts + step <= now_ts
    complete = (grid_ts <= last_real) & done
    if not complete.any():
        raise DataError("no completed bar to decide on")
    return int(np.flatnonzero(complete)[-1])


def _decision_inputs(bundle: Bundle, panel, row: int, cols: list[int]) -> tuple[np.ndarray, list]:
    """The present tickers' latest features (the bundle's spec, the very code training used) and the
    execution model's inputs for an order sent at ``row`` (``app.paper.fill_model.fill_inputs`` over
    every fetched bar up to it, point-in-time): one ``(impact, half, cap)`` per ticker."""
    if not cols:
        return np.zeros((0, bundle.num_features), np.float32), []
    spec = bundle.feature_spec
    lo = max(0, row + 1 - int(spec["lookback"]))
    latest = latest_set(decision_bars(panel, lo, row + 1, cols), spec).cpu().numpy()
    session_id = panel.grid.session_id[: row + 1]
    inputs = fill_inputs(
        execution_costs(bundle.manifest),
        {name: getattr(panel, name)[: row + 1][:, cols] for name in ("close", "high", "low", "volume")},
        session_id,
        fill_session(panel, row, bundle.interval),
        bars_per_session(bundle.interval),
    )
    return latest, list(zip(inputs.impact, inputs.half, inputs.cap, strict=True))


def decision_bars(panel, start: int, stop: int, cols: list[int]) -> FeatureBars:
    """Rows ``[start, stop)`` of the present tickers' columns ``cols`` of an aligned panel, as
    ``data.loader.build_market`` feeds the feature code: float64 prices, float32 volume, the grid's
    session ids (the library set's sessions)."""

    def col(name: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.asarray(getattr(panel, name))[start:stop][:, cols], dtype=dtype)

    prices = (col(name, torch.float64) for name in ("open", "high", "low", "close"))
    session_id = torch.as_tensor(np.asarray(panel.grid.session_id[start:stop]), dtype=torch.int64)
    return FeatureBars(*prices, col("volume", torch.float32), session_id)


def fill_session(panel, row: int, interval: str) -> int:
    """The session of the fill bar of an order sent at ``row``: the decision bar's, or the next one
    when the decision bar ends its session (a daily bar always does)."""
    session = int(panel.grid.session_id[row])
    if interval == "1d":
        return session + 1
    step = pd.Timedelta(minutes=INTERVAL_MINUTES[interval])
    ts = pd.Timestamp(panel.grid.timestamps[row], tz="UTC")
    _, closes = session_bounds(pd.DatetimeIndex([exchange_date(ts)]))
    return session + 1 if ts + step >= pd.Timestamp(int(closes[0]), tz="UTC") else session


def _snapshot(
    bundle: Bundle,
    account: BrokerAccount,
    positions: dict[str, Position],
    decision_ts: pd.Timestamp,
    time_of_day: float,
    prices: np.ndarray,
    features: np.ndarray,
    tradable: np.ndarray,
    skipped: tuple[str, ...],
    execution: dict[str, tuple[float, float, float]],
) -> DecisionSnapshot:
    """The decision's book (positions marked at the decision bar's close, like the env) and its
    observation in the env's layout."""
    tickers = bundle.tickers
    qty = np.array([positions[t].qty if t in positions else 0.0 for t in tickers])
    for i, ticker in enumerate(tickers):
        if not np.isfinite(prices[i]) and ticker in positions and positions[ticker].current_price > 0:
            prices[i] = positions[ticker].current_price
    held_value = np.where(np.isfinite(prices), qty * np.nan_to_num(prices), 0.0)
    other = sum(p.market_value for s, p in positions.items() if s not in tickers)
    value = float(account.cash + held_value.sum() + other)
    if not value > 0:
        raise DataError(f"account value {value:.2f} is not positive")
    weights = held_value / value
    obs = np.empty((1, bundle.obs_dim), dtype=np.float32)
    glob, per_asset = split_obs(obs, len(tickers), bundle.num_features)  # views of obs
    glob[0, CASH] = account.cash / value
    glob[0, TIME_OF_DAY] = time_of_day
    per_asset[0, :, WEIGHT] = weights
    per_asset[0, :, TRADABLE] = tradable
    per_asset[0, :, FEATURES] = features
    return DecisionSnapshot(
        decision_ts=decision_ts,
        obs=obs,
        prices=prices,
        qty=qty,
        value=value,
        cash=float(account.cash),
        current_weights=weights,
        skipped=skipped,
        impact={t: float(x[0]) for t, x in execution.items()},
        costs=execution_costs(bundle.manifest),
        half={t: float(x[1]) for t, x in execution.items()},
        cap={t: float(x[2]) for t, x in execution.items()},
    )


def check_fresh(decision_ts: pd.Timestamp, now: datetime, bundle: Bundle, max_bar_age: float | None) -> None:
    """Refuse to trade on a decision bar older than one decision interval (or ``max_bar_age`` s)."""
    minutes = INTERVAL_MINUTES[bundle.interval]
    if minutes == 0:
        return  # daily bundles decide on the last session's bar by design
    limit = max_bar_age or max(5.0, bundle.decision_interval * minutes) * 60.0
    age = (pd.Timestamp(now) - (decision_ts + pd.Timedelta(minutes=minutes))).total_seconds()
    if age > limit:
        raise DataError(
            f"latest bar {decision_ts.isoformat()} is {age / 60:.0f} min old (limit {limit / 60:.0f}): "
            "no decision on stale data"
        )
