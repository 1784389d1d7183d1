"""Data snooping, measured where the selection happened: the validation window, across every pod tried.

A tournament compares many pods on the validation window and keeps the best; its validation Sharpe
ratio is inflated by that choice. Three diagnostics of that step, from the ``(T, N)`` matrix of every
scored pod's daily validation returns (``agents.tournament.pod.read_valid_returns_matrix``):

- **Hansen's SPA** (:func:`spa_test`, ``arch.bootstrap.SPA``): H0 "no pod beats buy-and-hold on the
  validation window"; losses are the negative daily returns, the benchmark is buy-and-hold's daily
  validation returns on the same dates, stationary bootstrap (block length: the median of
  ``optimal_block_length``'s ``stationary`` column over the pods' excess returns), the **consistent**
  p-value (Hansen 2005: pods far worse than the benchmark are not re-centred, so hopeless pods do not
  dilute the test). The bootstrap resamples all pods together, so their correlation is accounted for.
  The statistic is arch's: the largest mean loss differential (the loss differentials' variances
  enter only the consistent re-centring rule).
- **Effective trials** (:func:`cluster_trials`): children copy their parents' weights, so the pods are
  far from independent. Hierarchical clustering (``scipy.cluster.hierarchy``, average linkage) on the
  correlation distance ``sqrt((1 - rho) / 2)``, cut at :data:`CLUSTER_DISTANCE` (0.5: pods whose
  returns correlate at ``rho >= 0.5`` on average join one cluster); the number of clusters is the
  effective number of independent trials, each cluster's representative its equal-weighted mean return
  series. Pods with no dispersion (all cash) have no correlation and are left out (counted).
- **Validation DSR** (:func:`validation_dsr`): the deflated Sharpe ratio of the champion's validation
  returns with the effective trials and the variance of the representatives' per-day Sharpe ratios.

The probability of backtest overfitting (``selection.probability_of_backtest_overfitting``) says whether
the ranking among pods carries information from one half of the window to the other; it is reported
beside these, not as a verdict on the champion (pods that learned the same edge rank in noise order).
``arch`` and ``scipy`` are imported on first use.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backtests import selection
from backtests.oos_test import sharpe_per_day

#: Correlation distance ``sqrt((1 - rho) / 2)`` at which clusters stop merging: 0.5 is ``rho = 0.5``.
CLUSTER_DISTANCE = 0.5
#: Bootstrap replications of the SPA test.
SPA_REPLICATIONS = 1_000


@dataclass(frozen=True)
class Clusters:
    """Trials grouped by the correlation of their returns.

    ``labels``: one cluster number per kept column (1..num_clusters); ``kept``: the column indices
    clustered; ``flat``: the column indices left out (no dispersion, or missing values);
    ``representatives`` ``(T, num_clusters)``: each cluster's equal-weighted mean return series.
    """

    labels: np.ndarray
    kept: tuple[int, ...]
    flat: tuple[int, ...]
    representatives: np.ndarray = field(repr=False)

    @property
    def num_clusters(self) -> int:
        """The effective number of independent trials."""
        return int(self.representatives.shape[1])


def cluster_trials(returns: Any, distance: float = CLUSTER_DISTANCE) -> Clusters:
    """Cluster the columns of ``returns`` ``(T, N)`` (see the module docstring)."""
    x = np.asarray(returns, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"returns must be (T, N), got shape {x.shape}")
    usable = np.isfinite(x).all(axis=0) & (x.shape[0] >= 2)
    if x.shape[0] >= 2:
        usable &= np.ptp(x, axis=0) > 0  # max == min: flat (a float std is only approximately 0)
    kept = tuple(int(j) for j in np.flatnonzero(usable))
    flat = tuple(int(j) for j in np.flatnonzero(~usable))
    if not kept:
        return Clusters(np.empty(0, np.int64), kept, flat, np.empty((x.shape[0], 0)))
    cols = x[:, list(kept)]
    if len(kept) == 1:
        labels = np.ones(1, dtype=np.int64)
    else:
        from scipy.cluster.hierarchy import fcluster, linkage
        from scipy.spatial.distance import squareform

        rho = np.clip(np.corrcoef(cols, rowvar=False), -1.0, 1.0)
        dist = np.sqrt((1.0 - rho) / 2.0)
        np.fill_diagonal(dist, 0.0)
        tree = linkage(squareform(dist, checks=False), method="average")
        labels = fcluster(tree, t=distance, criterion="distance").astype(np.int64)
    reps = np.column_stack([cols[:, labels == c].mean(axis=1) for c in np.unique(labels)])
    return Clusters(labels, kept, flat, reps)


@dataclass(frozen=True)
class ValidationDSR:
    """The champion's validation Sharpe deflated for the effective trials."""

    dsr: float | None
    sharpe: float | None  # per day
    hurdle: float | None  # per day: E[max SR] of the effective trials
    variance: float | None  # per day: of the representatives' Sharpe ratios
    note: str | None = None


