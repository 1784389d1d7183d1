"""Export bundles: ONNX parity with torch, manifest contents, hash verification, CLI one-liners."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_paper_support import DECISION_INTERVAL, make_run

from app import bundle as bundle_module
from app.bundle import BundleManifest, load_bundle, manifest_hash
from app.cli import main
from app.export import export_bundle, sample_observations
from data.errors import CheckpointError
from envs import observation


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    run = make_run(home)
    bundle_dir = export_bundle(run.run_dir, exporter="torchscript")
    return home, run, bundle_dir


def _copy(bundle_dir, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(bundle_dir, dst)
    return dst


def test_bundle_layout_and_manifest(exported):
    home, run, bundle_dir = exported
    assert bundle_dir == home / "exports" / "run-test-pod-0007"
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    market = run.splits.full
    assert manifest["tickers"] == list(market.tickers)
    assert manifest["decision_interval"] == DECISION_INTERVAL
    assert manifest["interval"] == "1m"
    assert manifest["feature_spec"] == json.loads(json.dumps(market.feature_spec))
    assert manifest["obs_normalization"]["mean_asset"] == pytest.approx(
        run.policy.obs_norm.to_spec()["mean_asset"]
    )
    assert manifest["env_params"]["decision_interval"] == DECISION_INTERVAL
    assert manifest["windows"]["valid"] == list(run.splits.valid.date_range())
    assert manifest["metrics"] is None  # no backtest in this run
    assert {"torch", "onnxruntime", "onnx"} <= set(manifest["versions"])
    assert set(manifest["files"]) == {p.name for p in bundle_dir.iterdir()} - {"manifest.json"}
    assert manifest["parity"]["max_abs_diff"] <= manifest["parity"]["tolerance"]
    assert manifest["bundle_id"] == manifest_hash(manifest)


def test_onnx_matches_policy_act(exported):
    """onnxruntime on raw observations == Policy.act (normalization and post-processing in the graph)."""
    _, run, bundle_dir = exported
    bundle = load_bundle(bundle_dir)
    obs = sample_observations(bundle.num_assets, bundle.num_features, num=64, seed=7)
    got = bundle.act(obs)
    want = run.policy.act(torch.as_tensor(obs), deterministic=True).numpy()
    assert got.shape == (64, bundle.num_assets)
    assert np.max(np.abs(got - want)) < 1e-5
    assert np.all(got >= 0) and np.all(got.sum(axis=1) <= 1 + 1e-6)
    assert np.std(got[:, 0]) > 1e-3  # the policy is not constant: the comparison means something
    # dynamic batch axis: a single observation works too
    assert bundle.act(obs[:1]).shape == (1, bundle.num_assets)


def test_dynamo_exporter(tmp_path):
    run = make_run(tmp_path, run_id="run-dyn")
    bundle_dir = export_bundle(run.run_dir, out=tmp_path / "b", exporter="dynamo")
    bundle = load_bundle(bundle_dir)
    assert bundle.manifest["exporter"] == "dynamo"
    assert set(bundle.manifest["files"]) == {"policy.onnx"}  # weights embedded, not a side file
    obs = sample_observations(bundle.num_assets, bundle.num_features, num=5, seed=3)
    want = run.policy.act(torch.as_tensor(obs)).numpy()
    assert np.max(np.abs(bundle.act(obs) - want)) < 1e-5


def test_tampered_onnx_rejected(exported, tmp_path):
    dst = _copy(exported[2], tmp_path)
    data = bytearray((dst / "policy.onnx").read_bytes())
    data[-20] ^= 0xFF
    (dst / "policy.onnx").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        load_bundle(dst)


def test_missing_file_rejected(exported, tmp_path):
    dst = _copy(exported[2], tmp_path)
    (dst / "policy.onnx").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_bundle(dst)
    (dst / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="manifest.json missing"):
        load_bundle(dst)


def test_edited_manifest_rejected(exported, tmp_path):
    dst = _copy(exported[2], tmp_path)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["tickers"][0] = "AAPL"
    (dst / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="modified"):
        load_bundle(dst)


def test_wrong_tickers_rejected(exported, tmp_path):
    dst = _copy(exported[2], tmp_path)
    manifest = json.loads((dst / "manifest.json").read_text())
    # A consistent-looking manifest (hash recomputed) whose universe does not fit the graph.
    manifest["tickers"] = manifest["tickers"][:-1]
    manifest["bundle_id"] = manifest_hash(manifest)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="tickers"):
        load_bundle(dst)
    with pytest.raises(CheckpointError, match="trades"):
        load_bundle(exported[2], expect_tickers=["AAPL", "MSFT", "NVDA"])


def test_corrupt_manifest_rejected(exported, tmp_path):
    dst = _copy(exported[2], tmp_path)
    (dst / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_bundle(dst)


def test_export_missing_pod_is_one_line(exported, capsys):
    home, run, _ = exported
    rc = main(["--home", str(home), "export", run.run_dir.name, "--pod", "nope", "--format", "onnx"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope" in err and "Traceback" not in err


def test_export_refuses_a_metrics_file_of_a_newer_schema_in_one_line(tmp_path, capsys):
    run = make_run(tmp_path, run_id="run-newer")
    path = run.run_dir / "backtest" / "metrics.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"schema_version": 99, "strategies": {"champion": {}}}))
    rc = main(
        ["--home", str(tmp_path), "export", "run-newer", "--format", "onnx", "--exporter", "torchscript"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert str(path) in " ".join(err.split()) and "schema version 99 is newer" in " ".join(err.split())


def test_export_cli(exported, tmp_path, capsys):
    home, run, _ = exported
    out = tmp_path / "cli-bundle"
    rc = main(
        [
            "--home",
            str(home),
            "export",
            run.run_dir.name,
            "--format",
            "onnx",
            "--out",
            str(out),
            "--exporter",
            "torchscript",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "max abs diff" in text and (out / "manifest.json").is_file()
    assert load_bundle(out).tickers == run.splits.full.tickers


def test_loading_a_bundle_does_not_import_torch(exported):
    code = (
        "import sys; from app.bundle import load_bundle; import numpy as np; "
        f"b = load_bundle({str(exported[2])!r}); "
        "b.act(np.zeros((1, b.obs_dim), np.float32)); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_bundle_layout_is_the_env_observation_layout():
    """app/bundle.py cannot import envs.observation (bundle loading stays torch-free): its copy of the
    layout, and the sample observations it checks parity on, must be that module's."""
    assert bundle_module.NUM_GLOBAL == observation.NUM_GLOBAL
    obs = sample_observations(num_assets=3, num_features=4, num=16)
    assert obs.shape == (16, observation.obs_dim(3, 4))
    glob, per_asset = observation.split_obs(obs, 3, 4)
    # Weights and cash on the simplex, time of day in [0, 1].
    np.testing.assert_allclose(
        glob[:, observation.CASH] + per_asset[..., observation.WEIGHT].sum(1), 1.0, rtol=1e-5
    )
    assert ((glob[:, observation.TIME_OF_DAY] >= 0) & (glob[:, observation.TIME_OF_DAY] <= 1)).all()


