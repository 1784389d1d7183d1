"""Export a trained policy as a self-describing, hash-verified bundle for onnxruntime.

``export_bundle(run_dir, pod=None, out=None) -> Path`` writes ``<home>/exports/<run>-<pod>/``:

- ``policy.onnx``: raw observation ``obs (N, obs_dim)`` float32 -> target weights ``weights (N, A)``
  float32. The policy's frozen observation normalization and the action post-processing (softmax over
  assets + cash for ``"weights"``, then the env's own rule: negatives clipped to 0, rows above 1 scaled
  to 1; clamp to [-1, 1] for ``"shares"``) are inside the graph; the batch axis is dynamic.
- ``policy.pt`` (optional, ``torchscript=True``): the same wrapper traced with TorchScript.
- ``manifest.json``: tickers, interval, decision interval, observation layout, feature spec (with the
  train-window normalization), observation normalization statistics, env params, data / validation
  windows, backtest metrics when ``<run>/backtest/metrics.json`` exists, package versions, the parity
  check result, and the sha256 of every other file. ``bundle_id`` is the sha256 of the manifest's
  own canonical JSON (without ``bundle_id``), so editing the manifest is caught too.

At export a parity check runs onnxruntime against the torch policy on a batch of observations and
fails (no bundle written) when the max abs difference exceeds ``PARITY_TOLERANCE``.
``load_bundle(dir) -> Bundle`` verifies every hash and the shapes against the manifest before
anything can act on it (``CheckpointError`` otherwise). Loading imports onnxruntime, never torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import platform
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from app.runs import RunDir
from data.atomic import atomic_write_json, replace_dir
from data.errors import CheckpointError, PodracerError

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "podracer-bundle"
BUNDLE_VERSION = 1
PARITY_TOLERANCE = 1e-5
# The layout of envs/observation.py (NUM_GLOBAL; sample_observations below writes it too), not
# imported: loading a bundle must not import torch, and every envs module does. Pinned to it by
# tests/test_export.py.
NUM_GLOBAL = 2  # obs[:, 0] cash fraction, obs[:, 1] time of day
_VERSIONED = ("podracer", "torch", "onnx", "onnxruntime", "onnxscript", "numpy", "pandas", "alpaca-py")


# --- the graph -------------------------------------------------------------------------------------
def _wrapper(policy: Any) -> Any:
    """A torch module: raw obs -> post-processed target action, exactly what ``policy.act`` returns."""
    import torch

    class ExportedPolicy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = policy

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            p = self.policy
            norm = p.obs_norm.normalize(obs)
            mean = p.net.actor_mean(norm)[:, : p.raw_dim]
            action = p.to_action(mean, obs)  # obs: partial rebalancing starts from the current weights
            if p.meta.action_mode == "weights":
                # The env's own rule (envs.trading): negatives to 0, rows above 1 scaled to 1. A softmax
                # already satisfies it; keeping it in the graph makes the bundle self-contained.
                action = action.clamp_min(0.0)
                action = action / action.sum(dim=1, keepdim=True).clamp_min(1.0)
            return action

    return ExportedPolicy().eval()


def sample_observations(num_assets: int, num_features: int, num: int = 256, seed: int = 0) -> np.ndarray:
    """Plausible observations for the parity check: portfolio weights on the simplex, N(0,1) features."""
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(num_assets + 1), size=num).astype(np.float32)  # assets + cash
    tod = rng.uniform(0, 1, size=num).astype(np.float32)
    feats = rng.standard_normal((num, num_assets, num_features)).astype(np.float32)
    per_asset = np.concatenate([w[:, :num_assets, None], feats], axis=2).reshape(num, -1)
    return np.concatenate([w[:, num_assets:], tod[:, None], per_asset], axis=1).astype(np.float32)


EXPORTERS = ("dynamo", "torchscript")


def _export_onnx(module: Any, example: Any, path: Path, exporter: str = "dynamo") -> str:
    """Write ``module`` to ``path`` (weights embedded, dynamic batch axis); returns the exporter used.

    ``"dynamo"`` (torch.export-based, torch 2.13's default) falls back to ``"torchscript"`` (the legacy
    TorchScript-based exporter, ~50x faster to run, deprecated upstream) if it fails.
    """
    import torch

    if exporter not in EXPORTERS:
        raise CheckpointError(f"unknown exporter {exporter!r} ({', '.join(EXPORTERS)})")
    errors = []
    onnx_log = logging.getLogger("torch.onnx")
    level = onnx_log.level
    try:
        if exporter != "dynamo":
            raise _Skip
        # The exporter prints progress on stdout and warns about optional torchvision ops: keep quiet.
        onnx_log.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(
                module,
                (example,),
                str(path),
                dynamo=True,
                input_names=["obs"],
                output_names=["weights"],
                dynamic_shapes={"obs": {0: torch.export.Dim("batch", min=1)}},
                optimize=True,
                verbose=False,
                external_data=False,  # one file, so its sha256 covers the weights
            )
        return "dynamo"
    except _Skip:
        pass
    except Exception as err:  # noqa: BLE001 - any exporter failure falls back
        errors.append(f"dynamo: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        log.warning("dynamo ONNX exporter failed (%s); trying the TorchScript-based one", errors[-1])
    finally:
        onnx_log.setLevel(level)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example,),
                str(path),
                dynamo=False,
                input_names=["obs"],
                output_names=["weights"],
                dynamic_axes={"obs": {0: "batch"}, "weights": {0: "batch"}},
                opset_version=17,
            )
        return "torchscript"
    except Exception as err:  # noqa: BLE001
        errors.append(f"legacy: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    raise CheckpointError("ONNX export failed (" + "; ".join(errors) + ")")


class _Skip(Exception):
    """Internal: skip the dynamo exporter."""


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own hierarchy
        raise CheckpointError(
            f"{path}: onnxruntime cannot load it ({str(err).splitlines()[0][:200]})"
        ) from None


def parity_check(module: Any, onnx_path: Path, obs: np.ndarray, tolerance: float = PARITY_TOLERANCE) -> float:
    """Max abs difference between onnxruntime and torch on ``obs``; ``CheckpointError`` above ``tolerance``."""
    import torch

    session = _ort_session(onnx_path)
    with torch.no_grad():
        expected = module(torch.as_tensor(obs)).cpu().numpy()
    got = session.run(["weights"], {"obs": obs})[0]
    if got.shape != expected.shape:
        raise CheckpointError(f"parity check: onnx output {got.shape} vs torch {expected.shape}")
    diff = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)))) if got.size else 0.0
    if not np.isfinite(diff) or diff > tolerance:
        raise CheckpointError(
            f"parity check failed: onnxruntime vs torch max abs diff {diff:.3g} > {tolerance:g}"
        )
    return diff


# --- run directory ---------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in _VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    return data if isinstance(data, dict) else {}


def resolve_run_dir(run: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Path:
    """A run id (under ``<home>/runs``) or a path to a run directory."""
    path = Path(run)
    if path.is_dir():
        return path
    if home is None:
        from app import context

        home = context.home()
    candidate = Path(home) / "runs" / str(run)
    if candidate.is_dir():
        return candidate
    raise CheckpointError(f"no run {run!r} (looked for {path} and {candidate})")


def _feature_spec(
    run_dir: Path, run_info: dict[str, Any], config: Any, home: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(feature spec, data windows) the policy was trained with: from the run, else rebuilt from its config."""
    windows = dict(run_info.get("windows") or {})
    for candidate in (run_info.get("feature_spec"), _read_json(run_dir / "feature_spec.json") or None):
        if candidate:
            return dict(candidate), windows
    # Not recorded: rebuild the run's market from its resolved config (deterministic: seeded synthetic
    # data or the stored bars) and take the train-window normalization it fits.
    from data.loader import load_market

    log.info("feature spec not recorded in %s: rebuilding it from config.toml", run_dir)
    splits = load_market(config.data, home=home)
    windows = windows or {k: list(v) for k, v in splits.windows().items()}
    return dict(splits.full.feature_spec), windows


