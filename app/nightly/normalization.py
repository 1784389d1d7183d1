"""Like with like: each policy is evaluated on features normalized with its OWN statistics.

A policy learned on features normalized with the statistics of its train window, and its export
bundle carries them (the paper trader computes its features with them). Tonight's market is
normalized with tonight's train window; feeding those features to the incumbent champion would score
a policy it never was (a shifted mean or scale moves every input). So the champion's evaluation
features are rebuilt from tonight's bars with the champion's own feature spec:

- :func:`champion_feature_spec` finds the spec the champion was trained and exported with (the copy
  kept next to its policy at promotion, else its bundle's manifest, else its run's record);
- :func:`with_feature_spec` recomputes the causal features of the whole market from its bars with
  that spec (``data.features``: the same code path as training and paper trading) and returns the
  same window with them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from app.champion import Champion
from app.runs import RunDir
from data.artifact import Artifact
from data.errors import ArtifactError, DataError, PodracerError
from data.features import check_spec, compute_set, normalize
from data.fold_market import market_bars
from data.market import MarketData

log = logging.getLogger(__name__)

SPEC_FILE = "feature_spec.json"


class FeatureSpecFile(Artifact):
    """``feature_spec.json`` next to a kept policy: the feature spec (``data.features``: its own
    ``version``, names, windows, mean, std, clip) its run was trained with, on the document base. A
    file written before the base carried no ``schema_version`` and reads as version 1."""

    FILE = SPEC_FILE
    SCHEMA_VERSION = 1

    def spec(self) -> dict[str, Any]:
        """The feature spec itself (``data.features.check_spec`` reads it)."""
        return self.model_dump(exclude={"schema_version"})


def write_spec_file(policy_dir: Path, spec: Mapping[str, Any]) -> Path:
    """Write ``spec`` as ``policy_dir``'s ``feature_spec.json``, atomically."""
    return FeatureSpecFile.model_validate(dict(spec)).write(Path(policy_dir) / SPEC_FILE)


def read_spec_file(policy_dir: Path) -> dict[str, Any] | None:
    """The feature spec kept next to a policy; None when absent or unreadable (the callers fall back
    to the bundle's manifest or the run's record, or evaluate without it)."""
    try:
        return FeatureSpecFile.read(Path(policy_dir) / SPEC_FILE).spec()
    except ArtifactError:
        return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def champion_feature_spec(champion: Champion) -> tuple[dict[str, Any] | None, str]:
    """``(feature spec, where it came from)`` of a registry champion; ``(None, reason)`` if none is found."""
    candidates: list[tuple[str, Any]] = []
    policy_dir = Path(champion.policy_dir)
    candidates.append((f"{policy_dir / SPEC_FILE}", lambda: read_spec_file(policy_dir)))
    if champion.bundle:
        bundle = Path(champion.bundle)
        candidates.append(
            (
                f"{bundle / 'manifest.json'}",
                lambda: (_read(bundle / "manifest.json") or {}).get("feature_spec"),
            )
        )
    run_dir = champion.run_dir
    if run_dir is not None:

        def from_record() -> Any:
            try:
                return RunDir.at(run_dir).info().feature_spec
            except PodracerError:
                return None

        candidates.append((f"{run_dir} run record", from_record))
    for where, read in candidates:
        spec = read()
        if not spec:
            continue
        try:
            check_spec(spec)
        except DataError:
            continue
        return dict(spec), where
    return None, "no feature spec recorded with the champion"


def with_feature_spec(full: MarketData, window: MarketData, spec: Mapping[str, Any]) -> MarketData:
    """``window`` (a slice of ``full``) with features recomputed from ``full``'s bars and normalized by
    ``spec``. The features are causal, so computing them on the whole history gives each bar of the
    window the same value as the live feature pipeline would."""
    check_spec(spec)
    start = int((full.timestamps == window.timestamps[0]).nonzero()[0][0]) if window.num_steps else 0
    stop = start + window.num_steps
    if window.num_steps and not (full.timestamps[start:stop] == window.timestamps).all():
        raise DataError("with_feature_spec: the window is not a slice of the market")
    raw = compute_set(market_bars(full), spec["windows"])
    features = normalize(raw, spec).to(torch.float32)
    rebuilt = dataclasses.replace(
        full, features=features, feature_names=tuple(spec["names"]), feature_spec=dict(spec)
    )
    return rebuilt.slice(start, stop)
