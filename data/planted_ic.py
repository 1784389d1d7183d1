"""The planted level as a daily information coefficient: how a synthetic market's edge compares with a
real factor's.

``realized_daily_ic(market, predictor)``: the mean over sessions of the rank IC, the Spearman
correlation across names between the predictor at a session's last bar (its close: where a daily
factor is read) and the next session's log return, close to close (market, sector and overnight gap
included: the return a holder gets). Good published daily factors have 0.02-0.05 (docs/data.md).

``market`` is a generated ``Panel`` (the returns come from its closes) or a ``SyntheticSpec``: then the
session returns are computed from the generator's draws without building the bars (the same numbers
as the panel's closes give, to rounding; ``tests/test_data_planted.py``), a few times faster, and the
predictor defaults to the spec's planted one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import rankdata

from data.align import Panel
from data.errors import DataError
from data.planted import session_bounds
from data.synthetic import SyntheticSpec, _draws, predictor_of


def spec_session_returns(spec: SyntheticSpec, draws: dict[str, Any] | None = None) -> np.ndarray:
    """``(S, A)`` log return of each session, close to close (the first session's from the first
    open's reference price), as :func:`data.synthetic.generate`'s closes give it."""
    d = _draws(spec) if draws is None else draws
    starts, _ = session_bounds(d["sid"])
    per_bar = np.add.reduceat(d["idio_ret"], starts, axis=0)
    per_bar += d["beta"][None, :] * np.add.reduceat(d["market"], starts)[:, None]
    per_bar += d["load"][None, :] * np.add.reduceat(d["sectors"], starts, axis=0)[:, d["sector"]]
    # generate() draws the overnight gaps next, from the same generator: the same numbers here.
    gaps = 0.004 * d["rng"].standard_normal((len(starts) - 1, d["num_assets"]))
    per_bar[1:] += gaps
    return per_bar


def panel_session_returns(panel: Panel) -> np.ndarray:
    """``(S, A)`` log close-to-close return of each session (the first session's is NaN)."""
    starts, counts = session_bounds(panel.grid.session_id)
    log_close = np.log(panel.close[starts + counts - 1])
    return np.vstack([np.full((1, log_close.shape[1]), np.nan), np.diff(log_close, axis=0)])


def daily_ic_series(market: Panel | SyntheticSpec, predictor: np.ndarray | None = None) -> np.ndarray:
    """``(S - 1,)``: rank IC of the predictor at session ``s``'s last bar with session ``s + 1``'s
    return; NaN where either has no spread across names (a constant predictor: no ranking)."""
    if isinstance(market, SyntheticSpec):
        draws = _draws(market)
        if predictor is None:
            predictor = predictor_of(market, draws)
        returns, session_id = spec_session_returns(market, draws), draws["sid"]
    elif isinstance(market, Panel):
        if predictor is None:
            raise DataError("realized_daily_ic: a panel needs its predictor")
        returns, session_id = panel_session_returns(market), market.grid.session_id
    else:
        raise DataError(f"realized_daily_ic: a Panel or a SyntheticSpec, not {type(market).__name__}")
    predictor = np.asarray(predictor, dtype=np.float64)
    if predictor.shape != (len(session_id), returns.shape[1]):
        raise DataError(
            f"realized_daily_ic: predictor {predictor.shape} does not match the bars "
            f"({len(session_id)}, {returns.shape[1]})"
        )
    starts, counts = session_bounds(session_id)
    return rank_ic(predictor[starts + counts - 1][:-1], returns[1:])


def rank_ic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of ``x`` with the same row of ``y`` (``(S, A)`` each; ties
    take their average rank, as ``scipy.stats.spearmanr``); NaN for a row without spread."""
    rx = rankdata(x, axis=1) - (x.shape[1] + 1) / 2
    ry = rankdata(y, axis=1) - (y.shape[1] + 1) / 2
    norm = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (rx * ry).sum(axis=1) / norm
    out[~np.isfinite(out) | (norm == 0)] = np.nan
    return out


def realized_daily_ic(market: Panel | SyntheticSpec, predictor: np.ndarray | None = None) -> float:
    """Mean of :func:`daily_ic_series` over the sessions where it is defined (NaN if none)."""
    series = daily_ic_series(market, predictor)
    finite = series[np.isfinite(series)]
    return float(finite.mean()) if finite.size else float("nan")