def validation_dsr(champion_returns: Any, clusters: Clusters) -> ValidationDSR:
    """DSR of ``champion_returns`` (its daily validation returns) against the hurdle of
    ``clusters.num_clusters`` trials whose per-day Sharpe ratios vary as the representatives' do.

    One cluster: no hurdle (the PSR). Two or more whose Sharpe ratios do not spread: the null variance
    ``1 / (T - 1)`` stands in (said in ``note``). None without clusters or without a champion Sharpe.
    """
    r = np.array(champion_returns, dtype=np.float64)  # a writable copy (torch warns on read-only arrays)
    sharpe = sharpe_per_day(r)
    k = clusters.num_clusters
    if sharpe is None or k == 0:
        note = "the champion's validation returns have no Sharpe ratio" if sharpe is None else None
        return ValidationDSR(None, sharpe, None, None, note or "no trial with a Sharpe ratio")
    variance, note = None, None
    if k >= 2:
        sharpes = [sharpe_per_day(clusters.representatives[:, c]) for c in range(k)]
        defined = [s for s in sharpes if s is not None]
        variance = float(np.var(defined, ddof=1)) if len(defined) >= 2 else 0.0
        if variance <= 0.0:
            variance = 1.0 / (len(r) - 1)
            note = "the clusters' Sharpe ratios do not spread: null variance 1/(T-1) used"
    hurdle = selection.expected_max_sharpe(k, variance or 0.0)
    dsr = float(selection.probabilistic_sharpe_ratio(r, hurdle))
    return ValidationDSR(dsr if math.isfinite(dsr) else None, sharpe, hurdle, variance, note)


def spa_test(
    trial_returns: Any, benchmark_returns: Any, *, replications: int = SPA_REPLICATIONS, seed: int = 0
) -> tuple[float | None, float | None]:
    """Hansen's SPA consistent p-value of "the best trial beats the benchmark", and the block length.

    ``trial_returns`` ``(T, N)`` and ``benchmark_returns`` ``(T,)`` on the same dates; columns with a
    missing value are left out. None with no usable column or fewer than 4 rows.
    """
    from arch.bootstrap import SPA, optimal_block_length

    x = np.asarray(trial_returns, dtype=np.float64)
    b = np.asarray(benchmark_returns, dtype=np.float64)
    if x.ndim != 2 or b.shape != (x.shape[0],) or x.shape[0] < 4 or not np.isfinite(b).all():
        return None, None
    x = x[:, np.isfinite(x).all(axis=0)]
    if x.shape[1] == 0:
        return None, None
    diff = x - b[:, None]
    usable = np.ptp(diff, axis=0) > 0
    blocks = np.empty(0)
    if usable.any():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # short series: 0/0 autocorrelations
                blocks = optimal_block_length(diff[:, usable])["stationary"].to_numpy()
        except (ValueError, IndexError, np.linalg.LinAlgError):
            blocks = np.empty(0)
    blocks = blocks[np.isfinite(blocks)]
    block = max(1, math.ceil(float(np.median(blocks)))) if len(blocks) else max(1, int(math.sqrt(len(b))))
    spa = SPA(-b, -x, block_size=block, reps=int(replications), bootstrap="stationary", seed=int(seed))
    spa.compute()
    return float(spa.pvalues["consistent"]), float(block)


@dataclass(frozen=True)
class SelectionInputs:
    """What the validation diagnostics need: every trial's daily validation returns ``(T, N)``, their
    ids, the column of the selected strategy (None: unknown) and buy-and-hold's daily validation
    returns on the same dates (None: not computed)."""

    returns: Any
    ids: Sequence[str] = ()
    champion: int | None = None
    benchmark: Any | None = None
    benchmark_name: str = "buy_and_hold"


def selection_diagnostics(inputs: SelectionInputs | None, *, seed: int = 0) -> dict[str, Any]:
    """The ``selection`` block of metrics.json (see ``backtests.report``)."""
    empty: dict[str, Any] = {
        "window": "valid",
        "num_trials": 0,
        "spa_p_value": None,
        "spa_p_value_kind": "consistent",
        "spa_benchmark": None,
        "spa_block_length": None,
        "spa_replications": SPA_REPLICATIONS,
        "effective_trials": None,
        "cluster_distance": CLUSTER_DISTANCE,
        "trials_flat": 0,
        "valid_sharpe_per_day": None,
        "valid_sharpe_hurdle": None,
        "cluster_sharpe_variance": None,
        "valid_dsr": None,
        "note": None,
        "seed": int(seed),
        "reason": "no validation returns of the trials (a single run, or a run from before they were kept)",
    }
    if inputs is None:
        return empty
    x = np.asarray(inputs.returns, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        return empty
    out = {**empty, "num_trials": int(x.shape[1]), "reason": None}
    clusters = cluster_trials(x)
    out.update(effective_trials=clusters.num_clusters, trials_flat=len(clusters.flat))
    if inputs.champion is None:
        out["reason"] = "the selected strategy is not among the trials' validation returns"
    else:
        v = validation_dsr(x[:, inputs.champion], clusters)
        out.update(
            valid_sharpe_per_day=v.sharpe,
            valid_sharpe_hurdle=v.hurdle,
            cluster_sharpe_variance=v.variance,
            valid_dsr=v.dsr,
            note=v.note,
        )
    if inputs.benchmark is not None:
        p, block = spa_test(x, inputs.benchmark, seed=seed)
        out.update(spa_p_value=p, spa_benchmark=inputs.benchmark_name, spa_block_length=block)
    return out
