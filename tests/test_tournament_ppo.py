"""The tournament with the real PPO round on a tiny market: checkpoints, warm starts, test-window isolation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import ppo_market
from safetensors.torch import load_file
from test_tournament_run import run_tournament

from agents.checkpoint import Checkpoint
from agents.policy import Policy
from agents.tournament.leaderboard import read_leaderboard, read_pods
from agents.tournament.settings import TournamentArgs
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.market import MarketData

ENV = {"decision_interval": 5, "episode_len": 16, "num_envs": 8}
AGENT = {"num_steps": 16, "hidden": 8, "embed": 4, "update_epochs": 1, "num_minibatches": 2}


def _poison_test_window(market: MarketData, test_start: int) -> MarketData:
    """The same market with every bar of the test window replaced by NaN features and absurd prices."""
    poisoned = {}
    for name in ("open", "high", "low", "close", "volume"):
        values = getattr(market, name).clone()
        values[test_start:] = 1e9
        poisoned[name] = values
    features = market.features.clone()
    features[test_start:] = float("nan")
    import dataclasses

    return dataclasses.replace(market, features=features, **poisoned)


def _run(tmp_path, name, market, **kw):
    train, valid, _test = market.split_sessions(0.6, 0.2)
    args = TournamentArgs(
        pods=1, leaderboard_size=2, p_fresh=0.0, round_steps=256, budget_steps=768, workers=0, seed=3
    )
    return run_tournament(tmp_path / name, train, valid, args=args, env=ENV, agent=AGENT, **kw)


pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def test_test_window_is_never_read(tmp_path):
    """Poisoning the test bars (NaN features, 1e9 prices) changes nothing the tournament produces."""
    clean = ppo_market()
    _, _, test = clean.split_sessions(0.6, 0.2)
    test_start = clean.num_steps - test.num_steps
    a = _run(tmp_path, "clean", clean)
    b = _run(tmp_path, "poisoned", _poison_test_window(clean, test_start))
    pods_a, pods_b = read_pods(a.run_dir), read_pods(b.run_dir)
    assert len(pods_a) == 3 and all(p["status"] != "failed" for p in pods_a)
    assert [p["score"] for p in pods_a] == [p["score"] for p in pods_b]
    assert [p["metrics"] for p in pods_a] == [p["metrics"] for p in pods_b]
    wa = load_file(a.run_dir / "champion" / "policy.safetensors")
    wb = load_file(b.run_dir / "champion" / "policy.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    run = json.loads((a.run_dir / "run.json").read_text())
    test_first = str(test.session_dates()[0])
    assert run["windows"]["valid"][1] < test_first


def test_children_warm_start_from_their_parent(tmp_path):
    result = _run(tmp_path, "run", ppo_market())
    pods = read_pods(result.run_dir)
    # p_fresh=0: after the first (fresh) pod every pod is a child of a leaderboard entry.
    assert pods[0]["parent_id"] is None
    assert all(p["parent_id"] is not None for p in pods[1:])
    child = pods[1]
    parent = Checkpoint.load(result.run_dir / "pods" / child["parent_id"])
    trained = Checkpoint.load(result.run_dir / "pods" / child["pod_id"])
    assert trained.optimizer_state is not None
    # Adam's step count carries over from the parent: the child continued, it did not restart.
    parent_steps = max(float(s["step"]) for s in parent.optimizer_state["state"].values())
    child_steps = max(float(s["step"]) for s in trained.optimizer_state["state"].values())
    assert child_steps > parent_steps > 0
    assert child["env_steps"] == pods[0]["env_steps"] + child["round_steps"]
    board = read_leaderboard(result.run_dir)
    assert [e["score"] for e in board] == sorted((p["score"] for p in pods), reverse=True)[:2]
    champion = Policy.load(result.run_dir / "champion")
    obs = torch.zeros(2, champion.obs_dim)
    assert torch.isfinite(champion.act(obs)).all()
    metrics = board[0]["metrics"]
    assert np.isfinite(metrics["sharpe_ratio"]) and metrics["num_days"] == 2.0


def test_sac_pods_train_and_warm_start(tmp_path):
    market = ppo_market()
    train, valid, _test = market.split_sessions(0.6, 0.2)
    args = TournamentArgs(
        pods=1,
        leaderboard_size=2,
        p_fresh=0.0,
        round_steps=128,
        budget_steps=384,
        workers=0,
        seed=0,
        algo="sac",
    )
    agent = {"hidden": 8, "embed": 4, "batch_size": 32, "buffer_size": 512, "learning_starts": 32}
    result = run_tournament(
        tmp_path / "sac", train, valid, args=args, env=ENV, agent=agent, annualization=TRADING_DAYS_PER_YEAR
    )
    pods = read_pods(result.run_dir)
    assert [p["status"] != "failed" for p in pods] == [True, True, True]
    assert all(p["algo"] == "sac" for p in pods) and pods[2]["parent_id"] is not None
    assert Policy.load(result.run_dir / "champion").meta.algo == "sac"
