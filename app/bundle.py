"""Open and verify an exported bundle (``app.export`` writes it) for onnxruntime; never imports torch.

``load_bundle(dir) -> Bundle`` verifies the manifest's own hash, the sha256 of every file and the
shapes against the manifest before anything can act on it (``CheckpointError`` otherwise). Paper
trading runs on this module alone, so a live process needs onnxruntime and numpy, not torch: that is
why it is apart from ``app.export`` (which needs torch to build the graph) and why it keeps its own
copy of the observation layout's ``NUM_GLOBAL`` (every ``envs`` module imports torch), pinned to
``envs.observation`` by tests/test_export.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from data.artifact import Artifact
from data.errors import ArtifactError, CheckpointError, one_line

BUNDLE_FORMAT = "podracer-bundle"
NUM_GLOBAL = 2  # obs[:, 0] cash fraction, obs[:, 1] time of day (envs.observation's layout)
PER_ASSET_FIXED = 2  # per asset: position weight, tradable flag, then the features (envs.observation)


def ort_session(path: Path) -> Any:
    """A one-thread CPU onnxruntime session; ``CheckpointError`` when onnxruntime cannot load the file."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own hierarchy
        raise CheckpointError(
            f"{path}: onnxruntime cannot load it ({one_line(err, 200, typed=False)})"
        ) from None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path`` (``{}`` when absent or not an object); invalid JSON is a ``CheckpointError``."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    return data if isinstance(data, dict) else {}


