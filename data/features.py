"""Causal per-asset features in torch, and their train-only normalization (a JSON-able spec).

The core, ``compute_features``, is a pure function of ``(T, A)`` tensors on any device: feature
``f`` at bar ``t`` uses bars ``<= t`` only. Every window is finite (rolling sums and *truncated*
exponential averages), so the value at the last bar depends only on the last ``spec["lookback"]``
bars: paper trading calls ``latest_features(window, spec)`` on a recent window of raw bars and gets
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

Normalization: one mean and std per feature, pooled over the assets and bars of the TRAIN window
only (``fit_normalization``); normalized values are clipped to ``[-clip, clip]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from data.errors import DataError

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


def feature_names(windows: Mapping[str, int] = DEFAULT_WINDOWS) -> tuple[str, ...]:
    """Feature names for ``windows`` (the defaults give ``FEATURE_NAMES``)."""
    w = windows
    return (
        "ret_1",
        f"ret_{w['ret_short']}",
        f"ret_{w['ret_mid']}",
        f"ret_{w['ret_long']}",
        f"vol_{w['vol']}",
        f"rsi_{w['rsi']}",
        "macd",
        "volume_z",
    )


def lookback(windows: Mapping[str, int] = DEFAULT_WINDOWS) -> int:
    """Bars needed for the last row to be independent of padding (what paper trading must fetch)."""
    w = windows
    return 1 + max(
        w["ret_long"],
        w["ret_mid"],
        w["ret_short"],
        w["vol"] + 1,
        EMA_TRUNCATION * w["rsi"] + 1,
        EMA_TRUNCATION * w["macd_slow"],
        w["volume"],
    )


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
    if close.ndim != 2 or close.shape != volume.shape:
        raise DataError(
            f"features: close {tuple(close.shape)} and volume {tuple(volume.shape)} must be (T, A)"
        )
    if close.shape[0] == 0:
        raise DataError("features: no bars")
    num_steps, num_assets = close.shape
    block = max(1, BLOCK_VALUES // num_steps)
    if num_assets <= block:
        return _asset_features(close, volume, windows)
    out = torch.empty(
        num_steps, num_assets, len(feature_names(windows)), dtype=torch.float32, device=close.device
    )
    for a in range(0, num_assets, block):
        out[:, a : a + block] = _asset_features(close[:, a : a + block], volume[:, a : a + block], windows)
    return out


def _asset_features(close: Tensor, volume: Tensor, windows: Mapping[str, int]) -> Tensor:
    """:func:`compute_features` of a block of assets."""
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

    feats = [ret_1, ret(w["ret_short"]), ret(w["ret_mid"]), ret(w["ret_long"]), vol, rsi, macd, volume_z]
    return torch.stack(feats, dim=-1).to(torch.float32)


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
    return {
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
