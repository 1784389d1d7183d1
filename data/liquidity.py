"""Point-in-time liquidity of every (bar, asset): a trailing daily volatility and a trailing average
daily volume, the inputs of the env's square-root market impact (docs/env.md "Execution").

Both use bars at or before each bar only (a trailing window of :data:`WINDOW_SESSIONS` sessions' worth
of bars, shorter at the start of the data), so a decision on bar ``t`` prices its order with what was
known at ``t``:

- ``daily_vol``: realized volatility of a session, ``sqrt(bars_per_session * mean(r**2))`` over the
  window's bar log returns ``r`` (close to close, the overnight move included in a session's first
  bar);
- ``adv``: average volume per session in shares, ``bars_per_session * mean(volume)`` over the window.

Forward-filled bars (volume 0, return 0) count as the quiet bars they are. ``bars_per_session`` is the
grid's bars over its sessions (390 for full one-minute sessions, 1 for daily bars).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

#: The trailing window, in sessions (a month of trading), of both estimates.
WINDOW_SESSIONS = 20


def _trailing_mean(x: Tensor, window: int) -> Tensor:
    """Mean of ``x`` (T, A) over bars ``(t - window, t]`` (fewer at the start), float64."""
    csum = torch.cumsum(x, dim=0)
    shifted = torch.zeros_like(csum)
    if window < x.shape[0]:
        shifted[window:] = csum[:-window]
    count = torch.arange(1, x.shape[0] + 1, device=x.device, dtype=x.dtype).clamp(max=window)
    return (csum - shifted) / count.unsqueeze(1)


def trailing_liquidity(
    close: Tensor, volume: Tensor, session_id: Tensor, bars_per_session: int | None = None
) -> tuple[Tensor, Tensor]:
    """``(daily_vol, adv)``, each ``(T, A)`` float32 on the inputs' device (see the module docstring);
    ``bars_per_session``: the grid's (``None``: the bars over their sessions)."""
    num_steps = int(close.shape[0])
    if num_steps == 0:
        empty = torch.zeros_like(close, dtype=torch.float32)
        return empty, empty.clone()
    if bars_per_session is None:
        sessions = max(1, int(torch.unique_consecutive(session_id).numel()))
        bars_per_session = max(1, round(num_steps / sessions))
    window = WINDOW_SESSIONS * bars_per_session
    c = close.to(torch.float64).clamp(min=1e-12)
    ret = torch.zeros_like(c)
    ret[1:] = torch.log(c[1:] / c[:-1])
    daily_vol = torch.sqrt(_trailing_mean(ret * ret, window) * bars_per_session)
    adv = _trailing_mean(volume.to(torch.float64).clamp(min=0.0), window) * bars_per_session
    return daily_vol.to(torch.float32), adv.to(torch.float32)


#: Sessions in the volume estimate of :func:`expected_volume` (the same month as the other estimates).
VOLUME_SESSIONS = WINDOW_SESSIONS
# Rows per chunk of the median's (assets, rows, lags) windows: bounds its memory on long histories.
_CHUNK_ROWS = 8192


def position_in_session(session_id: Tensor) -> Tensor:
    """``(T,)`` int64: each bar's index within its session (0 at a session's first bar)."""
    num_steps = int(session_id.shape[0])
    index = torch.arange(num_steps, device=session_id.device)
    first = torch.ones(num_steps, dtype=torch.bool, device=session_id.device)
    if num_steps > 1:
        first[1:] = session_id[1:] != session_id[:-1]
    start = torch.where(first, index, torch.zeros_like(index)).cummax(0).values
    return index - start


