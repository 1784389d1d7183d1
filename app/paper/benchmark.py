"""The benchmark in charge until a champion qualifies (``paper --champion``, ``[gate] before_champion``).

With no champion in the registry yet, the account holds what the walk-forward's account holds before
a champion (``backtests.stitched.BenchmarkInCharge``): the backtest's buy-and-hold, equal weight of the
universe bought once while the account holds nothing, then held with no orders. The buy goes through
the very path a champion's orders take (:func:`app.paper.cycle.run_cycle` trades a
:class:`BenchmarkBundle` like any bundle: deterministic client order ids, the journal, the minimum
order, the execution model's price, reconciliation and the books), so when a champion takes charge its
first decision trades from those holdings as from any others.

The buy happens once: a cycle buys only while the broker holds no position and no benchmark order
went out (``Journal.has_sent``). A restart after the buy, even before its fills, buys nothing more
(the open-order reconciliation counts late fills, as for any order); a buy that the kill switch or a
halt blocked whole is decided again at the next cycle. Orders a broker failure kept from going out
(a ``partial`` cycle) are not sent later: that part of the account stays in cash until a champion
trades.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.bundle import Bundle
from data.features import DEFAULT_WINDOWS, feature_names, make_spec
from envs.observation import obs_dim

#: What ``[gate] before_champion`` may say: hold the benchmark, or cash (journal ``no_champion``, wait).
BEFORE_CHAMPION = ("benchmark", "cash")
BENCHMARK_LABEL = "benchmark (no qualified champion)"
CASH_LABEL = "cash (no qualified champion)"


def benchmark_id(tickers: tuple[str, ...]) -> str:
    """The benchmark's ``bundle_id`` on ``tickers``: ``benchmark-`` and a hash of the universe (client
    order ids and journal rows are keyed by it, so a restart computes the same ids)."""
    digest = hashlib.sha256("|".join(tickers).encode()).hexdigest()
    return f"benchmark-{digest[:16]}"


def is_cash(bundle_id: str | None) -> bool:
    """Whether a journal or heartbeat ``bundle_id`` is the all-cash book's (:func:`cash_bundle`)."""
    return bool(bundle_id) and str(bundle_id).startswith("cash-")


def is_benchmark(bundle_id: str | None) -> bool:
    """Whether a journal or heartbeat ``bundle_id`` is the benchmark's."""
    return bool(bundle_id) and str(bundle_id).startswith("benchmark-")


@dataclass
class BenchmarkBundle(Bundle):
    """Equal weight of the universe, as a bundle the cycle trades (``act`` needs no policy)."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Equal weight of every ticker (``(N, A)``); the cycle asks only when the account is empty."""
        n = np.asarray(obs).shape[0]
        return np.full((n, self.num_assets), 1.0 / self.num_assets, dtype=np.float32)


def in_charge_label(bundle_id: str | None, run_id: str | None = None) -> str:
    """What ``podracer status`` calls the bundle a paper loop trades: the benchmark, a champion's
    bundle (and its run), or none yet."""
    if not bundle_id:
        return "no bundle loaded yet: at the first cycle of a session"
    if is_benchmark(bundle_id):
        return BENCHMARK_LABEL
    if is_cash(bundle_id):
        return CASH_LABEL
    return f"bundle {str(bundle_id)[:12]}" + (f", {run_id}" if run_id else "")


def benchmark_bundle(
    tickers: list[str] | tuple[str, ...], interval: str, env: dict[str, Any]
) -> BenchmarkBundle:
    """The benchmark on ``tickers`` at bar ``interval``; ``env``: the config's ``[env]`` (the minimum
    order, the weight cap and the execution model's costs, as a bundle's ``env_params``)."""
    universe = tuple(dict.fromkeys(str(t) for t in tickers))
    if not universe:
        raise ValueError("the benchmark needs at least one ticker")
    names = feature_names(DEFAULT_WINDOWS)
    spec = make_spec([0.0] * len(names), [1.0] * len(names), interval=interval)  # read, never used
    manifest = {
        "bundle_id": benchmark_id(universe),
        "tickers": list(universe),
        "num_assets": len(universe),
        "num_features": len(names),
        "obs_dim": obs_dim(len(universe), len(names)),
        "interval": interval,
        "decision_interval": int(env.get("decision_interval") or 1),
        "feature_spec": spec,
        "env_params": dict(env),
    }
    return BenchmarkBundle(path=Path("benchmark"), manifest=manifest)


@dataclass
class CashBundle(BenchmarkBundle):
    """Zero weight of every ticker: what sells a demoted champion's book under ``[paper]
    before_champion = "cash"`` (traded once, through the champions' order path)."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        """No position in any ticker (``(N, A)`` zeros)."""
        n = np.asarray(obs).shape[0]
        return np.zeros((n, self.num_assets), dtype=np.float32)


def cash_bundle(tickers: list[str] | tuple[str, ...], interval: str, env: dict[str, Any]) -> CashBundle:
    """The all-cash book on ``tickers`` (as :func:`benchmark_bundle`; its id ``cash-`` and a hash)."""
    bench = benchmark_bundle(tickers, interval, env)
    bundle_id = "cash-" + bench.bundle_id.removeprefix("benchmark-")
    return CashBundle(path=Path("cash"), manifest={**bench.manifest, "bundle_id": bundle_id})
