"""The ensemble champion: the mean of K policies' target weights, in torch, on disk, in ONNX, end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from agents.ensemble import EnsemblePolicy, load_policy
from agents.networks import NetworkConfig
from agents.policy import Policy, PolicyMeta
from agents.tournament.leaderboard import read_leaderboard
from app.bundle import load_bundle, ort_session
from app.cli import main
from app.evaluation import trial_returns
from app.export import _export_onnx, _wrapper, export_bundle, parity_check, sample_observations
from app.runs import RunDir
from data.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

A, F = 3, 8
TICKERS = ("AAA", "BBB", "CCC")


def _member(seed: int, rebalance_rate: float = 1.0) -> Policy:
    """A decisive random policy with its own normalization statistics (they differ by seed)."""
    torch.manual_seed(seed)
    policy = Policy(
        NetworkConfig(num_assets=A, num_features=F, embed=4, hidden=8, rebalance_rate=rebalance_rate),
        PolicyMeta(tickers=TICKERS),
    )
    with torch.no_grad():
        for p in policy.net.parameters():
            p.mul_(3.0)
        policy.obs_norm.update(torch.randn(256, policy.obs_dim) * (1 + seed) + seed)
    return policy.eval()


def _obs(n: int = 64) -> torch.Tensor:
    return torch.as_tensor(sample_observations(A, F, num=n, seed=1))


def test_ensemble_of_one_equals_the_policy():
    single = _member(0)
    obs = _obs()
    ens = EnsemblePolicy([single])
    assert torch.equal(ens.act(obs), single.act(obs))
    assert torch.equal(ens.frozen_act()(obs), single.frozen_act()(obs))


def test_mean_of_members_post_processed_weights():
    """Each member normalizes with its own statistics; the action is the mean of their actions
    (a slow reference: loop over members, call each act, average in float64)."""
    members = [_member(0), _member(1), _member(2, rebalance_rate=0.5)]
    obs = _obs()
    ens = EnsemblePolicy(members)
    expected = torch.stack([m.act(obs).double() for m in members]).mean(dim=0)
    got = ens.act(obs)
    assert torch.allclose(got.double(), expected, atol=1e-6)
    assert bool((got >= 0).all()) and bool((got.sum(dim=1) <= 1 + 1e-6).all())
    # A different normalization changes the member's action: the members really use their own.
    assert not torch.allclose(members[0].act(obs), members[1].act(obs))
    assert ens.frozen_act() is None  # a partial-rebalancing member has no fast path: act() is used


def test_onnx_graph_is_the_mean(tmp_path):
    members = [_member(0), _member(1), _member(3)]
    ens = EnsemblePolicy(members)
    module = _wrapper(ens)
    obs = sample_observations(A, F, num=64, seed=2)
    _export_onnx(module, torch.as_tensor(obs[:2]), tmp_path / "policy.onnx", "torchscript")
    diff = parity_check(module, tmp_path / "policy.onnx", obs)
    assert diff <= 1e-5
    got = ort_session(tmp_path / "policy.onnx").run(["weights"], {"obs": obs})[0]
    expected = torch.stack([m.act(torch.as_tensor(obs)) for m in members]).mean(dim=0).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_save_load_round_trip(tmp_path):
    ens = EnsemblePolicy([_member(0), _member(1)], source=[{"pod_id": "p0", "score": 1.0}])
    ens.save(tmp_path / "ens")
    assert sorted(p.name for p in (tmp_path / "ens").iterdir()) == ["policy.safetensors", "spec.json"]
    back = load_policy(tmp_path / "ens")
    assert isinstance(back, EnsemblePolicy) and back.size == 2 and back.source == ens.source
    obs = _obs()
    assert torch.equal(back.act(obs), ens.act(obs))
    assert back.meta.tickers == TICKERS and back.meta.algo == "ensemble"
    # A single policy folder still loads as a Policy.
    _member(4).save(tmp_path / "one")
    assert type(load_policy(tmp_path / "one")) is Policy


def test_corrupt_member_is_a_checkpoint_error(tmp_path):
    ens = EnsemblePolicy([_member(0), _member(1)])
    ens.save(tmp_path / "ens")
    weights = tmp_path / "ens" / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[:-40])
    with pytest.raises(CheckpointError, match="sha256"):
        load_policy(tmp_path / "ens")

    ens.save(tmp_path / "ens2")
    spec_path = tmp_path / "ens2" / "spec.json"
    spec = json.loads(spec_path.read_text())
    spec["members"][1]["architecture"]["hidden"] = 16  # member 1's weights no longer fit its spec
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(CheckpointError, match="member 1") as err:
        load_policy(tmp_path / "ens2")
    assert "\n" not in str(err.value)

    spec["members"] = spec["members"][:1]  # size says 2
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(CheckpointError, match="size"):
        load_policy(tmp_path / "ens2")


TINY = """
[data]
num_tickers = 3
num_sessions = 20
train_frac = 0.25
valid_frac = 0.5
[env]
num_envs = 8
decision_interval = 5
episode_len = 16
[agent]
algo = "ppo"
num_steps = 16
hidden = 8
embed = 4
update_epochs = 1
num_minibatches = 2
[tournament]
round_steps = 256
leaderboard_size = 3
ensemble_size = 2
champion = "ensemble"
workers = 0
pods = 2
budget_steps = 768
"""


def test_tournament_with_ensemble_champion_then_backtest_and_export(home, tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    assert main(["train", "--tournament", "--config", str(config), "--run", "ens", "--json"]) == 0
    capsys.readouterr()
    run_dir = home / "runs" / "ens"
    record = json.loads((run_dir / "run.json").read_text())
    # 3 pods + the ensemble: one more trial, its validation Sharpe in the list.
    assert record["pods_tried"] == 4 and len(record["trial_sharpes"]) == 4
    assert record["champion"]["pod_id"] == "ensemble" and record["champion"]["size"] == 2
    assert record["trial_sharpes"][-1] == record["ensemble"]["sharpe_ratio"]
    champion = load_policy(run_dir / "champion")
    assert isinstance(champion, EnsemblePolicy) and champion.size == 2
    # Its members are the board's two best pods, best first.
    board = read_leaderboard(run_dir)
    assert [m["pod_id"] for m in record["ensemble"]["members"]] == [e["pod_id"] for e in board[:2]]

    assert main(["backtest", "ens", "--json"]) == 0
    metrics = json.loads((run_dir / "backtest" / "metrics.json").read_text())
    assert metrics["num_trials"] == 4 and "champion" in metrics["strategies"]
    # The trials' matrix (PBO, SPA, effective trials) holds the ensemble's validation returns too:
    # 3 pods + 1 columns, the ensemble last; it is the champion whose validation DSR is reported.
    _, returns, ids = trial_returns(RunDir.at(run_dir))
    assert returns.shape[1] == 4 and ids[-1] == "ensemble" and metrics["selection"]["num_trials"] == 4
    assert metrics["selection"]["valid_sharpe_per_day"] is not None

    bundle_dir = export_bundle(run_dir, exporter="torchscript")
    bundle = load_bundle(bundle_dir)
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    assert manifest["ensemble"]["size"] == 2 and len(manifest["obs_normalization"]["members"]) == 2
    obs = sample_observations(champion.num_assets, champion.config.num_features, num=32)
    got = bundle.act(obs)  # what `podracer paper` calls
    np.testing.assert_allclose(got, champion.act(torch.as_tensor(obs)).numpy(), atol=1e-5)
