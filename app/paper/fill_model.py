"""The env's fill of a paper order: the same rule (``envs.execution``) on the same inputs, computed from
the bars the cycle fetched (``app.paper.slippage`` compares its price with the broker's fills).

For an order sent at the decision bar ``t``, the env fills ``min(q, cap)`` shares at the fill bar's
open ``p`` times ``1 +- frac(q; m)``. Paper computes every input of that rule from its bars at or
before ``t`` with the env's own functions (``data.liquidity``, the env's 20-session windows on the
grid's bars per session): the impact scale ``daily_vol / sqrt(adv)``, the half-spread
(``spread_estimate`` for the fill bar's time-of-day bucket, at least ``spread_bps``, or the constant
with ``spread = "fixed"``), the volume cap (``max_participation`` of the fill bar's volume expected
at ``t``, ``expected_volume``), and the order's impact memory ``m`` (:func:`worked_orders`, from the
journal's fills of the bundle's earlier decisions, decayed per decision as ``EnvState.order`` is).
The one input paper cannot share is ``p``: the order is sent before the fill bar opens, so the
pre-trade estimate is priced from the decision bar's close, the last price known; the env's backtest
prices the same order at the fill bar's open. Given the same bars and reference price, the fill
(quantity and price) is the env's (``tests/test_paper_fill_parity.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd
import torch

from data.liquidity import expected_volume, spread_estimate, trailing_liquidity
from envs.execution import carried_order, fill_frac, worked_order
from envs.params import EnvParams


@dataclass(frozen=True)
class ExecutionCosts:
    """The execution model's settings that size and price a fill (``envs.params.EnvParams``' fields)."""

    slippage_bps: float = EnvParams.slippage_bps
    spread: str = EnvParams.spread
    spread_bps: float = EnvParams.spread_bps
    spread_scale: float = EnvParams.spread_scale
    impact_coef: float = EnvParams.impact_coef
    impact_decay: float = EnvParams.impact_decay
    max_participation: float = EnvParams.max_participation
    decision_interval: int = EnvParams.decision_interval
    # [data] volume_scale (the bundle's data settings): the volumes the cap and the impact read are the
    # bars' times this, as data.loader.with_volume_scale makes the env's market's.
    volume_scale: float = 1.0

    @property
    def impact_memory(self) -> float:
        """``EnvParams.impact_memory``: the share of the worked order remembered at the next decision."""
        return (1.0 - self.impact_decay) ** self.decision_interval if self.impact_coef > 0 else 0.0


def execution_costs(manifest: dict) -> ExecutionCosts:
    """The bundle's execution settings (its ``env_params``, and ``data``'s ``volume_scale``; defaults
    for those it lacks)."""
    env = dict(manifest.get("env_params") or {})
    scale = (manifest.get("data") or {}).get("volume_scale")
    env["volume_scale"] = scale
    kinds = {f.name: type(getattr(ExecutionCosts, f.name)) for f in fields(ExecutionCosts)}
    return ExecutionCosts(**{k: kinds[k](v) for k, v in env.items() if k in kinds and v is not None})


@dataclass(frozen=True)
class FillInputs:
    """Per ticker, at the decision bar: what the env's fill reads (``(A,)`` float64 arrays)."""

    impact: np.ndarray  # daily_vol / sqrt(adv) (envs.execution.impact_table)
    half: np.ndarray  # slippage + half-spread, a fraction of the price (envs.execution.half_cost_table)
    cap: np.ndarray  # the volume cap in shares (+inf: none)


def _known_close(close: np.ndarray) -> torch.Tensor:
    """A gap (unknown or non-positive close) reads as a quiet bar, not a jump: carried forward."""
    known = pd.DataFrame(np.asarray(close, dtype=np.float64)).where(lambda f: f > 0)
    return torch.tensor(known.ffill().bfill().fillna(1.0).to_numpy())


