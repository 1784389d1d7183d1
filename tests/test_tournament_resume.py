"""kill -9 of the orchestrator, then resume: no leaderboard entry, checkpoint or scored pod is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import toy_windows

from agents.tournament.leaderboard import read_events, read_leaderboard, read_pods
from agents.tournament.settings import TournamentArgs
from backtests.metrics import TRADING_DAYS_PER_YEAR

TESTS = Path(__file__).resolve().parent
ARGS = dict(pods=1, leaderboard_size=3, p_fresh=0.3, round_steps=100, budget_steps=3000, workers=1, seed=5)

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_tournament_run import fake_round, run_tournament
    from helpers import toy_windows
    from agents.tournament.settings import TournamentArgs
    train, valid = toy_windows()
    run_tournament({run!r}, train, valid, args=TournamentArgs(**{args!r}), round_fn=fake_round,
                   agent={{"sleep": 0.15, "record_pid": True}})
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours is dead too; a worker is not our child, so this is only a guard.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("backend", ["local", "population"])
def test_kill_dash_nine_then_resume_loses_nothing(tmp_path, backend):
    # population: pods in lockstep populations of 3, run in one worker process (the real learner
    # resumes in tests/test_tournament_population.py)
    args_used = {**ARGS, "backend": backend, **({"pods": 3} if backend == "population" else {})}
    run = tmp_path / "run"
    script = SCRIPT.format(tests=str(TESTS), run=str(run), args=args_used)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=TESTS.parent)
    try:
        deadline = time.monotonic() + 90
        scored = []
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if proc.poll() is not None:
                raise AssertionError(f"the orchestrator exited early with {proc.returncode}")
            if (run / "leaderboard.sqlite").is_file():
                scored = [p for p in read_pods(run) if p["score"] is not None]
                if len(scored) >= 5:
                    break
        assert len(scored) >= 5, "the orchestrator did not score 5 pods in time"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    before_board = read_leaderboard(run)
    before_pods = {p["pod_id"]: p for p in read_pods(run)}
    assert len(before_board) == 3

    # The killed orchestrator's worker process notices and exits: no orphan keeps running.
    pids = set()
    for pod_dir in (run / "pods").iterdir():
        if (pod_dir / "pid").is_file():
            pids.add(int((pod_dir / "pid").read_text()))
    assert pids
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)

    from test_tournament_run import fake_round, run_tournament

    train, valid = toy_windows()
    args = TournamentArgs(**{**args_used, "workers": 0})
    result = run_tournament(
        run, train, valid, args=args, round_fn=fake_round, resume=True, annualization=TRADING_DAYS_PER_YEAR
    )

    after_pods = {p["pod_id"]: p for p in read_pods(run)}
    after_board = {e["pod_id"]: e for e in read_leaderboard(run)}
    events = read_events(run)
    pruned = {e["pod_id"] for e in events if e["kind"] == "pruned"}
    for entry in before_board:
        # Every entry is still on the board, or a better pod pushed it out after the resume.
        if entry["pod_id"] in after_board:
            assert after_board[entry["pod_id"]]["score"] == entry["score"]
        else:
            assert entry["pod_id"] in pruned
            assert min(e["score"] for e in after_board.values()) >= entry["score"]
        assert (run / entry["checkpoint"] / "spec.json").is_file()
    for pod_id, pod in before_pods.items():
        if pod["status"] == "running":
            assert after_pods[pod_id]["status"] == "failed"
            assert "interrupted" in after_pods[pod_id]["error"]
        else:
            assert after_pods[pod_id]["score"] == pod["score"]
    assert [e["kind"] for e in events].count("resumed") == 1
    assert result.env_steps == 3000
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["status"] == "done"
    assert run_json["pods_tried"] == sum(1 for p in after_pods.values() if p["score"] is not None)
    assert len(after_pods) > len(before_pods)
    assert (run / "champion" / "spec.json").is_file()


def interrupting_round(task, ctx):
    """The fake round, but the orchestrator "dies" (KeyboardInterrupt) while pod ``stop_seq`` runs."""
    from test_tournament_run import fake_round

    if task.spec.seq == ctx.agent["stop_seq"]:
        raise KeyboardInterrupt
    return fake_round(task, ctx)


def test_resume_with_rerun_ends_as_a_run_that_was_never_stopped(tmp_path):
    """``interrupted="rerun"``: the pod in flight when the run stopped runs again with its own spec, so
    one pod at a time and an env-step budget give the same pods, scores and champion."""
    from test_tournament_run import fake_round, run_tournament

    train, valid = toy_windows()
    args = TournamentArgs(**{**ARGS, "workers": 0})
    whole = run_tournament(
        tmp_path / "whole", train, valid, args=args, round_fn=fake_round, annualization=TRADING_DAYS_PER_YEAR
    )

    run = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        run_tournament(
            run,
            train,
            valid,
            args=args,
            round_fn=interrupting_round,
            agent={"stop_seq": 6},
            annualization=TRADING_DAYS_PER_YEAR,
        )
    assert [p["status"] for p in read_pods(run)][-1] == "running"
    resumed = run_tournament(
        run,
        train,
        valid,
        args=args,
        round_fn=fake_round,
        resume=True,
        interrupted="rerun",
        annualization=TRADING_DAYS_PER_YEAR,
    )

    def scored(path):
        return [(p["pod_id"], p["parent_id"], p["score"], p["status"]) for p in read_pods(path)]

    assert scored(run) == scored(tmp_path / "whole")
    assert resumed.champion["pod_id"] == whole.champion["pod_id"]
    assert resumed.env_steps == whole.env_steps == 3000
    (event,) = [e for e in read_events(run) if e["kind"] == "resumed"]
    assert event["payload"]["rerun"] == ["p0006"] and event["payload"]["interrupted"] == []