def manifest_hash(manifest: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``manifest`` without its ``bundle_id``."""
    body = {k: v for k, v in manifest.items() if k != "bundle_id"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class Parity(BaseModel):
    """The export's parity check: onnxruntime against torch on ``num_obs`` sample observations."""

    model_config = ConfigDict(extra="allow", frozen=True)

    max_abs_diff: float
    tolerance: float
    num_obs: int


class BundleManifest(Artifact):
    """``manifest.json`` of a bundle, on the artifact base (a newer ``schema_version`` or a malformed
    field is refused in one line). ``bundle_id`` is :func:`manifest_hash` of the file's own JSON, so
    it is checked against the file as written, never against a re-serialization. Bundles written
    before ``schema_version`` carry ``format_version`` 1 and read as version 1; ``format_version`` is
    still written for readers that check it."""

    FILE: ClassVar[str] = "manifest.json"

    format: Literal["podracer-bundle"]
    format_version: Literal[1] = 1
    bundle_id: str = ""
    run_id: str
    pod_id: str
    source_checkpoint: str
    tickers: list[str]
    interval: str
    decision_interval: int
    action_mode: str
    algo: str
    num_assets: int
    num_features: int
    obs_dim: int
    observation: dict[str, str]
    feature_spec: dict[str, Any]
    # One policy's normalization statistics, or ``{"members": [...]}`` for an ensemble.
    obs_normalization: dict[str, Any]
    ensemble: dict[str, Any] | None = None
    env_params: dict[str, Any]
    data: dict[str, Any]
    windows: dict[str, Any]
    metrics: dict[str, Any] | None = None
    versions: dict[str, str]
    exporter: str
    parity: Parity
    files: dict[str, str]


def write_manifest(manifest: BundleManifest, path: Path) -> BundleManifest:
    """Write ``manifest`` with its ``bundle_id`` (atomically); returns it with the id. The file is
    read back and its hash checked, so a bundle that would not verify is never left behind."""
    body = manifest.model_copy(update={"bundle_id": ""}).to_json()
    stamped = manifest.model_copy(update={"bundle_id": manifest_hash(body)})
    stamped.write(path)
    if manifest_hash(read_json(path)) != stamped.bundle_id:
        raise CheckpointError(f"{path}: the manifest as written does not match its hash")
    return stamped


@dataclass
class Bundle:
    """A verified export: its manifest and an onnxruntime session (created on first use)."""

    path: Path
    manifest: dict[str, Any]
    _session: Any = field(default=None, repr=False)

    @property
    def bundle_id(self) -> str:
        return str(self.manifest["bundle_id"])

    @property
    def tickers(self) -> tuple[str, ...]:
        return tuple(self.manifest["tickers"])

    @property
    def num_assets(self) -> int:
        return int(self.manifest["num_assets"])

    @property
    def num_features(self) -> int:
        return int(self.manifest["num_features"])

    @property
    def obs_dim(self) -> int:
        return int(self.manifest["obs_dim"])

    @property
    def interval(self) -> str:
        return str(self.manifest["interval"])

    @property
    def decision_interval(self) -> int:
        return int(self.manifest["decision_interval"])

    @property
    def feature_spec(self) -> dict[str, Any]:
        return dict(self.manifest["feature_spec"])

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = ort_session(self.path / "policy.onnx")
        return self._session

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Target weights ``(N, A)`` for raw observations ``(N, obs_dim)`` (onnxruntime only)."""
        obs = np.ascontiguousarray(obs, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise CheckpointError(f"bundle expects observations (N, {self.obs_dim}), got {obs.shape}")
        return self.session.run(["weights"], {"obs": obs})[0]


def load_bundle(path: str | os.PathLike[str], *, expect_tickers: Sequence[str] | None = None) -> Bundle:
    """Open and verify a bundle: manifest, sha256 of every file, shapes; ``CheckpointError`` otherwise."""
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise CheckpointError(f"no bundle at {path} (manifest.json missing)")
    manifest = read_json(manifest_path)
    if manifest.get("format") != BUNDLE_FORMAT:
        raise CheckpointError(f"{manifest_path}: not a podracer bundle manifest")
    try:
        BundleManifest.parse(manifest, manifest_path)
    except ArtifactError as err:
        raise CheckpointError(str(err)) from None
    # The hash of the file as written (bundles of every version), not of the model.
    if manifest.get("bundle_id") != manifest_hash(manifest):
        raise CheckpointError(f"{manifest_path} was modified after export (content hash mismatch)")
    files = manifest.get("files") or {}
    if "policy.onnx" not in files:
        raise CheckpointError(f"{manifest_path}: policy.onnx is not listed")
    for name, digest in files.items():
        if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            # An empty or malformed digest must not skip the check.
            raise CheckpointError(f"{manifest_path}: {name} has no valid sha256 recorded")
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"bundle {path}: {name} is missing")
        if sha256_file(file) != digest:
            raise CheckpointError(f"bundle {path}: {name} does not match its sha256 (corrupt or tampered)")
    try:
        tickers = [str(t) for t in manifest["tickers"]]
        num_assets, num_features = int(manifest["num_assets"]), int(manifest["num_features"])
        obs_dim = int(manifest["obs_dim"])
        names = list(manifest["feature_spec"]["names"])
        int(manifest["decision_interval"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{manifest_path}: incomplete manifest ({type(err).__name__}: {err})") from None
    if len(tickers) != num_assets or len(set(tickers)) != num_assets:
        raise CheckpointError(f"{manifest_path}: {len(tickers)} tickers for a {num_assets}-asset policy")
    if len(names) != num_features or obs_dim != NUM_GLOBAL + num_assets * (PER_ASSET_FIXED + num_features):
        raise CheckpointError(
            f"{manifest_path}: obs_dim {obs_dim} does not match {num_assets} assets x {num_features} features"
        )
    if expect_tickers is not None and list(expect_tickers) != tickers:
        raise CheckpointError(f"bundle {path} trades {tickers}, not {list(expect_tickers)}")
    bundle = Bundle(path=path, manifest=manifest)
    _check_graph(bundle)
    return bundle


def _check_graph(bundle: Bundle) -> None:
    """The ONNX graph's input/output widths must be the manifest's (a swapped graph is caught here)."""
    session = bundle.session
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if [i.name for i in inputs] != ["obs"] or [o.name for o in outputs] != ["weights"]:
        raise CheckpointError(f"bundle {bundle.path}: policy.onnx must map 'obs' to 'weights'")
    in_width, out_width = inputs[0].shape[-1], outputs[0].shape[-1]
    if (isinstance(in_width, int) and in_width != bundle.obs_dim) or (
        isinstance(out_width, int) and out_width != bundle.num_assets
    ):
        raise CheckpointError(
            f"bundle {bundle.path}: policy.onnx maps {in_width} -> {out_width}, manifest says "
            f"{bundle.obs_dim} -> {bundle.num_assets} (wrong tickers?)"
        )