def fill_inputs(
    costs: ExecutionCosts,
    bars: Mapping[str, np.ndarray],
    session_id: np.ndarray,
    fill_session: int,
    bars_per_session: int,
) -> FillInputs:
    """The env's fill inputs of an order sent at the last of ``bars`` (``"close"``, ``"high"``,
    ``"low"``, ``"volume"``: ``(T, A)``, at or before the decision bar), its fill bar in session
    ``fill_session`` (the decision bar's, or the next one's after a session's last bar). A stand-in
    fill bar is appended for the estimates' bookkeeping (its position in the session): none of them
    reads its values (``data.liquidity``: no bar after the decision bar)."""
    close = _known_close(bars["close"])
    if close.shape[0] == 0:
        zeros = np.zeros(close.shape[1])
        return FillInputs(zeros, zeros + _fixed_half(costs), np.full_like(zeros, math.inf))

    def extended(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x[-1:]])

    def known(name: str) -> torch.Tensor:  # a gap's high / low: the carried close
        raw = torch.as_tensor(np.asarray(bars[name], dtype=np.float64))
        return extended(torch.where(torch.isfinite(raw) & (raw > 0), raw, close))

    volume = torch.as_tensor(np.nan_to_num(np.asarray(bars["volume"], dtype=np.float64), nan=0.0))
    sid = torch.as_tensor(np.append(np.asarray(session_id, dtype=np.int64), fill_session))
    c, v = extended(close), extended(volume)
    daily_vol, adv = trailing_liquidity(c, v, sid, bars_per_session)
    scale = costs.volume_scale  # [data] volume_scale, applied to adv and expected volume as the env's
    vol, dv = daily_vol[-2].double(), adv[-2].double() * scale
    impact = torch.where(dv > 0, vol / dv.clamp(min=1e-12).sqrt(), 0.0).to(torch.float32).double()
    expected = expected_volume(v, sid)[-2].double() * scale
    cap = (
        expected * costs.max_participation
        if costs.max_participation > 0
        else torch.full_like(expected, math.inf)
    )
    if costs.spread == "estimate":
        estimate = spread_estimate(known("high"), known("low"), c, sid)[-2].double()
        half = estimate.clamp(min=costs.spread_bps * 1e-4) * costs.spread_scale + costs.slippage_bps * 1e-4
        half = half.to(torch.float32).double()  # the env's table is float32
    else:
        half = torch.full_like(expected, _fixed_half(costs))
    return FillInputs(impact.numpy(), half.numpy(), cap.numpy())


def _fixed_half(costs: ExecutionCosts) -> float:
    return (costs.slippage_bps + costs.spread_scale * costs.spread_bps) * 1e-4


def impact_scales(
    close: np.ndarray, volume: np.ndarray, session_id: np.ndarray, volume_scale: float = 1.0
) -> np.ndarray:
    """``(A,)`` square-root impact scale ``daily_vol / sqrt(adv)`` at the last of ``(T, A)`` bars
    (0 where there is no volume), from bars at or before it only (``data.liquidity``), ``adv``
    times ``volume_scale`` (``[data] volume_scale``)."""
    if len(close) == 0:
        return np.zeros(close.shape[1] if close.ndim == 2 else 0)
    v = torch.as_tensor(np.nan_to_num(np.asarray(volume, dtype=np.float64), nan=0.0))
    daily_vol, adv = trailing_liquidity(_known_close(close), v, torch.as_tensor(np.asarray(session_id)))
    vol, dv = daily_vol[-1].double(), adv[-1].double() * volume_scale
    return torch.where(dv > 0, vol / dv.clamp(min=1e-12).sqrt(), 0.0).numpy()


def model_price(
    costs: ExecutionCosts,
    price: float,
    side: str,
    qty: float,
    impact: float,
    half: float | None = None,
    carried: float = 0.0,
) -> float:
    """The fill price the model predicts for ``qty`` shares on ``side`` at reference ``price``:
    ``half`` the size-free part (``None``: the fixed one), ``carried`` the same-side shares of the
    order worked so far (``m``)."""
    f64 = lambda x: torch.tensor([float(x)], dtype=torch.float64)  # noqa: E731
    frac = fill_frac(
        costs, f64(abs(float(qty))), f64(impact), f64(carried), None if half is None else f64(half)
    )
    sign = 1.0 if side == "buy" else -1.0
    return float(price) * (1.0 + sign * float(frac[0]))


def model_fill(
    costs: ExecutionCosts,
    inputs: FillInputs,
    asset: int,
    price: float,
    side: str,
    qty: float,
    remembered: float = 0.0,
    whole: bool = False,
) -> tuple[float, float]:
    """``(shares, price)`` the env fills of an order for ``qty`` shares of ``asset`` on ``side`` at
    reference ``price``: capped at the volume cap (whole shares with ``whole``), priced with the
    decayed order ``remembered`` (signed shares, :func:`worked_orders`)."""
    cap = float(inputs.cap[asset])
    if whole and math.isfinite(cap):
        cap = math.floor(cap)
    shares = min(float(qty), cap)
    sign = 1.0 if side == "buy" else -1.0
    carried = float(carried_order(torch.tensor([remembered]), torch.tensor([sign]))[0])
    fill = model_price(
        costs, price, side, shares, float(inputs.impact[asset]), float(inputs.half[asset]), carried
    )
    return shares, fill


def worked_orders(
    decisions: Iterable[str], fills: Mapping[str, Mapping[str, float]], memory: float
) -> dict[str, float]:
    """The impact memory at the next decision, per ticker (signed shares, ``EnvState.order`` times
    ``memory``): replayed over the bundle's earlier ``decisions`` (in time order) with their signed
    filled shares ``fills[decision][ticker]``, decayed by ``memory`` per decision as the env does."""
    order: dict[str, float] = {}
    for decision in decisions:
        traded = fills.get(decision, {})
        for ticker in set(order) | set(traded):
            remembered = torch.tensor([order.get(ticker, 0.0) * memory], dtype=torch.float64)
            step = torch.tensor([float(traded.get(ticker, 0.0))], dtype=torch.float64)
            order[ticker] = float(worked_order(remembered, step)[0])
    return {t: x * memory for t, x in order.items() if x != 0.0}