def expected_volume(volume: Tensor, session_id: Tensor, sessions: int = VOLUME_SESSIONS) -> Tensor:
    """``(T, A)`` float32: row ``t`` is the volume expected at bar ``t + 1``, estimated at bar ``t``:
    the median (the lower one of an even count) of the volumes of the bars at the same position in
    their session (the same minute of the day on a one-minute grid) in the last ``sessions`` earlier
    sessions that have a bar there (a short session, e.g. a half day, is skipped for the positions it
    lacks), all before bar ``t + 1``'s own session and so complete by bar ``t``. Bars with no such session (the
    data's first session) take the mean volume per bar of bars ``<= t``. The last row, with no bar
    after it, repeats that mean. Never reads bar ``t + 1``'s volume: the env's volume cap for an order
    sent at bar ``t`` (docs/env.md "Execution")."""
    num_steps = int(volume.shape[0])
    vol = volume.to(torch.float32).clamp(min=0.0)
    if num_steps == 0:
        return vol.clone()
    running = _trailing_mean(vol.to(torch.float64), num_steps).to(torch.float32)  # mean of bars <= t
    pos = position_in_session(session_id)
    # Bars grouped by position, in time order within each group: a group's previous entries are the
    # same position in earlier sessions (one bar per position and session).
    order = torch.argsort(pos * (num_steps + 1) + torch.arange(num_steps, device=pos.device))
    estimate_sorted = _median_of_previous(vol.index_select(0, order), pos.index_select(0, order), sessions)
    per_bar = torch.empty_like(vol)
    per_bar[order] = estimate_sorted  # per_bar[i]: the estimate for bar i
    out = running.clone()
    out[:-1] = torch.where(per_bar[1:].isnan(), running[:-1], per_bar[1:])
    return out


def _median_of_previous(values: Tensor, group: Tensor, lags: int) -> Tensor:
    """``(R, A)``: for each row of ``values (R, A)``, whose rows come in contiguous ``group (R,)``
    runs, the lower median (NaNs left out) of the up to ``lags`` rows before it in its run; NaN with
    none."""
    num_rows, num_assets = values.shape
    device = values.device
    new = torch.ones(num_rows, dtype=torch.bool, device=device)
    new[1:] = group[1:] != group[:-1]
    # Each run gets ``lags`` NaN rows before it: a window of the ``lags`` rows before a row then
    # never reaches into the previous run. Assets first, so a window is a contiguous stretch.
    slot = torch.arange(num_rows, device=device) + lags * torch.cumsum(new.to(torch.int64), 0)
    padded = values.new_full((num_assets, num_rows + lags * int(new.sum())), float("nan"))
    padded[:, slot] = values.T
    windows = padded.unfold(1, lags, 1)  # windows[:, q]: padded rows q .. q + lags - 1
    # The median selects one of the window's values, so NumPy's sort gives nanmedian's value at a
    # fraction of its time; where a 0 and a -0 could tie (a volume of -0), nanmedian picks the sign,
    # reading the window latest row first.
    exact_sort = device.type == "cpu" and not bool(torch.signbit(values).any())
    medians = values.new_empty(num_assets, windows.shape[1])
    for lo in range(0, windows.shape[1], _CHUNK_ROWS):
        chunk = windows[:, lo : lo + _CHUNK_ROWS]
        median = _lower_median(chunk) if exact_sort else chunk.flip(-1).nanmedian(-1).values
        medians[:, lo : lo + _CHUNK_ROWS] = median
    return medians[:, slot - lags].T


def _lower_median(windows: Tensor) -> Tensor:
    """``torch.nanmedian(windows, -1).values`` of a CPU tensor: the ``(n - 1) // 2``-th smallest of
    the ``n`` values that are not NaN (NaN when all are)."""
    ordered = np.sort(windows.numpy(), axis=-1)  # NaNs sort last
    rank = np.maximum(np.count_nonzero(~np.isnan(ordered), axis=-1) - 1, 0) // 2
    return torch.from_numpy(np.take_along_axis(ordered, rank[..., None], axis=-1)[..., 0])


