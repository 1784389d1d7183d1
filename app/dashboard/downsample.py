"""Downsampling that keeps the dashboard's charts fast (pure numpy/pandas, no plotting).

A year of minute bars is ~98k points per line; the browser draws ~2k per line just as well, so every
long series is downsampled first: LTTB for lines (keeps the visual shape), min/max per bucket for the
underwater chart (keeps the worst drawdown exactly).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_POINTS = 2000


def lttb_indices(x: np.ndarray, y: np.ndarray, n_out: int) -> np.ndarray:
    """Largest-Triangle-Three-Buckets: indices of ``n_out`` points that keep the line's shape.

    The first and last points are always kept. NaNs in ``y`` are treated as 0 for the selection
    only (the caller plots the original values at the chosen indices).
    """
    n = len(y)
    if n_out >= n or n_out < 3:
        return np.arange(n)
    x = np.asarray(x, dtype="float64")
    y = np.nan_to_num(np.asarray(y, dtype="float64"))
    # Interior points 1..n-2 split into n_out-2 buckets; bucket i is [edges[i], edges[i+1]).
    edges = (np.arange(n_out - 1) * ((n - 2) / (n_out - 2))).astype(np.int64) + 1
    edges[-1] = n - 1
    out = np.empty(n_out, dtype=np.int64)
    out[0], out[-1] = 0, n - 1
    prev = 0
    for i in range(n_out - 2):
        lo, hi = edges[i], edges[i + 1]
        # The third vertex of the triangle: the mean of the next bucket (the last point at the end).
        nlo, nhi = (edges[i + 1], edges[i + 2]) if i + 2 < len(edges) else (n - 1, n)
        ax, ay = x[nlo:nhi].mean(), y[nlo:nhi].mean()
        px, py = x[prev], y[prev]
        area = np.abs((px - ax) * (y[lo:hi] - py) - (px - x[lo:hi]) * (ay - py))
        prev = lo + int(np.argmax(area))
        out[i + 1] = prev
    return out


def minmax_indices(y: np.ndarray, n_out: int) -> np.ndarray:
    """Indices of the min and max of each of ``n_out // 2`` buckets (sorted, first/last kept)."""
    n = len(y)
    if n_out >= n or n_out < 4:
        return np.arange(n)
    y = np.asarray(y, dtype="float64")
    buckets = n_out // 2
    size = -(-n // buckets)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    grid = padded.reshape(buckets, size)
    # All-NaN padding rows cannot occur except at the tail; nan-aware arg functions need a value.
    filled_lo = np.where(np.isnan(grid), np.inf, grid)
    filled_hi = np.where(np.isnan(grid), -np.inf, grid)
    base = np.arange(buckets) * size
    idx = np.concatenate([base + filled_lo.argmin(axis=1), base + filled_hi.argmax(axis=1), [0, n - 1]])
    return np.unique(np.clip(idx, 0, n - 1))


def downsample(series: pd.Series, max_points: int = MAX_POINTS, method: str = "lttb") -> pd.Series:
    """``series`` thinned to about ``max_points`` points (unchanged when already short)."""
    if len(series) <= max_points:
        return series
    if method == "minmax":
        idx = minmax_indices(series.to_numpy(), max_points)
    else:
        idx = lttb_indices(_x_numeric(series.index), series.to_numpy(), max_points)
    return series.iloc[idx]


def _x_numeric(index: pd.Index) -> np.ndarray:
    if isinstance(index, pd.DatetimeIndex):
        return index.asi8.astype("float64")
    return np.asarray(index, dtype="float64")
