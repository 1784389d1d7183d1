"""The backtest's tables as long data frames (the parquet files of ``backtests.report``).

``equity_frame``: ``timestamp`` (UTC) + one column per strategy; ``daily_returns_frame``: ``date`` +
one column per strategy; ``positions_frame`` / ``trades_frame``: long tables, one row per held
position / fill, per decision while that stays under ``max_rows`` rows, else summarized per session
(positions at each session's last mark, trades summed per session and ticker, stamped with the
session's last fill). The columns: ``backtests.report``'s module docstring.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from backtests.engine import BacktestResult

#: Rows of a positions or trades table kept per decision; beyond it the table is per session.
DEFAULT_MAX_ROWS = 2_000_000


def _utc(ts: np.ndarray) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(np.asarray(ts, dtype="datetime64[ns]")).tz_localize("UTC")


def equity_frame(result: BacktestResult) -> pd.DataFrame:
    """``timestamp`` + one column per strategy, starting with the initial cash at the first bar."""
    stamps = np.concatenate([[np.datetime64(result.start_timestamp, "ns")], result.timestamps])
    first = np.full((1, len(result.names)), result.initial_value)
    values = np.concatenate([first, result.equity.numpy()], axis=0)
    frame = pd.DataFrame(values, columns=list(result.names))
    frame.insert(0, "timestamp", _utc(stamps))
    return frame


def daily_returns_frame(result: BacktestResult) -> pd.DataFrame:
    """``date`` + one column of daily returns per strategy."""
    dates, daily = result.daily_returns()
    frame = pd.DataFrame(daily.numpy(), columns=list(result.names))
    frame.insert(0, "date", pd.to_datetime(dates).date)
    return frame


def _session_last_rows(result: BacktestResult) -> np.ndarray:
    codes = result.session_dates.astype("datetime64[D]").astype(np.int64)
    return np.flatnonzero(np.r_[codes[1:] != codes[:-1], True])


def positions_frame(result: BacktestResult, max_rows: int = DEFAULT_MAX_ROWS) -> tuple[pd.DataFrame, str]:
    """Long positions table and its frequency (``"decision"`` or ``"session"``)."""
    weights = result.weights.numpy()  # (K, S, A)
    stamps = result.timestamps
    frequency = "decision"
    if np.count_nonzero(weights) > max_rows:
        rows = _session_last_rows(result)
        weights, stamps, frequency = weights[rows], stamps[rows], "session"
    k, s, a = np.nonzero(weights)
    frame = pd.DataFrame(
        {
            "timestamp": _utc(stamps[k]),
            "strategy": pd.Categorical.from_codes(s, categories=list(result.names)),
            "ticker": pd.Categorical.from_codes(a, categories=list(result.tickers)),
            "weight": weights[k, s, a].astype(np.float64),
        }
    )
    return frame, frequency


def trades_frame(result: BacktestResult, max_rows: int = DEFAULT_MAX_ROWS) -> tuple[pd.DataFrame, str]:
    """Long trades table (one row per fill; none where nothing traded) and its frequency
    (``"decision"`` or ``"session"``); ``backtests.report``'s module docstring lists the columns."""
    notional = result.trades.numpy().astype(np.float64)  # (K, S, A)
    columns = {"cost": result.trade_costs}
    if result.shares is not None:
        columns |= {
            "shares": result.shares,
            "spread_cost": result.spread_costs,
            "impact_cost": result.impact_costs,
        }
    extra = {name: x.numpy().astype(np.float64) for name, x in columns.items() if x is not None}
    volume = None if result.fill_volume is None else result.fill_volume.numpy().astype(np.float64)  # (K, A)
    stamps = result.fill_timestamps
    frequency = "decision"
    if np.count_nonzero(notional) > max_rows:
        # Rows are in time order, so each session is a contiguous block: sum the blocks.
        last = _session_last_rows(result)
        starts = np.r_[0, last[:-1] + 1]
        notional = np.add.reduceat(notional, starts, axis=0)
        extra = {name: np.add.reduceat(x, starts, axis=0) for name, x in extra.items()}
        volume = None if volume is None else np.add.reduceat(volume, starts, axis=0)
        stamps = stamps[last]
        frequency = "session"
    traded = extra.get("shares", notional)
    # A session summed to zero net shares (bought, then sold as much) still paid its costs: keep it.
    k, s, a = np.nonzero((traded != 0) | (extra["cost"] != 0))
    frame = pd.DataFrame(
        {
            "timestamp": _utc(stamps[k]),
            "strategy": pd.Categorical.from_codes(s, categories=list(result.names)),
            "ticker": pd.Categorical.from_codes(a, categories=list(result.tickers)),
            "notional": notional[k, s, a],
            "cost": extra["cost"][k, s, a],
        }
    )
    if "shares" in extra:
        shares = extra["shares"][k, s, a]
        frame["shares"] = shares
        with np.errstate(divide="ignore", invalid="ignore"):  # a session's volume-weighted price when summed
            frame["fill_price"] = np.where(shares != 0, frame["notional"] / shares, np.nan)
        frame["spread_cost"] = extra["spread_cost"][k, s, a]
        frame["impact_cost"] = extra["impact_cost"][k, s, a]
    if "shares" in extra and volume is not None:
        frame["fill_volume"] = volume[k, a]
        with np.errstate(divide="ignore", invalid="ignore"):
            frame["participation"] = np.where(volume[k, a] > 0, np.abs(shares) / volume[k, a], np.nan)
    return frame, frequency
