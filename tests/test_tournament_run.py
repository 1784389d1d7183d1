"""The orchestrator over a fake round function: budget, asynchrony, lineage, faults, champion, run.json.

The fake round is a tiny stand-in for PPO: a pod's "skill" is its parent's skill (read back from the
parent's checkpoint, as real weights would be) plus a gain in (0, 1] that peaks at one learning rate, so the
tournament can only find good pods by copying the best and perturbing. ``ctx.agent`` carries fault
injection (pods that raise, return NaN, hang, or kill their worker process).
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest

from agents.tournament.backends import InlineBackend, ProcessBackend
from agents.tournament.leaderboard import read_events, read_leaderboard, read_pods
from agents.tournament.orchestrator import run_tournament as orchestrate
from agents.tournament.pod import PodOutcome
from agents.tournament.settings import TournamentArgs
from app.runs import RunDir
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.errors import PodracerError


def run_tournament(run_dir, *args, **kwargs):
    """The orchestrator with the run record kept as the training workflow keeps it (``on_status``),
    daily returns annualized over a year of trading days unless a test says otherwise."""
    kwargs.setdefault("annualization", TRADING_DAYS_PER_YEAR)
    return orchestrate(run_dir, *args, on_status=RunDir.at(run_dir).on_status, **kwargs)


BEST_LR = 3e-4


def fake_round(task, ctx):
    """Stand-in for ``ppo_round`` (module level, so worker processes can import it)."""
    spec = task.spec
    faults = ctx.agent
    if spec.seq in faults.get("raise_seqs", ()):
        raise RuntimeError(f"boom in {spec.pod_id}")
    if spec.seq in faults.get("exit_seqs", ()):
        os._exit(3)  # the worker process dies without a word
    if spec.seq in faults.get("hang_seqs", ()):
        time.sleep(3600)  # hangs: no NaN, no crash, no result
    if faults.get("sleep"):
        time.sleep(faults["sleep"])
    parent_skill = 0.0
    if spec.init_checkpoint is not None:
        with open(os.path.join(spec.init_checkpoint, "skill.json")) as fh:
            parent_skill = json.load(fh)["skill"]
    gain = 1.0 / (1.0 + math.log10(spec.hparams["learning_rate"] / BEST_LR) ** 2)
    skill = parent_skill + gain
    os.makedirs(task.checkpoint_dir, exist_ok=True)
    for name, payload in (
        ("skill.json", json.dumps({"skill": skill})),
        ("spec.json", json.dumps({"pod": spec.pod_id})),
        ("policy.safetensors", "weights"),
    ):
        with open(os.path.join(task.checkpoint_dir, name), "w") as fh:
            fh.write(payload)
    if faults.get("record_pid"):
        with open(os.path.join(task.checkpoint_dir, "pid"), "w") as fh:
            fh.write(str(os.getpid()))
    score = float("nan") if spec.seq in faults.get("nan_seqs", ()) else skill
    return PodOutcome(
        pod_id=spec.pod_id,
        score=score,
        metrics={"sharpe_ratio": skill / 2, "num_days": float(ctx.valid.num_sessions)},
        round_steps=task.round_steps,
        env_steps=spec.parent_env_steps + task.round_steps,
        checkpoint=task.checkpoint_dir,
    )


def _args(**kw):
    base = dict(
        pods=2, leaderboard_size=3, p_fresh=0.3, round_steps=100, budget_steps=2000, workers=0, seed=0
    )
    return TournamentArgs(**{**base, **kw})


def test_inline_tournament_spends_the_budget_and_improves(tmp_path, windows):
    train, valid = windows
    snapshots = []
    result = run_tournament(
        tmp_path / "run",
        train,
        valid,
        args=_args(),
        round_fn=fake_round,
        backend=InlineBackend(),
        config_toml="[tournament]\npods = 2\n",
        on_progress=snapshots.append,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    pods = read_pods(tmp_path / "run")
    assert len(pods) == 20 and result.pods_tried == 20 and result.env_steps == 2000
    board = read_leaderboard(tmp_path / "run")
    assert len(board) == 3
    scores = [p["score"] for p in pods]
    assert [e["score"] for e in board] == sorted(scores, reverse=True)[:3]
    # Copying the best compounds skill along lineages: the champion is a deep descendant that
    # beats every fresh pod (a fresh pod's skill is at most 1).
    assert board[0]["generation"] >= 2 and board[0]["score"] > 1.0
    assert result.champion["pod_id"] == board[0]["pod_id"]
    for p in pods:
        if p["parent_id"] is not None:
            parent = next(q for q in pods if q["pod_id"] == p["parent_id"])
            assert parent["seq"] < p["seq"] and p["generation"] == parent["generation"] + 1
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["pods_tried"] == 20 and run["status"] == "done"
    assert run["trial_sharpes"] == pytest.approx([p["metrics"]["sharpe_ratio"] for p in pods])
    assert run["champion"]["pod_id"] == board[0]["pod_id"]
    assert run["windows"]["valid"] == list(valid.date_range())
    champion = tmp_path / "run" / "champion"
    assert sorted(f.name for f in champion.iterdir()) == ["policy.safetensors", "spec.json"]
    assert json.loads((champion / "spec.json").read_text()) == {"pod": board[0]["pod_id"]}
    assert (tmp_path / "run" / "config.toml").read_text() == "[tournament]\npods = 2\n"
    assert snapshots and snapshots[-1]["env_steps_spent"] == 2000
    assert not (tmp_path / "run" / ".champion.tmp").exists()


def test_last_round_is_cut_to_the_budget(tmp_path, windows):
    train, valid = windows
    result = run_tournament(
        tmp_path / "r",
        *windows,
        args=_args(budget_steps=250),
        round_fn=fake_round,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    assert [p["round_steps"] for p in read_pods(tmp_path / "r")] == [100, 100, 50]
    assert result.env_steps == 250


def test_crash_and_nan_pods_are_isolated(tmp_path, windows):
    faults = {"raise_seqs": [1, 4], "nan_seqs": [2, 5]}
    result = run_tournament(
        tmp_path / "run",
        *windows,
        args=_args(budget_steps=1200),
        round_fn=fake_round,
        agent=faults,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    pods = read_pods(tmp_path / "run")
    failed = {p["pod_id"]: p["error"] for p in pods if p["status"] == "failed"}
    assert sorted(failed) == ["p0001", "p0002", "p0004", "p0005"]
    assert "RuntimeError: boom in p0001" in failed["p0001"]
    assert "NaN" in failed["p0002"] or "nan" in failed["p0002"]
    board_ids = {e["pod_id"] for e in read_leaderboard(tmp_path / "run")}
    assert not board_ids & set(failed)
    assert result.pods_failed == 4 and result.pods_tried == 8  # replaced: 12 rounds fit the budget
    kinds = [e["kind"] for e in read_events(tmp_path / "run") if e["pod_id"] in failed]
    assert kinds.count("failed") == 4 and "scored" not in kinds


def test_a_run_where_every_pod_fails_stops_with_one_error(tmp_path, windows):
    faults = {"raise_seqs": list(range(100))}
    with pytest.raises(PodracerError, match="3 pods failed in a row"):
        run_tournament(
            tmp_path / "run",
            *windows,
            args=_args(max_consecutive_failures=3),
            round_fn=fake_round,
            agent=faults,
            annualization=TRADING_DAYS_PER_YEAR,
        )
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"


def test_guards_on_windows_and_run_dirs(tmp_path, windows):
    train, valid = windows
    with pytest.raises(PodracerError, match="after the train window"):
        run_tournament(
            tmp_path / "a",
            valid,
            train,
            args=_args(),
            round_fn=fake_round,
            annualization=TRADING_DAYS_PER_YEAR,
        )
    with pytest.raises(PodracerError, match="cannot resume"):
        run_tournament(
            tmp_path / "b",
            train,
            valid,
            args=_args(),
            round_fn=fake_round,
            resume=True,
            annualization=TRADING_DAYS_PER_YEAR,
        )
    run_tournament(
        tmp_path / "c",
        train,
        valid,
        args=_args(budget_steps=100),
        round_fn=fake_round,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    with pytest.raises(PodracerError, match="already holds"):
        run_tournament(
            tmp_path / "c",
            train,
            valid,
            args=_args(),
            round_fn=fake_round,
            annualization=TRADING_DAYS_PER_YEAR,
        )


def test_process_backend_is_asynchronous_and_survives_a_dead_worker(tmp_path, windows):
    """Two worker processes; pod 1 kills its worker; the others go on and the pool is rebuilt."""
    faults = {"exit_seqs": [1], "sleep": 0.2}
    start = time.monotonic()
    result = run_tournament(
        tmp_path / "run",
        *windows,
        args=_args(budget_steps=800, workers=2),
        round_fn=fake_round,
        agent=faults,
        backend=ProcessBackend(2, threads_per_worker=1),
        annualization=TRADING_DAYS_PER_YEAR,
    )
    pods = read_pods(tmp_path / "run")
    failed = [p for p in pods if p["status"] == "failed"]
    assert "p0001" in {p["pod_id"] for p in failed}
    assert all("worker lost" in p["error"] for p in failed)
    assert result.pods_tried >= 5 and result.pods_tried + len(failed) == len(pods)
    assert result.env_steps == 800
    # Rounds overlapped: two pods were running at once at some point.
    starts = sorted(p["created"] for p in pods)
    ends = sorted(p["updated"] for p in pods)
    assert starts[1] < ends[0]
    assert time.monotonic() - start < 60


def test_time_budget_stops_launching(tmp_path, windows):
    faults = {"sleep": 0.3}
    start = time.monotonic()
    result = run_tournament(
        tmp_path / "run",
        *windows,
        args=_args(budget_steps=None, budget_minutes=1.0 / 60.0),
        round_fn=fake_round,
        agent=faults,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    assert 1 <= result.pods_tried <= 5
    assert time.monotonic() - start < 5
    assert np.isfinite(result.champion["score"])
