"""`podracer train`: a tiny single-agent run end to end (PPO and SAC), its artifacts and its errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from agents.checkpoint import Checkpoint
from agents.policy import Policy
from app.cli import main
from app.config import load_config

SMALL = """
[data]
num_tickers = 4
# 14 sessions split 2 / 10 / 2: the validation window needs 10 (training.MIN_VALID_SESSIONS)
num_sessions = 14
train_frac = 0.15
valid_frac = 0.75
[env]
num_envs = 8
episode_len = 16
[agent]
total_steps = 512
eval_every = 256
num_steps = 8
batch_size = 32
buffer_size = 2048
num_critics = 2
"""


pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_train_writes_a_complete_run(home, config_file, capsys, algo):
    rc = main(
        ["--home", str(home), "train", "--algo", algo, "--config", str(config_file), "--run", "r1", "--json"]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    run_dir = home / "runs" / "r1"
    assert summary["run_id"] == "r1" and summary["status"] == "done" and summary["algo"] == algo
    assert summary["env_steps"] >= 512
    info = json.loads((run_dir / "run.json").read_text())
    assert info["windows"]["train"][0] < info["windows"]["valid"][0] <= info["windows"]["valid"][1]
    assert "test" in info["windows"] and info["tickers"] and info["feature_spec"]["names"]
    assert set(info["valid"]) >= {"score", "sharpe", "log_return", "buy_and_hold_log_return"}
    resolved = load_config(run_dir / "config.toml")
    assert resolved.agent.algo == algo and resolved.agent.seed == 0 and resolved.data.num_tickers == 4
    pod = Checkpoint.load(run_dir / "pods" / "single")
    champion = Policy.load(run_dir / "champion")
    assert pod.optimizer_state is not None and champion.meta.algo == algo
    obs = torch.randn(3, champion.obs_dim)
    assert torch.equal(pod.policy.act(obs), champion.act(obs))
    curve = pd.read_parquet(run_dir / "pods" / "single" / "curve.parquet")
    assert "env_steps" in curve.columns and curve["eval/score"].notna().any()


def test_train_refuses_to_overwrite_a_run_and_rejects_bad_options(home, config_file, capsys):
    args = [
        "--home",
        str(home),
        "train",
        "--config",
        str(config_file),
        "--run",
        "r2",
        "--json",
        "--threads",
        "1",
    ]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["--home", str(home), "train", "--algo", "dqn", "--config", str(config_file)]) == 2
    assert "--algo" in capsys.readouterr().err
    assert main(["--home", str(home), "train", "--config", str(config_file), "--run", "../escape"]) == 2
    assert main(["--home", str(home), "train", "--config", str(home / "missing.toml")]) == 2


def test_a_failed_run_is_recorded_and_may_be_redone(home, config_file, monkeypatch):
    from agents import direct  # the default learner

    def boom(*args, **kwargs):
        raise RuntimeError("learner crashed")

    monkeypatch.setattr(direct, "train", boom)
    args = ["--home", str(home), "train", "--config", str(config_file), "--run", "r3", "--json"]
    assert main(args) == 1  # an unexpected error: one line, non-zero exit
    info = json.loads((home / "runs" / "r3" / "run.json").read_text())
    assert info["status"] == "failed" and "learner crashed" in info["error"]
    monkeypatch.undo()
    assert main(args) == 0
    assert json.loads((home / "runs" / "r3" / "run.json").read_text())["status"] == "done"
