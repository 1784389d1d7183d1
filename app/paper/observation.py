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
from app.paper.fill_model import execution_costs, impact_scales
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
from data.features import latest_features
from envs.observation import CASH, FEATURES, TIME_OF_DAY, TRADABLE, WEIGHT, split_obs


def fetch_start(now: datetime, interval: str, lookback: int) -> datetime:
    """Start of the bar history that covers ``lookback`` bars before ``now`` (one spare session)."""
    sessions_needed = math.ceil(lookback / bars_per_session(interval)) + 1
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
    """The observation of the last completed bar, exactly as the env would build it."""
    tickers = bundle.tickers
    interval = bundle.interval
    spec = bundle.feature_spec
    step = pd.Timedelta(minutes=INTERVAL_MINUTES[interval] or 0)
    # Intraday bundles read 1-minute bars and aggregate them onto the interval's grid (align_ticker).
    source_step = pd.Timedelta(0) if interval == "1d" else pd.Timedelta(minutes=1)
    now_ts = pd.Timestamp(now)
    now_ts = now_ts.tz_localize("UTC") if now_ts.tzinfo is None else now_ts.tz_convert("UTC")
    # Only completed bars: a bar that started less than one interval ago is still forming; a daily
    # bar is complete only once its session has closed.
    if len(bars):
        if interval == "1d":
            # Alpaca stamps a daily bar at midnight New York time, which the calendar would read as an
            # intraday bar outside the session: keep the session date only (midnight UTC).
            dates = session_dates(bars["timestamp"]).tz_localize("UTC")
            bars = bars.assign(timestamp=dates)
            bars = bars[_session_closed(pd.DatetimeIndex(bars["timestamp"]), now_ts)]
        else:
            bars = bars[bars["timestamp"] + source_step <= now_ts]
    frames: dict[str, pd.DataFrame] = {}
    for ticker in tickers:
        rows = bars[bars["ticker"] == ticker] if len(bars) else bars
        if len(rows):
            aligned = align_ticker(rows.reset_index(drop=True), interval).frame
            if len(aligned):
                frames[ticker] = aligned
    if not frames:
        raise DataError(f"no bars for any of {', '.join(tickers)} before {now_ts.isoformat()}")
    # The decision bar: the newest completed grid bar that some ticker actually traded in.
    last_real = max(f.loc[~f["filled"].astype(bool), "timestamp"].max() for f in frames.values())
    panel = align_panel(frames, interval, min_coverage=0.0)
    grid_ts = pd.DatetimeIndex(panel.grid.timestamps, tz="UTC")
    done = _session_closed(grid_ts, now_ts) if interval == "1d" else grid_ts + step <= now_ts
    complete = (grid_ts <= last_real) & done
    if not complete.any():
        raise DataError("no completed bar to decide on")
    row = int(np.flatnonzero(complete)[-1])
    decision_ts = grid_ts[row]
    session = panel.grid.session_id[row]
    lookback = int(spec["lookback"])
    lo = max(0, row + 1 - lookback)
    col_of = {t: j for j, t in enumerate(panel.tickers)}

    num_assets, num_features = len(tickers), bundle.num_features
    features = np.zeros((num_assets, num_features), dtype=np.float32)
    tradable = np.zeros(num_assets, dtype=np.float32)  # the decision bar is a real bar of the ticker
    prices = np.full(num_assets, np.nan)
    skipped: list[str] = []
    present = [t for t in tickers if t in col_of]
    if present:
        cols = [col_of[t] for t in present]
        # float64 close and float32 volume: exactly what data.loader.build_market feeds the features.
        close = torch.as_tensor(panel.close[lo : row + 1][:, cols], dtype=torch.float64)
        volume = torch.as_tensor(panel.volume[lo : row + 1][:, cols], dtype=torch.float32)
        latest = latest_features(close, volume, spec).cpu().numpy()
        # All the fetched bars up to the decision bar (point-in-time) price the orders' impact.
        scales = impact_scales(
            panel.close[: row + 1][:, cols],
            panel.volume[: row + 1][:, cols],
            panel.grid.session_id[: row + 1],
        )
        impact = {t: float(s) for t, s in zip(present, scales, strict=True)}
    else:
        impact = {}
    for i, ticker in enumerate(tickers):
        if ticker not in col_of:
            skipped.append(ticker)
            continue
        frame = frames[ticker]
        real = frame.loc[~frame["filled"].astype(bool), "timestamp"]
        real = real[real <= decision_ts]
        same_session = len(real) and (
            panel.grid.session_id[int(grid_ts.searchsorted(real.max(), side="right")) - 1] == session
        )
        if not same_session:
            skipped.append(ticker)  # no trade yet in this session: its price would be stale
        tradable[i] = float(len(real) > 0 and real.max() == decision_ts)  # as MarketData.tradable
        # Features as training saw such bars (carried forward); only its orders are skipped.
        features[i] = latest[present.index(ticker)]
        prices[i] = panel.close[row, col_of[ticker]]
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
    glob, per_asset = split_obs(obs, num_assets, num_features)  # views of obs
    glob[0, CASH] = account.cash / value
    glob[0, TIME_OF_DAY] = panel.grid.time_of_day[row]
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
        skipped=tuple(skipped),
        impact=impact,
        costs=execution_costs(bundle.manifest),
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
