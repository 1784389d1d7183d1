"""`podracer train --tournament`: JSON output, run directory, resume (in process and after kill -9), errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.tournament.leaderboard import read_events, read_leaderboard, read_pods
from app.cli import main

CONFIG = """
[data]
num_tickers = 3
# 14 sessions split 2 / 10 / 2: the validation window needs 10 (training.MIN_VALID_SESSIONS)
num_sessions = 14
train_frac = 0.15
valid_frac = 0.75
[env]
num_envs = 8
decision_interval = 5
episode_len = 16
[agent]
algo = "ppo"  # the tournament plumbing with PPO pods
num_steps = 16
hidden = 8
embed = 4
update_epochs = 1
num_minibatches = 2
[tournament]
round_steps = 256
leaderboard_size = 2
workers = 0
"""


pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return path


def _json_line(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_train_tournament_json_then_resume(home, config, capsys):
    rc = main(
        [
            "train",
            "--tournament",
            "--config",
            str(config),
            "--pods",
            "2",
            "--budget-steps",
            "768",
            "--run",
            "t1",
            "--json",
        ]
    )
    assert rc == 0
    out = _json_line(capsys.readouterr().out)
    run_dir = home / "runs" / "t1"
    board = read_leaderboard(run_dir)
    assert out["run_id"] == "t1" and out["env_steps"] == 768
    assert out["champion"] == {"pod_id": board[0]["pod_id"], "score": board[0]["score"]}
    assert (run_dir / "champion" / "policy.safetensors").is_file()
    assert "round_steps = 256" in (run_dir / "config.toml").read_text()
    run = json.loads((run_dir / "run.json").read_text())
    # 3 pods + the ensemble of the top pods (scored on the validation window: one more trial)
    assert set(run["windows"]) == {"train", "valid", "test"} and run["pods_tried"] == 3 + 1

    # Resume with a bigger budget: the three pods and the board are kept, three more pods run.
    rc = main(["train", "--tournament", "--resume", "t1", "--budget-steps", "1536", "--json"])
    assert rc == 0
    out = _json_line(capsys.readouterr().out)
    assert out["env_steps"] == 1536 and out["pods_tried"] == 6 + 1  # + the ensemble
    assert [p["pod_id"] for p in read_pods(run_dir)][:3] == ["p0000", "p0001", "p0002"]
    assert [e["kind"] for e in read_events(run_dir)].count("resumed") == 1


def test_bad_invocations_are_one_line_errors(home, config, capsys):
    assert main(["train", "--tournament", "--resume", "nosuch", "--json"]) == 2
    err = capsys.readouterr().err
    assert "nosuch" in err and "Traceback" not in err
    assert main(["train", "--tournament", "--config", str(config), "--backend", "slurm"]) == 2
    assert (
        main(
            [
                "train",
                "--tournament",
                "--config",
                str(config),
                "--run",
                "x",
                "--budget-steps",
                "256",
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["train", "--tournament", "--config", str(config), "--run", "x", "--json"]) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_kill_dash_nine_then_resume(home, config):
    """The real command, killed with SIGKILL mid-run, then resumed: every entry survives."""
    exe = Path(sys.executable).with_name("podracer")
    env = {**os.environ, "PODRACER_HOME": str(home), "OMP_NUM_THREADS": "1"}
    cmd = [
        str(exe),
        "train",
        "--tournament",
        "--config",
        str(config),
        "--pods",
        "1",
        "--budget-steps",
        "1792",
        "--run",
        "k",
        "--json",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = home / "runs" / "k"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.3)
            assert proc.poll() is None, "the tournament finished before it could be killed"
            if (run_dir / "leaderboard.sqlite").is_file() and len(read_leaderboard(run_dir)) >= 2:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = read_leaderboard(run_dir)
    assert len(before) == 2
    done = subprocess.run(
        [str(exe), "train", "--tournament", "--resume", "k", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = _json_line(done.stdout)
    assert out["env_steps"] == 1792
    after = {e["pod_id"]: e for e in read_leaderboard(run_dir)}
    pruned = {e["pod_id"] for e in read_events(run_dir) if e["kind"] == "pruned"}
    for entry in before:
        assert entry["pod_id"] in after or entry["pod_id"] in pruned
        assert (run_dir / entry["checkpoint"] / "optimizer.safetensors").is_file()


def test_live_view_renders_pool_and_leaderboard():
    from rich.console import Console

    from app.render import render_tournament

    snap = {
        "run_id": "r1",
        "in_flight": [
            {
                "pod_id": "p0003",
                "parent_id": "p0001",
                "generation": 2,
                "hparams": {"learning_rate": 1e-4},
                "round_steps": 256,
                "running_s": 3.0,
            }
        ],
        "leaderboard": [
            {
                "rank": 1,
                "pod_id": "p0001",
                "parent_id": None,
                "generation": 0,
                "score": 1.25,
                "metrics": {"sharpe_ratio": 1.25},
                "env_steps": 512,
            }
        ],
        "env_steps_spent": 512,
        "budget_steps": 1024,
        "wall_s": 12.0,
        "budget_s": None,
        "pods_started": 4,
        "consecutive_failures": 0,
    }
    console = Console(record=True, width=120)
    console.print(render_tournament(snap))
    text = console.export_text()
    assert "512 / 1,024" in text and "p0003" in text and "1.00e-04" in text
    assert "p0001" in text and "1.250" in text and "fresh" in text


def test_one_budget_on_the_command_line_replaces_both():
    from app.commands.train import _tournament_overrides
    from app.config import Config
    from app.config import to_tournament_args as tournament_args_from_config

    minutes = _tournament_overrides({"pods": None, "budget_minutes": 5.0, "address": None})
    assert minutes == {"budget_minutes": 5.0, "budget_steps": None}
    args = tournament_args_from_config(Config().with_updates(tournament=minutes))
    assert args.budget_steps is None and args.budget_minutes == 5.0
    fields = ("pods", "budget_steps", "budget_minutes", "backend", "workers", "address")
    both = _tournament_overrides(dict(zip(fields, (3, 1000, 2.0, "ray", 0, "auto"), strict=True)))
    assert both == {
        "pods": 3,
        "budget_steps": 1000,
        "budget_minutes": 2.0,
        "backend": "ray",
        "workers": 0,
        "address": "auto",
    }
    from data.errors import ConfigError

    with pytest.raises(ConfigError, match="budget"):
        tournament_args_from_config(Config().with_updates(tournament={"budget_steps": None}))


def test_pods_on_the_population_backend_is_the_population_size(home, config, capsys):
    """``--pods 8`` with ``--backend population``: every population has 8 pods (one round of 8 here)."""
    argv = ["train", "--tournament", "--config", str(config), "--backend", "population"]
    rc = main([*argv, "--pods", "8", "--budget-steps", str(8 * 256), "--run", "p8", "--json"])
    assert rc == 0, capsys.readouterr().err
    assert _json_line(capsys.readouterr().out)["env_steps"] == 8 * 256
    run_dir = home / "runs" / "p8"
    assert len(read_pods(run_dir)) == 8
    kinds = [e["kind"] for e in read_events(run_dir) if e["kind"] in ("started", "scored")]
    assert kinds == ["started"] * 8 + ["scored"] * 8  # one population of 8, launched together


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tournament", "--backend", "population", "--pods", "3"], "population_size = 4"),
        (["--tournament", "--threads", "2"], "--threads: only for a single run"),
        (["--tournament", "--steps", "64"], "--steps: only for a single run"),
        (["--pods", "3", "--workers", "1"], "--pods, --workers: only for a tournament"),
        (["--tournament", "--backend", "ray", "--workers", "1"], "--workers: the ray backend"),
        (["--tournament", "--backend", "local", "--address", "ray://x:1"], "tournament.address"),
    ],
)
def test_a_flag_the_run_would_not_read_is_refused_in_one_line(home, tmp_path, capsys, extra, message):
    path = tmp_path / "sized.toml"
    path.write_text(CONFIG.replace("workers = 0", "workers = 0\npopulation_size = 4"))
    plain = tmp_path / "plain.toml"
    plain.write_text(CONFIG)
    chosen = path if "population" in extra else plain
    assert main(["train", "--config", str(chosen), *extra, "--run", "r", "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (home / "runs" / "r").exists()