#: Bars per time-of-day bucket of :func:`spread_estimate` (half an hour of one-minute bars).
SPREAD_BUCKET_BARS = 30
#: The estimate's floor, a half-spread as a fraction of the price (0.25 bp: a penny on a $200 share).
SPREAD_FLOOR = 0.25e-4


def spread_estimate(
    high: Tensor,
    low: Tensor,
    close: Tensor,
    session_id: Tensor,
    sessions: int = WINDOW_SESSIONS,
    bucket_bars: int = SPREAD_BUCKET_BARS,
    floor: float = SPREAD_FLOOR,
) -> Tensor:
    """``(T, A)`` float32: row ``t`` is the half-spread (a fraction of the price) expected at bar
    ``t + 1``, estimated at bar ``t`` from high, low and close by Abdi and Ranaldo's estimator (2017,
    "A Simple Estimation of Bid-Ask Spreads from Daily Close, High, and Low Prices"): with
    ``c`` the log close and ``eta`` the mid-range ``(log high + log low) / 2``, the squared spread is
    ``4 E[(c_i - eta_i)(c_i - eta_{i+1})]``. The mean runs over the pairs of consecutive bars of the
    same session whose first bar lies in bar ``t + 1``'s time-of-day bucket (``bucket_bars`` bars from
    the session's open), in the last ``sessions`` sessions before bar ``t + 1``'s own (all complete at
    ``t``); a negative mean reads as 0, as in the paper. Half of the spread, at least ``floor``; the
    floor where no earlier session has a pair in the bucket. Forward-filled bars (high = low = close)
    pair as quiet bars."""
    num_steps, num_assets = close.shape
    out = torch.full((num_steps, num_assets), floor, dtype=torch.float32, device=close.device)
    if num_steps < 2:
        return out
    log = lambda x: x.to(torch.float64).clamp(min=1e-12).log()  # noqa: E731
    c, eta = log(close), (log(high) + log(low)) / 2
    pair = 4.0 * (c[:-1] - eta[:-1]) * (c[:-1] - eta[1:])  # (T - 1, A): bar i with bar i + 1
    same = session_id[1:] == session_id[:-1]
    pos = position_in_session(session_id)
    bucket = torch.div(pos, bucket_bars, rounding_mode="floor")
    num_buckets = int(bucket.max()) + 1
    # Sessions renumbered 0..S-1 in time order; per (session, bucket) the sum and count of pairs.
    _, session = torch.unique_consecutive(session_id, return_inverse=True)
    num_sessions = int(session.max()) + 1
    cell = (session[:-1] * num_buckets + bucket[:-1])[same]
    sums = torch.zeros(num_sessions * num_buckets, num_assets, dtype=torch.float64, device=close.device)
    sums.index_add_(0, cell, pair[same])
    counts = torch.zeros(num_sessions * num_buckets, dtype=torch.float64, device=close.device)
    counts.index_add_(0, cell, torch.ones_like(cell, dtype=torch.float64))
    sums = sums.view(num_sessions, num_buckets, num_assets)
    counts = counts.view(num_sessions, num_buckets, 1)

    # Trailing sums over the `sessions` sessions before each one (exclusive), by cumulative sums.
    def trailing(x: Tensor) -> Tensor:
        total = torch.cat([torch.zeros_like(x[:1]), x.cumsum(0)])  # total[s] = sum of sessions < s
        lagged = torch.zeros_like(total)
        lagged[sessions:] = total[:-sessions] if sessions < total.shape[0] else lagged[sessions:]
        return (total - lagged)[:-1]

    s_sum, s_cnt = trailing(sums), trailing(counts)
    squared = torch.where(s_cnt > 0, s_sum / s_cnt.clamp(min=1.0), float("nan"))
    half = squared.clamp(min=0.0).sqrt() / 2  # (S, B, A)
    half = torch.where(half.isnan(), floor, half.clamp(min=floor))
    # Row t: the estimate for bar t + 1's session and bucket.
    out[:-1] = half[session[1:], bucket[1:]].to(torch.float32)
    return out
