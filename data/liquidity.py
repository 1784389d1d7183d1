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


def trailing_liquidity(close: Tensor, volume: Tensor, session_id: Tensor) -> tuple[Tensor, Tensor]:
    """``(daily_vol, adv)``, each ``(T, A)`` float32 on the inputs' device (see the module docstring)."""
    num_steps = int(close.shape[0])
    if num_steps == 0:
        empty = torch.zeros_like(close, dtype=torch.float32)
        return empty, empty.clone()
    sessions = max(1, int(torch.unique_consecutive(session_id).numel()))
    bars_per_session = max(1, round(num_steps / sessions))
    window = WINDOW_SESSIONS * bars_per_session
    c = close.to(torch.float64).clamp(min=1e-12)
    ret = torch.zeros_like(c)
    ret[1:] = torch.log(c[1:] / c[:-1])
    daily_vol = torch.sqrt(_trailing_mean(ret * ret, window) * bars_per_session)
    adv = _trailing_mean(volume.to(torch.float64).clamp(min=0.0), window) * bars_per_session
    return daily_vol.to(torch.float32), adv.to(torch.float32)
