"""``optimizer.json`` on the artifact base: versioned, old files still load, newer or malformed refused."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import rewrite_json

from agents.checkpoint import OptimizerMeta, load_optimizer_state, save_optimizer_state
from data.errors import CheckpointError


@pytest.fixture
def saved(tmp_path):
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([param], lr=1e-3)
    param.grad = torch.full((3,), 0.5)
    opt.step()
    save_optimizer_state(tmp_path, opt.state_dict())
    return tmp_path, opt.state_dict()


def _rewrite(directory, **changes):
    rewrite_json(directory / "optimizer.json", **changes)


def test_written_file_keeps_its_keys_and_round_trips(saved):
    directory, state = saved
    doc = json.loads((directory / "optimizer.json").read_text())
    assert doc["schema_version"] == OptimizerMeta.SCHEMA_VERSION
    assert doc["format"] == "podracer-optimizer" and doc["format_version"] == 1
    assert {"param_groups", "scalars", "sha256"} <= doc.keys()
    loaded = load_optimizer_state(directory)
    assert torch.equal(loaded["state"][0]["exp_avg"], state["state"][0]["exp_avg"])
    step = loaded["state"][0]["step"]
    assert isinstance(step, torch.Tensor) and step.dtype == state["state"][0]["step"].dtype
    assert step.item() == 1
    assert loaded["param_groups"][0]["betas"] == state["param_groups"][0]["betas"]


def test_file_written_before_schema_version_still_loads(saved):
    directory, state = saved
    _rewrite(directory, schema_version=None)
    loaded = load_optimizer_state(directory)
    assert loaded["param_groups"][0]["lr"] == state["param_groups"][0]["lr"]


def test_newer_file_is_refused_in_one_line_naming_the_file(saved):
    directory, _ = saved
    _rewrite(directory, schema_version=OptimizerMeta.SCHEMA_VERSION + 1)
    with pytest.raises(CheckpointError, match="optimizer.json: schema version .* newer") as err:
        load_optimizer_state(directory)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"format": "something-else"}, "format"),
        ({"format_version": 2}, "format_version"),
        ({"sha256": None}, "sha256"),
        ({"scalars": {"0": {"step": {"value": "one"}}}}, "scalars"),
    ],
)
def test_malformed_file_is_refused_in_one_line_naming_the_field(saved, changes, field):
    directory, _ = saved
    _rewrite(directory, **changes)
    with pytest.raises(CheckpointError, match=f"optimizer.json: {field}") as err:
        load_optimizer_state(directory)
    assert "\n" not in str(err.value)
