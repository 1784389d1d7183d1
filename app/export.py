"""Export a trained policy as a self-describing, hash-verified bundle for onnxruntime.

``export_bundle(run_dir, pod=None, out=None) -> Path`` writes ``<home>/exports/<run>-<pod>/``:

- ``policy.onnx``: raw observation ``obs (N, obs_dim)`` float32 -> target weights ``weights (N, A)``
  float32 (an ensemble champion is one graph that averages its members' target weights). The policy's frozen observation normalization and the action post-processing (softmax over
  assets + cash for ``"weights"``, then the env's own rule: negatives clipped to 0, rows above 1 scaled
  to 1; clamp to [-1, 1] for ``"shares"``) are inside the graph; the batch axis is dynamic.
- ``policy.pt`` (optional, ``torchscript=True``): the same wrapper traced with TorchScript.
- ``manifest.json`` (``app.bundle.BundleManifest``): tickers, interval, decision interval, observation layout, feature spec (with the
  train-window normalization), observation normalization statistics, env params, data / validation
  windows, backtest metrics when ``<run>/backtest/metrics.json`` exists, package versions, the parity
  check result, and the sha256 of every other file. ``bundle_id`` is the sha256 of the manifest's
  own canonical JSON (without ``bundle_id``), so editing the manifest is caught too.

At export a parity check runs onnxruntime against the torch policy on a batch of observations and
fails (no bundle written) when the max abs difference exceeds ``PARITY_TOLERANCE``.
Loading and verifying a bundle is ``app.bundle.load_bundle`` (onnxruntime only, never torch).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import platform
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from agents.ensemble import EnsemblePolicy, load_policy, member_normalizations
from app import context
from app.bundle import (
    BUNDLE_FORMAT,
    BundleManifest,
    Parity,
    ort_session,
    read_json,
    sha256_file,
    write_manifest,
)
from app.config import Config, load_config, load_run_config
from app.runs import RunDir, RunInfo
from backtests.metrics_model import read_metrics
from data.atomic import replace_dir
from data.errors import CheckpointError, PodracerError, one_line
from data.features import check_spec
from data.loader import load_market

log = logging.getLogger(__name__)

PARITY_TOLERANCE = 1e-5
_VERSIONED = ("podracer", "torch", "onnx", "onnxruntime", "onnxscript", "numpy", "pandas", "alpaca-py")


# --- the graph -------------------------------------------------------------------------------------
def _wrapper(policy: Any) -> Any:
    """A torch module: raw obs -> post-processed target action, exactly what ``policy.act`` returns.

    An :class:`~agents.ensemble.EnsemblePolicy` becomes ONE graph: every member normalizes the
    observation with its own statistics and post-processes its own action, and the graph returns the
    members' mean (what ``EnsemblePolicy.act`` returns), so the bundle looks like a single policy's.
    """
    import torch

    members = list(policy.members) if isinstance(policy, EnsemblePolicy) else [policy]
    action_mode = policy.meta.action_mode

    class ExportedPolicy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.members = torch.nn.ModuleList(members)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            total = None
            for p in self.members:
                norm = p.obs_norm.normalize(obs)
                mean = p.net.actor_mean(norm)[:, : p.raw_dim]
                one = p.to_action(mean, obs)  # obs: partial rebalancing starts from the current weights
                total = one if total is None else total + one
            action = total / float(len(self.members))
            if action_mode == "weights":
                # The env's own rule (envs.trading): negatives to 0, rows above 1 scaled to 1. A softmax
                # (and a mean of softmaxes) already satisfies it; keeping it in the graph makes the
                # bundle self-contained.
                action = action.clamp_min(0.0)
                action = action / action.sum(dim=1, keepdim=True).clamp_min(1.0)
            return action

    return ExportedPolicy().eval()


def sample_observations(num_assets: int, num_features: int, num: int = 256, seed: int = 0) -> np.ndarray:
    """Plausible observations for the parity check: portfolio weights on the simplex, tradable flags
    (mostly 1), N(0,1) features (the layout of ``envs.observation``: weight, tradable, features)."""
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(num_assets + 1), size=num).astype(np.float32)  # assets + cash
    tod = rng.uniform(0, 1, size=num).astype(np.float32)
    feats = rng.standard_normal((num, num_assets, num_features)).astype(np.float32)
    tradable = (rng.uniform(0, 1, size=(num, num_assets, 1)) > 0.1).astype(np.float32)
    per_asset = np.concatenate([w[:, :num_assets, None], tradable, feats], axis=2).reshape(num, -1)
    return np.concatenate([w[:, num_assets:], tod[:, None], per_asset], axis=1).astype(np.float32)


EXPORTERS = ("dynamo", "torchscript")


def _export_onnx(module: Any, example: Any, path: Path, exporter: str = "dynamo") -> str:
    """Write ``module`` to ``path`` (weights embedded, dynamic batch axis); returns the exporter used.

    ``"dynamo"`` (torch.export-based, torch 2.13's default) falls back to ``"torchscript"`` (the legacy
    TorchScript-based exporter: deprecated upstream, much faster to run, docs/benchmarks.md "Export")
    if it fails.
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
        errors.append(f"dynamo: {one_line(err)}")
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
        errors.append(f"legacy: {one_line(err)}")
    raise CheckpointError("ONNX export failed (" + "; ".join(errors) + ")")


