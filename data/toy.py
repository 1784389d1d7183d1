"""A tiny random market for unit tests and micro-benchmarks (no calendar, no files).

Not the synthetic generator users see (that is ``data.synthetic``): this one only has to be fast,
deterministic for a seed, and shaped exactly like real ``MarketData``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from data.calendar import MINUTES_PER_SESSION
from data.market import MarketData


def toy_market(
    num_steps: int = 2 * MINUTES_PER_SESSION,
    num_assets: int = 4,
    num_features: int = 8,
    *,
    bars_per_session: int = MINUTES_PER_SESSION,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> MarketData:
    """Geometric random-walk bars with random (standardized) features."""
    gen = torch.Generator().manual_seed(seed)
    log_ret = 0.0005 * torch.randn(num_steps, num_assets, generator=gen, dtype=torch.float64)
    close = 100.0 * torch.exp(torch.cumsum(log_ret, dim=0))
    gap = 0.0002 * torch.randn(num_steps, num_assets, generator=gen, dtype=torch.float64)
    prev_close = torch.cat([close[:1], close[:-1]], dim=0)
    open_ = prev_close * torch.exp(gap)
    high = torch.maximum(open_, close) * 1.0005
    low = torch.minimum(open_, close) * 0.9995
    # Megacap liquidity (~$100M a minute at $100): the env's volume cap rarely binds a $1M book.
    volume = 1.0e6 + 1.0e5 * torch.rand(num_steps, num_assets, generator=gen, dtype=torch.float64)
    features = torch.randn(num_steps, num_assets, num_features, generator=gen)
    minute = torch.arange(num_steps) % bars_per_session
    start = np.datetime64("2024-01-02T14:30", "ns")
    day = np.arange(num_steps) // bars_per_session
    timestamps = start + (day * 86_400 + (np.arange(num_steps) % bars_per_session) * 60).astype(
        "timedelta64[s]"
    )
    f32 = {"dtype": torch.float32, "device": device}
    return MarketData(
        tickers=tuple(f"T{i:03d}" for i in range(num_assets)),
        timestamps=timestamps.astype("datetime64[ns]"),
        open=open_.to(**f32),
        high=high.to(**f32),
        low=low.to(**f32),
        close=close.to(**f32),
        volume=volume.to(**f32),
        features=features.to(**f32),
        feature_names=tuple(f"f{i}" for i in range(num_features)),
        session_id=torch.as_tensor(day, dtype=torch.int64, device=device),
        time_of_day=((minute + 1).float() / bars_per_session).to(device),
        interval="1m",
    )


def crashed(market: MarketData, from_bar: int, factor: float = 0.01) -> MarketData:
    """``market`` with every price times ``factor`` from bar ``from_bar`` on (a crash that takes a
    fully invested book below the env's termination floor; features unchanged)."""
    drop = torch.ones(market.num_steps, 1, dtype=market.close.dtype, device=market.device)
    drop[from_bar:] = factor
    return dataclasses.replace(
        market,
        open=market.open * drop,
        high=market.high * drop,
        low=market.low * drop,
        close=market.close * drop,
    )


def with_gaps(market: MarketData, frac: float = 0.2, seed: int = 0) -> MarketData:
    """``market`` with untradable bars, as real data has them: a fraction ``frac`` of random bars
    forward-filled (open = high = low = close = the previous close, volume 0, not tradable), asset 0
    joining a third of the way in (not tradable before) and the last asset leaving at two thirds
    (its price frozen at its last real close, not tradable, not listed, from then on)."""
    num_steps, num_assets = market.close.shape
    gen = torch.Generator().manual_seed(seed)
    tradable = torch.rand(num_steps, num_assets, generator=gen) >= frac
    tradable[0] = True
    tradable[: num_steps // 3, 0] = False
    tradable[2 * num_steps // 3 :, -1] = False
    close = market.close.clone()
    for t in range(1, num_steps):  # carry the previous close into untradable bars
        close[t] = torch.where(tradable[t], close[t], close[t - 1])
    filled = ~tradable
    fill = {name: torch.where(filled, close, getattr(market, name)) for name in ("open", "high", "low")}
    return dataclasses.replace(
        market,
        **fill,
        close=close,
        volume=market.volume.masked_fill(filled, 0.0),
        tradable=tradable.to(market.device),
        listed=None,
        daily_vol=None,
        adv=None,
    )