def export_bundle(
    run_dir: str | os.PathLike[str],
    pod: str | None = None,
    out: str | os.PathLike[str] | None = None,
    *,
    torchscript: bool = False,
    exporter: str = "dynamo",
    tolerance: float = PARITY_TOLERANCE,
    home: str | os.PathLike[str] | None = None,
) -> Path:
    """Export the champion (or ``pod``) of a run to an onnxruntime bundle; returns the bundle folder."""
    import torch

    from agents.policy import Policy
    from app.config import load_config
    from data.features import check_spec

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"run directory {run_dir} does not exist")
    home = Path(home) if home is not None else run_dir.parent.parent
    policy_dir = run_dir / "pods" / pod if pod else run_dir / "champion"
    if not policy_dir.is_dir():
        raise CheckpointError(f"no policy at {policy_dir} ({'pod ' + pod if pod else 'champion'} not found)")
    policy = Policy.load(policy_dir, device="cpu")
    config = load_config(run_dir / "config.toml" if (run_dir / "config.toml").is_file() else None)
    try:
        run_info = RunDir.at(run_dir).read()
    except PodracerError as err:
        raise CheckpointError(str(err)) from None
    spec, windows = _feature_spec(run_dir, run_info, config, home)
    try:
        check_spec(spec)
    except Exception as err:  # noqa: BLE001 - DataError -> the bundle's own error type
        raise CheckpointError(f"{run_dir}: {err}") from None

    tickers = list(policy.meta.tickers) or list(run_info.get("tickers") or [])
    num_assets, num_features = policy.num_assets, policy.config.num_features
    if len(tickers) != num_assets or len(set(tickers)) != num_assets:
        raise CheckpointError(
            f"{policy_dir}: {len(tickers)} tickers recorded for a {num_assets}-asset policy"
        )
    if len(spec["names"]) != num_features:
        raise CheckpointError(
            f"{run_dir}: feature spec has {len(spec['names'])} features, the policy expects {num_features}"
        )
    pod_id = pod or str((run_info.get("champion") or {}).get("pod_id") or "champion")
    out_dir = Path(out) if out else home / "exports" / f"{run_dir.name}-{pod_id}"

    module = _wrapper(policy)
    obs = sample_observations(num_assets, num_features)
    # Build in a sibling temp folder and swap it in at the end: never a half-written bundle.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        exporter = _export_onnx(module, torch.as_tensor(obs[:2]), staging / "policy.onnx", exporter)
        max_diff = parity_check(module, staging / "policy.onnx", obs, tolerance)
        files = ["policy.onnx"]
        if torchscript:
            try:
                with torch.no_grad():
                    traced = torch.jit.trace(module, torch.as_tensor(obs[:2]))
                traced.save(str(staging / "policy.pt"))
                files.append("policy.pt")
            except Exception as err:  # noqa: BLE001 - TorchScript is optional and deprecated upstream
                log.warning("TorchScript export skipped: %s", str(err).splitlines()[0] if str(err) else err)
        # Hash every file the bundle holds (an exporter's side file, e.g. external weights, included).
        files = sorted(p.name for p in staging.iterdir() if p.is_file() and p.name != "manifest.json")
        metrics = _read_json(run_dir / "backtest" / "metrics.json") or None
        manifest: dict[str, Any] = {
            "format": BUNDLE_FORMAT,
            "format_version": BUNDLE_VERSION,
            "run_id": run_dir.name,
            "pod_id": pod_id,
            "source_checkpoint": str(policy_dir),
            "tickers": tickers,
            "interval": str(spec.get("interval") or config.data.interval),
            "decision_interval": int(config.env.decision_interval),
            "action_mode": policy.meta.action_mode,
            "algo": policy.meta.algo,
            "num_assets": num_assets,
            "num_features": num_features,
            "obs_dim": policy.obs_dim,
            "observation": {
                "layout": "obs[:,0]=cash fraction, obs[:,1]=time of day, obs[:,2:].view(N,A,1+F): "
                "[...,0]=position weight, [...,1:]=features",
                "input": "obs",
                "output": "weights",
            },
            "feature_spec": spec,
            "obs_normalization": policy.obs_norm.to_spec(),
            "env_params": config.env.model_dump(),
            "data": config.data.model_dump(),
            "windows": windows,
            "metrics": metrics,
            "versions": _versions(),
            "exporter": exporter,
            "parity": {"max_abs_diff": max_diff, "tolerance": tolerance, "num_obs": int(obs.shape[0])},
            "files": {name: _sha256(staging / name) for name in files},
        }
        manifest["bundle_id"] = manifest_hash(manifest)
        atomic_write_json(staging / "manifest.json", manifest)
        replace_dir(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("exported %s (%s exporter, parity max abs diff %.3g)", out_dir, exporter, max_diff)
    return out_dir


def manifest_hash(manifest: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``manifest`` without its ``bundle_id``."""
    body = {k: v for k, v in manifest.items() if k != "bundle_id"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- loading ---------------------------------------------------------------------------------------
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
            self._session = _ort_session(self.path / "policy.onnx")
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
    manifest = _read_json(manifest_path)
    if manifest.get("format") != BUNDLE_FORMAT:
        raise CheckpointError(f"{manifest_path}: not a podracer bundle manifest")
    if manifest.get("format_version") != BUNDLE_VERSION:
        raise CheckpointError(
            f"{manifest_path}: unsupported format_version {manifest.get('format_version')!r}"
        )
    if manifest.get("bundle_id") != manifest_hash(manifest):
        raise CheckpointError(f"{manifest_path} was modified after export (content hash mismatch)")
    files = manifest.get("files") or {}
    if "policy.onnx" not in files:
        raise CheckpointError(f"{manifest_path}: policy.onnx is not listed")
    for name, digest in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"bundle {path}: {name} is missing")
        if _sha256(file) != digest:
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
    if len(names) != num_features or obs_dim != NUM_GLOBAL + num_assets * (1 + num_features):
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
