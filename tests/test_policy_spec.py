"""A policy's ``spec.json`` on the artifact base: versioned, old files still load, newer or malformed refused."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import rewrite_json

from agents.ensemble import EnsemblePolicy, EnsembleSpec, load_policy
from agents.networks import NetworkConfig
from agents.policy import Policy, PolicyMeta, PolicySpec
from data.errors import CheckpointError


@pytest.fixture
def saved_spec_policy(tmp_path):
    torch.manual_seed(0)
    policy = Policy(NetworkConfig(3, 5), PolicyMeta(tickers=("A", "B", "C")))
    policy.obs_norm.update(torch.randn(32, policy.obs_dim))
    policy.save(tmp_path / "p")
    return tmp_path / "p", policy


def _rewrite(directory, **changes):
    rewrite_json(directory / "spec.json", **changes)


def test_written_spec_keeps_its_keys(saved_spec_policy):
    directory, policy = saved_spec_policy
    doc = json.loads((directory / "spec.json").read_text())
    assert doc["schema_version"] == PolicySpec.SCHEMA_VERSION
    assert doc["format"] == "podracer-policy" and doc["format_version"] == 1
    assert doc["tickers"] == ["A", "B", "C"] and doc["obs_dim"] == policy.obs_dim
    assert len(doc["weights_sha256"]) == 64


def test_spec_written_before_schema_version_still_loads(saved_spec_policy):
    directory, policy = saved_spec_policy
    _rewrite(directory, schema_version=None)
    obs = torch.randn(4, policy.obs_dim)
    assert torch.equal(Policy.load(directory).act(obs), policy.act(obs))


def test_newer_spec_is_refused_in_one_line_naming_the_file(saved_spec_policy):
    directory, _ = saved_spec_policy
    _rewrite(directory, schema_version=PolicySpec.SCHEMA_VERSION + 1)
    with pytest.raises(CheckpointError, match="spec.json: schema version .* newer") as err:
        Policy.load(directory)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"format_version": 2}, "format_version"), ({"weights_sha256": 7}, "weights_sha256")],
)
def test_malformed_spec_is_refused_in_one_line_naming_the_field(saved_spec_policy, changes, field):
    directory, _ = saved_spec_policy
    _rewrite(directory, **changes)
    with pytest.raises(CheckpointError, match=f"spec.json: {field}") as err:
        Policy.load(directory)
    assert "\n" not in str(err.value)


@pytest.fixture
def saved_ensemble(tmp_path):
    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        members.append(Policy(NetworkConfig(3, 5), PolicyMeta(tickers=("A", "B", "C"))))
    ensemble = EnsemblePolicy(members, source=[{"pod_id": "p0"}])
    ensemble.save(tmp_path / "ens")
    return tmp_path / "ens", ensemble


def test_ensemble_spec_keeps_its_keys_and_old_files_load(saved_ensemble):
    directory, ensemble = saved_ensemble
    doc = json.loads((directory / "spec.json").read_text())
    assert doc["schema_version"] == EnsembleSpec.SCHEMA_VERSION
    assert doc["format"] == "podracer-ensemble" and doc["format_version"] == 1 and doc["size"] == 2
    _rewrite(directory, schema_version=None)
    back = load_policy(directory)
    obs = torch.randn(4, ensemble.obs_dim)
    assert isinstance(back, EnsemblePolicy) and torch.equal(back.act(obs), ensemble.act(obs))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"schema_version": EnsembleSpec.SCHEMA_VERSION + 1}, "spec.json: schema version .* newer"),
        ({"format_version": 2}, "spec.json: format_version"),
        ({"weights_sha256": 7}, "spec.json: weights_sha256"),
    ],
)
def test_newer_or_malformed_ensemble_spec_is_refused_in_one_line(saved_ensemble, changes, match):
    directory, _ = saved_ensemble
    _rewrite(directory, **changes)
    with pytest.raises(CheckpointError, match=match) as err:
        load_policy(directory)
    assert "\n" not in str(err.value)
