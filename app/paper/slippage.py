"""Paper trading's check of the execution model: the fill price it predicts for each order, and the
slippage the broker's fills realize against that prediction, per champion and per ticker.

At order time each order is priced with the env's rule (``envs.execution``): from the decision bar's
close ``p`` (the reference the cycle decides on), a buy of ``q`` shares is predicted to fill at
``p * (1 + frac(q; m))`` and a sell at ``p * (1 - frac(q; m))``, with ``frac(q; m) = slippage_bps /
1e4 + half + impact_coef * impact * g(q, m)``. ``half`` is the half-spread of this name at this time
of day: with ``[env] spread = "estimate"`` (the default) the bars' own estimate
(``data.liquidity.spread_estimate`` over the fetched bars, at least ``spread_bps / 1e4``), times
``spread_scale``; only with ``spread = "fixed"`` is it ``spread_scale * spread_bps / 1e4`` for every
name. ``impact = daily_vol / sqrt(adv)`` from the trailing estimates of ``data.liquidity`` over the
bars the cycle fetched (at or before the decision bar; ``adv`` times the bundle's ``volume_scale``),
and ``g(q, m)`` the square-root law's growth from the ``m`` shares of the same order already worked
(``sqrt(q)`` with none). The settings are the bundle's ``env_params`` (the config's ``[env]``
defaults for a setting the bundle does not name). The journal keeps it as the order's
``model_price`` (``app.paper.fill_model.model_price``, inputs from ``fill_inputs``;
this module reads the journal only, without torch, for ``podracer status``).

Slippage in bps, signed so that positive is a cost: ``side * (price / p - 1) * 1e4`` with ``side`` +1
for a buy, -1 for a sell; realized with the broker's average fill price, predicted with
``model_price``. :func:`slippage_report` averages both over the filled orders of each bundle.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def slippage_bps(side: pd.Series, price: pd.Series, reference: pd.Series) -> pd.Series:
    """Signed slippage of ``price`` against ``reference`` in bps (positive: a cost)."""
    sign = np.where(side.eq("buy"), 1.0, -1.0)
    return sign * (price.astype(float) / reference.astype(float) - 1.0) * 1e4


def filled_slippage(orders: pd.DataFrame) -> pd.DataFrame:
    """One row per filled order that has a model price: ``bundle_id, ticker, realized_bps, model_bps``."""
    columns = ["bundle_id", "ticker", "realized_bps", "model_bps"]
    if orders.empty or "model_price" not in orders.columns:
        return pd.DataFrame(columns=columns)
    num = orders[["filled_qty", "filled_avg_price", "est_price", "model_price"]].apply(
        pd.to_numeric, errors="coerce"
    )
    ok = (num["filled_qty"] > 0) & (num["filled_avg_price"] > 0) & (num["est_price"] > 0)
    ok &= num["model_price"] > 0
    rows, num = orders[ok], num[ok]
    return pd.DataFrame(
        {
            "bundle_id": rows["bundle_id"].to_numpy(),
            "ticker": rows["ticker"].to_numpy(),
            "realized_bps": slippage_bps(rows["side"], num["filled_avg_price"], num["est_price"]),
            "model_bps": slippage_bps(rows["side"], num["model_price"], num["est_price"]),
        }
    )


def slippage_report(orders: pd.DataFrame, by_ticker: bool = False) -> pd.DataFrame:
    """Per bundle (and ticker, with ``by_ticker``): ``fills``, mean ``realized_bps`` and ``model_bps``
    over the filled orders the model priced, and ``gap_bps`` (realized less model)."""
    keys = ["bundle_id", "ticker"] if by_ticker else ["bundle_id"]
    fills = filled_slippage(orders)
    if fills.empty:
        return pd.DataFrame(columns=[*keys, "fills", "realized_bps", "model_bps", "gap_bps"])
    out = (
        fills.groupby(keys, sort=True)
        .agg(
            fills=("realized_bps", "size"),
            realized_bps=("realized_bps", "mean"),
            model_bps=("model_bps", "mean"),
        )
        .reset_index()
    )
    out["gap_bps"] = out["realized_bps"] - out["model_bps"]
    return out
