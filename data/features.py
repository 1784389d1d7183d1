"""Causal per-asset features in torch, and their train-only normalization (a JSON-able spec).

The core, ``compute_features``, is a pure function of ``(T, A)`` tensors on any device: feature
``f`` at bar ``t`` uses bars ``<= t`` only. Every window is finite (rolling sums and *truncated*
exponential averages), so the value at the last bar depends only on the last ``spec["lookback"]``
bars: paper trading calls ``latest_set(window, spec)`` on a recent window of raw bars and gets
exactly the row the full history would give. Before a series has ``w`` bars, windows are padded with
the series' first value (causal: the padding is bar 0).

Features (windows in bars, defaults in ``DEFAULT_WINDOWS``):

- ``ret_1, ret_15, ret_60, ret_390``: log returns over several horizons (close to close);
- ``vol_60``: standard deviation of 1-bar log returns over the last 60 bars;
- ``rsi_14``: RSI-like ``(gain - loss) / (gain + loss)`` of exponentially averaged 1-bar moves, in [-1, 1];
- ``macd``: MACD-like ``EMA12 - EMA26`` of log close (a trend measure, scale-free);
- ``volume_z``: z-score of ``log1p(volume)`` against its last 390 bars.

Time of day is not a feature here: ``MarketData.time_of_day`` carries it (the env puts it in the
observation once, not once per asset).

Feature sets (``[data] features``, :data:`FEATURE_SETS`): ``small`` is the eight above (the default);
``library`` adds eighteen session-level, volume and cross-sectional features (``data.feature_library``),
which read the bars' open, high, low and session ids too: :func:`compute_set` takes them all
(:class:`FeatureBars`). A spec's ``windows`` say which set it is (the library's keys present), so every
caller that passes ``spec["windows"]`` on recomputes the set the policy was trained on.

Normalization: one mean and std per feature, pooled over the assets and bars of the TRAIN window
only (``fit_normalization``); normalized values are clipped to ``[-clip, clip]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from data.calendar import INTERVAL_MINUTES, bars_per_session, check_interval
from data.errors import DataError
from data.feature_library import (
    ASSET_COLUMNS,
    CROSS_COLUMNS,
    LIBRARY_WINDOWS,
    FeatureBars,
    asset_features,
    cross_features,
    is_library,
    library_lookback,
    library_names,
    opening_bars,
)

FEATURE_NAMES: tuple[str, ...] = (
    "ret_1",
    "ret_15",
    "ret_60",
    "ret_390",
    "vol_60",
    "rsi_14",
    "macd",
    "volume_z",
)
DEFAULT_WINDOWS: dict[str, int] = {
    "ret_short": 15,
    "ret_mid": 60,
    "ret_long": 390,
    "vol": 60,
    "rsi": 14,
    "macd_fast": 12,
    "macd_slow": 26,
    "volume": 390,
}
EMA_TRUNCATION = 5  # truncated EMA kernels span EMA_TRUNCATION * span bars (weight left < 0.1%)
#: Bars x assets of one block of :func:`compute_features`: its float64 intermediates (about 25 arrays
#: of this many values) stay near 200 MB whatever the size of the market.
BLOCK_VALUES = 1_000_000
DEFAULT_CLIP = 8.0
SPEC_VERSION = 1
#: The feature sets ``[data] features`` chooses between (``small``: the default, the eight above).
FEATURE_SETS: tuple[str, ...] = ("small", "library")


def feature_windows(
    feature_set: str = "small", interval: str = "1m", session_bars: int | None = None
) -> dict[str, int]:
    """The windows of ``feature_set`` on ``interval``'s bars: ``DEFAULT_WINDOWS`` for ``small``; for
    ``library`` also ``LIBRARY_WINDOWS`` with its first half hour in bars and the bars of a full
    session (``session_bars``, e.g. the longest session of an extended-hours grid; default the
    interval's regular session)."""
    if feature_set not in FEATURE_SETS:
        raise DataError(f"unknown feature set {feature_set!r} (use one of {', '.join(FEATURE_SETS)})")
    if feature_set == "small":
        return dict(DEFAULT_WINDOWS)
    per_session = max(bars_per_session(interval), int(session_bars or 0))
    opening = opening_bars(INTERVAL_MINUTES[check_interval(interval)])
    return {**DEFAULT_WINDOWS, **LIBRARY_WINDOWS, "opening_bars": opening, "bars_per_session": per_session}


def feature_set_of(windows: Mapping[str, int]) -> str:
    """``library`` when ``windows`` hold the library's keys, else ``small``."""
    return "library" if is_library(windows) else "small"


def feature_names(windows: Mapping[str, int] = DEFAULT_WINDOWS) -> tuple[str, ...]:
    """Feature names for ``windows`` (the defaults give ``FEATURE_NAMES``; library windows add the
    library's after them)."""
    w = windows
    small = (
        "ret_1",
        f"ret_{w['ret_short']}",
        f"ret_{w['ret_mid']}",
        f"ret_{w['ret_long']}",
        f"vol_{w['vol']}",
        f"rsi_{w['rsi']}",
        "macd",
        "volume_z",
    )
    return (*small, *library_names(w)) if is_library(w) else small


def lookback(windows: Mapping[str, int] = DEFAULT_WINDOWS) -> int:
    """Bars needed for the last row to be independent of padding (what paper trading must fetch)."""
    w = windows
    small = 1 + max(
        w["ret_long"],
        w["ret_mid"],
        w["ret_short"],
        w["vol"] + 1,
        EMA_TRUNCATION * w["rsi"] + 1,
        EMA_TRUNCATION * w["macd_slow"],
        w["volume"],
    )
    return max(small, library_lookback(w)) if is_library(w) else small


def _work_dtype(device: torch.device) -> torch.dtype:
    # float64 keeps long cumulative sums exact enough; MPS has no float64.
    return torch.float32 if device.type == "mps" else torch.float64


def _lag(x: Tensor, k: int) -> Tensor:
    """``x[t - k]`` with the first row repeated before the start. x: (T, A)."""
    if k <= 0:
        return x
    pad = x[:1].expand(min(k, x.shape[0]), -1)
    return torch.cat([pad, x[:-k]], dim=0)[: x.shape[0]]


def _rolling_mean(x: Tensor, window: int) -> Tensor:
    """Mean of ``x[t-window+1 .. t]``, padded with ``x[0]``. x: (T, A)."""
    padded = torch.cat([x[:1].expand(window, -1), x], dim=0)
    csum = torch.cumsum(padded, dim=0)
    return (csum[window:] - csum[:-window]) / window


def _discounted_sum(x: Tensor, decay: float, init: Tensor, block: int = 64) -> Tensor:
    """``S[t] = decay * S[t-1] + x[t]`` with ``S[-1] = init``; x: (T, A).

    Strictly causal: rows are solved block by block (a cumulative sum inside each block, a short
    sequential carry across blocks), so ``S[t]`` never touches ``x[t+1:]``, not even through rounding.
    """
    num_steps, num_assets = x.shape
    if x.dtype == torch.float32:
        block = 16  # decay**-block must stay well inside float32's precision
    num_blocks = -(-num_steps // block)
    padded = torch.cat([x, x.new_zeros(num_blocks * block - num_steps, num_assets)], dim=0)
    blocks = padded.view(num_blocks, block, num_assets)
    k = torch.arange(block, dtype=x.dtype, device=x.device).view(1, block, 1)
    # Inside a block: P[k] = sum_{j<=k} decay^(k-j) x[j] = decay^k * cumsum(decay^-j x[j]).
    partial = decay**k * torch.cumsum(blocks * decay ** (-k), dim=1)
    carry = torch.empty(num_blocks, num_assets, dtype=x.dtype, device=x.device)
    state = init
    tail = decay**block
    last = partial[:, -1]
    for b in range(num_blocks):
        carry[b] = state
        state = tail * state + last[b]
    out = partial + decay ** (k + 1) * carry.unsqueeze(1)
    return out.reshape(num_blocks * block, num_assets)[:num_steps]


def _ema(x: Tensor, span: int) -> Tensor:
    """Truncated exponential moving average (alpha = 2 / (span + 1)), causal. x: (T, A).

    Weights ``decay^j`` for ``j < L = EMA_TRUNCATION * span``, normalized to sum 1, with ``x[0]``
    standing in for bars before the start. Computed as ``S[t] - decay^L S[t-L]`` from the infinite
    discounted sum ``S``, so the last row depends on the last ``L`` bars only.
    """
    decay = 1.0 - 2.0 / (span + 1.0)
    length = EMA_TRUNCATION * span
    before_start = x[0] / (1.0 - decay)  # S of an infinite run of x[0]
    total = _discounted_sum(x, decay, before_start)
    lagged = torch.cat([before_start.unsqueeze(0).expand(min(length, x.shape[0]), -1), total], dim=0)
    truncated = total - decay**length * lagged[: x.shape[0]]
    return truncated * (1.0 - decay) / (1.0 - decay**length)


def compute_features(
    close: Tensor,
    volume: Tensor,
    windows: Mapping[str, int] = DEFAULT_WINDOWS,
) -> Tensor:
    """Raw (unnormalized) causal features ``(T, A, F)`` float32 from ``close, volume (T, A)``.

    Every feature of an asset is computed from that asset's bars alone, so a wide market is computed
    a block of assets at a time (:data:`BLOCK_VALUES` bars x assets per block): the same values, with
    float64 intermediates of one block only (a year of minute bars x 100 tickers would otherwise hold
    about 25 float64 copies of the whole panel at once).
    """
    _check_bars(close, volume)
    if is_library(windows):
        raise DataError("features: the library set reads open, high, low and sessions too (compute_set)")
    out = torch.empty(len(FEATURE_NAMES), *close.shape, dtype=torch.float32, device=close.device)
    return _features_last(_blocks(out, range(len(FEATURE_NAMES)), _small_columns(close, volume, windows)))


def _check_bars(close: Tensor, volume: Tensor) -> None:
    if close.ndim != 2 or close.shape != volume.shape:
        raise DataError(
            f"features: close {tuple(close.shape)} and volume {tuple(volume.shape)} must be (T, A)"
        )
    if close.shape[0] == 0:
        raise DataError("features: no bars")


def _small_columns(close: Tensor, volume: Tensor, windows: Mapping[str, int]):
    """The small set's ``compute(a, b)`` of :func:`_blocks`."""
    return lambda a, b: _asset_features(close[:, a:b], volume[:, a:b], windows)


def _blocks(out: Tensor, columns: Sequence[int], compute) -> Tensor:
    """``out (F, T, A)`` float32 with its ``columns`` set to the columns ``compute(a, b)`` gives of
    asset blocks ``[a, b)`` of :data:`BLOCK_VALUES` bars x assets (one call when the market fits one
    block). Each column is rounded to float32 as it is written into place: features first, so that
    each is one stretch of memory (no stacked copies: a year of minute features is hundreds of MB
    per copy); :func:`_features_last` lays them out ``(T, A, F)``."""
    num_steps, num_assets = out.shape[1:]
    block = max(1, BLOCK_VALUES // num_steps)
    for a in range(0, num_assets, block):
        b = min(num_assets, a + block)
        for column, values in zip(columns, compute(a, b), strict=True):
            out[column, :, a:b] = values
    return out


def _features_last(columns: Tensor) -> Tensor:
    """``(F, T, A)`` -> contiguous ``(T, A, F)``; on the CPU by NumPy's transposing copy, several
    times faster than torch's there."""
    if columns.device.type != "cpu":
        return columns.permute(1, 2, 0).contiguous()
    out = torch.empty(*columns.shape[1:], columns.shape[0], dtype=columns.dtype)
    np.copyto(out.numpy(), columns.numpy().transpose(1, 2, 0))
    return out


def compute_set(bars: FeatureBars, windows: Mapping[str, int] = DEFAULT_WINDOWS) -> Tensor:
    """Raw causal features ``(T, A, F)`` float32 of the set ``windows`` describe (``feature_names``
    order) from ``bars``: the small set reads close and volume only (:func:`compute_features`); the
    library set's per-asset columns are computed a block of assets at a time like the small ones, its
    cross-sectional columns (``xret``, ``xrank``, ``beta``, ``zret``) over every ticker at once."""
    small = {k: windows[k] for k in DEFAULT_WINDOWS}
    if not is_library(windows):
        return compute_features(bars.close, bars.volume, small)
    _check_bars(bars.close, bars.volume)
    shapes = {name: tuple(getattr(bars, name).shape) for name in ("open", "high", "low", "volume")}
    if (
        any(shape != tuple(bars.close.shape) for shape in shapes.values())
        or bars.session_id.shape != bars.close.shape[:1]
    ):
        raise DataError(
            f"features: open/high/low/volume {shapes} and session ids must match close {tuple(bars.close.shape)}"
        )
    dtype = _work_dtype(bars.close.device)

    def block(a: int, b: int) -> list[Tensor]:
        cols = FeatureBars(*(x[:, a:b] for x in bars[:5]), bars.session_id)
        return asset_features(cols, windows, dtype)

    first = len(FEATURE_NAMES)  # the library's columns follow the small set's
    out = torch.empty(
        len(feature_names(windows)), *bars.close.shape, dtype=torch.float32, device=bars.close.device
    )
    _blocks(out, range(first), _small_columns(bars.close, bars.volume, small))
    _blocks(out, [first + c for c in ASSET_COLUMNS], block)
    sret = out[first : first + 4].permute(1, 2, 0)  # (T, A, 4), every ticker's float32 sret columns
    ret_long = out[3]  # the small set's fourth column: ret_{ret_long}
    cross = cross_features(sret, bars, windows, dtype, ret_long)
    for column, values in zip(CROSS_COLUMNS, cross, strict=True):
        out[first + column] = values
    return _features_last(out)


def _asset_features(close: Tensor, volume: Tensor, windows: Mapping[str, int]) -> list[Tensor]:
    """:func:`compute_features` of a block of assets: its ``(T, b - a)`` columns in the work dtype."""
    w = windows
    dtype = _work_dtype(close.device)
    log_close = torch.log(close.to(dtype))
    ret_1 = log_close - _lag(log_close, 1)

    def ret(k: int) -> Tensor:
        return log_close - _lag(log_close, k)

    mean_r = _rolling_mean(ret_1, w["vol"])
    mean_r2 = _rolling_mean(ret_1 * ret_1, w["vol"])
    vol = torch.sqrt(torch.clamp(mean_r2 - mean_r * mean_r, min=0.0))

    gain = _ema(torch.clamp(ret_1, min=0.0), w["rsi"])
    loss = _ema(torch.clamp(-ret_1, min=0.0), w["rsi"])
    rsi = (gain - loss) / (gain + loss + 1e-12)

    macd = _ema(log_close, w["macd_fast"]) - _ema(log_close, w["macd_slow"])

    log_vol = torch.log1p(torch.clamp(volume.to(dtype), min=0.0))
    mean_v = _rolling_mean(log_vol, w["volume"])
    var_v = torch.clamp(_rolling_mean(log_vol * log_vol, w["volume"]) - mean_v * mean_v, min=0.0)
    volume_z = (log_vol - mean_v) / torch.sqrt(var_v + 1e-6)

    return [ret_1, ret(w["ret_short"]), ret(w["ret_mid"]), ret(w["ret_long"]), vol, rsi, macd, volume_z]


def fit_normalization(raw: Tensor) -> tuple[list[float], list[float]]:
    """Per-feature mean and std pooled over bars and assets of ``raw (T, A, F)`` (the train window)."""
    flat = raw.reshape(-1, raw.shape[-1]).to(torch.float64)
    if flat.shape[0] < 2:
        raise DataError("features: the train window is too short to fit normalization")
    mean = flat.mean(dim=0)
    std = flat.std(dim=0).clamp(min=1e-8)
    return [float(v) for v in mean.cpu()], [float(v) for v in std.cpu()]


def make_spec(
    mean: list[float],
    std: list[float],
    windows: Mapping[str, int] = DEFAULT_WINDOWS,
    *,
    clip: float = DEFAULT_CLIP,
    interval: str = "1m",
    fitted_on: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON-able feature spec stored with MarketData, checkpoints and exports."""
    names = feature_names(windows)
    if len(mean) != len(names) or len(std) != len(names):
        raise DataError("features: normalization statistics do not match the feature list")
    named = {"feature_set": "library"} if is_library(windows) else {}  # small specs stay as they were
    return {
        **named,
        "version": SPEC_VERSION,
        "names": list(names),
        "windows": dict(windows),
        "ema_truncation": EMA_TRUNCATION,
        "lookback": lookback(windows),
        "interval": interval,
        "mean": list(mean),
        "std": list(std),
        "clip": clip,
        "fitted_on": list(fitted_on) if fitted_on else None,
    }


def check_spec(spec: Mapping[str, Any]) -> None:
    """Raise a DataError unless ``spec`` is a feature spec this code can apply."""
    try:
        ok = (
            spec["version"] == SPEC_VERSION
            and list(spec["names"]) == list(feature_names(spec["windows"]))
            and len(spec["mean"]) == len(spec["names"]) == len(spec["std"])
            and all(math.isfinite(v) for v in [*spec["mean"], *spec["std"]])
        )
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise DataError("feature spec is missing fields or does not match this podracer version")


def normalize(raw: Tensor, spec: Mapping[str, Any]) -> Tensor:
    """Apply the spec's normalization to raw features ``(..., F)``; clipped to ``[-clip, clip]``."""
    check_spec(spec)
    mean = torch.tensor(spec["mean"], dtype=raw.dtype, device=raw.device)
    std = torch.tensor(spec["std"], dtype=raw.dtype, device=raw.device)
    clip = float(spec["clip"])
    # In place on the one new tensor: a year of minute features is hundreds of MB per copy.
    return (raw - mean).div_(std).clamp_(-clip, clip)


def latest_features(close: Tensor, volume: Tensor, spec: Mapping[str, Any]) -> Tensor:
    """Normalized features ``(A, F)`` of the LAST bar of a window of raw bars ``(W, A)``.

    Equal to the full-history row when ``W >= spec["lookback"]`` (shorter windows are padded like the
    start of a history). The same code path as training: no second implementation to drift.
    """
    check_spec(spec)
    raw = compute_features(close, volume, spec["windows"])
    return normalize(raw[-1], spec)


def latest_set(bars: FeatureBars, spec: Mapping[str, Any]) -> Tensor:
    """:func:`latest_features` of any feature set: normalized features ``(A, F)`` of the last bar of
    ``bars`` (a window of ``spec["lookback"]`` bars or more gives the full-history row)."""
    check_spec(spec)
    return normalize(compute_set(bars, spec["windows"])[-1], spec)
