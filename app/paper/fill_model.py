"""The execution model's predicted fill price of a paper order (``app.paper.slippage`` compares it with
the broker's fills; the rule and its inputs are described there)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pandas as pd
import torch

from data.liquidity import trailing_liquidity
from envs.execution import fill_frac
from envs.params import EnvParams


@dataclass(frozen=True)
class ExecutionCosts:
    """The execution model's settings that price a fill (``envs.params.EnvParams``' fields)."""

    slippage_bps: float = EnvParams.slippage_bps
    spread_bps: float = EnvParams.spread_bps
    spread_scale: float = EnvParams.spread_scale
    impact_coef: float = EnvParams.impact_coef


def execution_costs(manifest: dict) -> ExecutionCosts:
    """The bundle's execution settings (its ``env_params``; defaults for those it lacks)."""
    env = manifest.get("env_params") or {}
    names = {f.name for f in fields(ExecutionCosts)}
    return ExecutionCosts(**{k: float(v) for k, v in env.items() if k in names and v is not None})


def impact_scales(close: np.ndarray, volume: np.ndarray, session_id: np.ndarray) -> np.ndarray:
    """``(A,)`` square-root impact scale ``daily_vol / sqrt(adv)`` at the last of ``(T, A)`` bars
    (0 where there is no volume), from bars at or before it only (``data.liquidity``)."""
    if len(close) == 0:
        return np.zeros(close.shape[1] if close.ndim == 2 else 0)
    # A gap (unknown or non-positive close) reads as a quiet bar, not a jump: carried forward.
    known = pd.DataFrame(np.asarray(close, dtype=np.float64)).where(lambda f: f > 0)
    c = torch.tensor(known.ffill().bfill().fillna(1.0).to_numpy())
    v = torch.as_tensor(np.nan_to_num(np.asarray(volume, dtype=np.float64), nan=0.0))
    daily_vol, adv = trailing_liquidity(c, v, torch.as_tensor(np.asarray(session_id)))
    vol, dv = daily_vol[-1].double(), adv[-1].double()
    return torch.where(dv > 0, vol / dv.clamp(min=1e-12).sqrt(), 0.0).numpy()


def model_price(costs: ExecutionCosts, price: float, side: str, qty: float, impact: float) -> float:
    """The fill price the model predicts for ``qty`` shares on ``side`` at reference ``price``."""
    frac = fill_frac(costs, torch.tensor([abs(float(qty))], dtype=torch.float64), torch.tensor([impact]))
    sign = 1.0 if side == "buy" else -1.0
    return float(price) * (1.0 + sign * float(frac[0]))