class _Skip(Exception):
    """Internal: skip the dynamo exporter."""


def parity_check(module: Any, onnx_path: Path, obs: np.ndarray, tolerance: float = PARITY_TOLERANCE) -> float:
    """Max abs difference between onnxruntime and torch on ``obs``; ``CheckpointError`` above ``tolerance``."""
    import torch

    session = ort_session(onnx_path)
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
def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in _VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def resolve_run_dir(run: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Path:
    """A run id (under ``<home>/runs``) or a path to a run directory."""
    path = Path(run)
    if path.is_dir():
        return path
    if home is None:
        home = context.home()
    candidate = RunDir(home, str(run)).path
    if candidate.is_dir():
        return candidate
    raise CheckpointError(f"no run {run!r} (looked for {path} and {candidate})")


def _feature_spec(
    run: RunDir, run_info: RunInfo, config: Config, home: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(feature spec, data windows) the policy was trained with: from the run, else rebuilt from its config."""
    windows: dict[str, Any] = {k: list(v) for k, v in run_info.windows.items()}
    for candidate in (run_info.feature_spec, read_json(run.feature_spec_file) or None):
        if candidate:
            return dict(candidate), windows
    # Not recorded: rebuild the run's market from its resolved config (deterministic: seeded synthetic
    # data or the stored bars) and take the train-window normalization it fits.
    log.info("feature spec not recorded in %s: rebuilding it from %s", run.path, run.config.name)
    splits = load_market(config.data, home=home)
    windows = windows or {k: list(v) for k, v in splits.windows().items()}
    return dict(splits.full.feature_spec), windows


def _checked_tickers(
    policy: Any, run_info: RunInfo, spec: dict[str, Any], policy_dir: Path, run_dir: Path
) -> list[str]:
    """The policy's tickers (else the run's), checked against its number of assets and the feature
    spec against its number of features."""
    tickers = list(policy.meta.tickers) or list(run_info.tickers)
    num_assets, num_features = policy.num_assets, policy.config.num_features
    if len(tickers) != num_assets or len(set(tickers)) != num_assets:
        raise CheckpointError(
            f"{policy_dir}: {len(tickers)} tickers recorded for a {num_assets}-asset policy"
        )
    if len(spec["names"]) != num_features:
        raise CheckpointError(
            f"{run_dir}: feature spec has {len(spec['names'])} features, the policy expects {num_features}"
        )
    return tickers


def _write_torchscript(module: Any, example: np.ndarray, path: Path) -> None:
    """The wrapper traced with TorchScript at ``path``; skipped with a warning when tracing fails."""
    import torch

    try:
        with torch.no_grad():
            traced = torch.jit.trace(module, torch.as_tensor(example))
        traced.save(str(path))
    except Exception as err:  # noqa: BLE001 - TorchScript is optional and deprecated upstream
        log.warning("TorchScript export skipped: %s", one_line(err, typed=False))


def _manifest(
    policy: Any,
    config: Config,
    *,
    run_id: str,
    pod_id: str,
    policy_dir: Path,
    tickers: list[str],
    spec: dict[str, Any],
    windows: dict[str, Any],
    metrics: dict[str, Any] | None,
    exporter: str,
    parity: Parity,
    files: dict[str, str],
) -> BundleManifest:
    """The bundle's manifest, less its ``bundle_id`` (see the module docstring)."""
    fields: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "run_id": run_id,
        "pod_id": pod_id,
        "source_checkpoint": str(policy_dir),
        "tickers": tickers,
        "interval": str(spec.get("interval") or config.data.interval),
        "decision_interval": int(config.env.decision_interval),
        "action_mode": policy.meta.action_mode,
        "algo": policy.meta.algo,
        "num_assets": policy.num_assets,
        "num_features": policy.config.num_features,
        "obs_dim": policy.obs_dim,
        "observation": {
            "layout": "obs[:,0]=cash fraction, obs[:,1]=time of day, obs[:,2:].view(N,A,2+F): "
            "[...,0]=position weight, [...,1]=tradable (1/0), [...,2:]=features",
            "input": "obs",
            "output": "weights",
        },
        "feature_spec": spec,
        # One entry per ensemble member (each normalizes the observation itself, inside the graph).
        "obs_normalization": member_normalizations(policy)[0]
        if not isinstance(policy, EnsemblePolicy)
        else {"members": member_normalizations(policy)},
        "ensemble": None
        if not isinstance(policy, EnsemblePolicy)
        else {"size": policy.size, "combine": "mean_of_target_weights", "members": policy.source},
        "env_params": config.env.model_dump(),
        "data": config.data.model_dump(),
        "windows": windows,
        "metrics": metrics,
        "versions": _versions(),
        "exporter": exporter,
        "parity": parity,
        "files": files,
    }
    return BundleManifest(**fields)


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

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"run directory {run_dir} does not exist")
    run = RunDir.at(run_dir)
    home = Path(home) if home is not None else run.home
    policy_dir = run.pod(pod) if pod else run.champion
    if not policy_dir.is_dir():
        raise CheckpointError(f"no policy at {policy_dir} ({'pod ' + pod if pod else 'champion'} not found)")
    policy = load_policy(policy_dir, device="cpu")
    config = load_run_config(run.config) if run.config.is_file() else load_config(None)
    try:
        run_info = run.info()
    except PodracerError as err:
        raise CheckpointError(str(err)) from None
    spec, windows = _feature_spec(run, run_info, config, home)
    try:
        check_spec(spec)
    except Exception as err:  # noqa: BLE001 - DataError -> the bundle's own error type
        raise CheckpointError(f"{run_dir}: {err}") from None

    tickers = _checked_tickers(policy, run_info, spec, policy_dir, run_dir)
    num_assets, num_features = policy.num_assets, policy.config.num_features
    champion = run_info.champion.pod_id if run_info.champion is not None else None
    pod_id = pod or str(champion or "champion")
    out_dir = Path(out) if out else home / "exports" / f"{run_dir.name}-{pod_id}"

    module = _wrapper(policy)
    obs = sample_observations(num_assets, num_features)
    # Build in a sibling temp folder and swap it in at the end: never a half-written bundle.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        exporter = _export_onnx(module, torch.as_tensor(obs[:2]), staging / "policy.onnx", exporter)
        max_diff = parity_check(module, staging / "policy.onnx", obs, tolerance)
        if torchscript:
            _write_torchscript(module, obs[:2], staging / "policy.pt")
        # Hash every file the bundle holds (an exporter's side file, e.g. external weights, included).
        files = sorted(p.name for p in staging.iterdir() if p.is_file() and p.name != "manifest.json")
        # The backtest's figures travel with the bundle, validated (a malformed file is refused here).
        metrics = read_metrics(run.backtest_metrics).to_json() if run.backtest_metrics.is_file() else None
        manifest = _manifest(
            policy,
            config,
            run_id=run_dir.name,
            pod_id=pod_id,
            policy_dir=policy_dir,
            tickers=tickers,
            spec=spec,
            windows=windows,
            metrics=metrics,
            exporter=exporter,
            parity=Parity(max_abs_diff=max_diff, tolerance=tolerance, num_obs=int(obs.shape[0])),
            files={name: sha256_file(staging / name) for name in files},
        )
        write_manifest(manifest, staging / "manifest.json")
        replace_dir(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("exported %s (%s exporter, parity max abs diff %.3g)", out_dir, exporter, max_diff)
    return out_dir