def test_feature_spec_rebuilt_from_config_when_not_recorded(tmp_path):
    run = make_run(tmp_path, run_id="run-nospec")
    info = json.loads((run.run_dir / "run.json").read_text())
    del info["feature_spec"], info["windows"]
    (run.run_dir / "run.json").write_text(json.dumps(info))
    manifest = load_bundle(export_bundle(run.run_dir, exporter="torchscript")).manifest
    assert manifest["feature_spec"] == json.loads(json.dumps(run.splits.full.feature_spec))
    assert manifest["windows"]["train"] == list(run.splits.train.date_range())


def test_metrics_included_when_backtest_exists(tmp_path):
    run = make_run(tmp_path, run_id="run-metrics")
    metrics = {"window": "test", "strategies": {"champion": {"sharpe_ratio": 1.25}}}
    (run.run_dir / "backtest").mkdir()
    (run.run_dir / "backtest" / "metrics.json").write_text(json.dumps(metrics))
    manifest = load_bundle(export_bundle(run.run_dir, exporter="torchscript")).manifest
    assert manifest["metrics"] == {**metrics, "schema_version": 1}  # validated, as its model writes it


def _rewrite(dst, manifest):
    manifest["bundle_id"] = manifest_hash(manifest)
    (dst / "manifest.json").write_text(json.dumps(manifest))


def test_manifest_is_a_versioned_document(exported):
    manifest = json.loads((exported[2] / "manifest.json").read_text())
    assert manifest["schema_version"] == BundleManifest.SCHEMA_VERSION
    assert manifest["format_version"] == 1  # still written for readers that check it
    doc = BundleManifest.read(exported[2] / "manifest.json")
    assert doc.bundle_id == manifest["bundle_id"] and doc.parity.num_obs == manifest["parity"]["num_obs"]


def test_bundle_in_the_layout_without_schema_version_loads(exported, tmp_path):
    """A bundle written before the manifest had a schema version (its id hashed without it) verifies."""
    dst = _copy(exported[2], tmp_path)
    manifest = json.loads((dst / "manifest.json").read_text())
    del manifest["schema_version"]
    _rewrite(dst, manifest)
    bundle = load_bundle(dst)
    assert bundle.bundle_id == manifest["bundle_id"] != load_bundle(exported[2]).bundle_id
    assert bundle.tickers == tuple(manifest["tickers"])
    assert BundleManifest.read(dst / "manifest.json").schema_version == 1


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("schema_version", 99, "newer than this podracer reads"),
        ("format_version", 2, "format_version"),
        ("num_assets", "three", "num_assets"),
    ],
)
def test_newer_or_malformed_manifest_refused_in_one_line(exported, tmp_path, key, value, match):
    dst = _copy(exported[2], tmp_path)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest[key] = value
    _rewrite(dst, manifest)  # a consistent hash: the refusal is the document's, not the hash's
    with pytest.raises(CheckpointError, match=match) as err:
        load_bundle(dst)
    assert "\n" not in str(err.value)
