"""Overlapping population rounds (``agents.tournament.round_pipeline``): round k is scored and written
while round k+1 trains, and still no round's results are lost, reordered or recorded before their files;
the same run every time; a failed writer or scoring is an error on its pods; a kill leaves the board at
its last recorded state. CPU population backend, inline (the finisher is a real thread)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from test_tournament_ppo import AGENT, ENV
from test_tournament_run import fake_round, run_tournament

from agents.ppo import PPOArgs, train
from agents.tournament import population as population_module
from agents.tournament.leaderboard import read_events, read_leaderboard, read_pods
from agents.tournament.pod import VALID_RETURNS, RoundError
from agents.tournament.population_backend import PopulationBackend
from agents.tournament.round_pipeline import RoundPipeline, host_results
from agents.tournament.settings import TournamentArgs
from backtests.metrics import TRADING_DAYS_PER_YEAR
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

POD_FILES = {"policy.safetensors", "spec.json", "optimizer.safetensors", "optimizer.json", "curve.parquet"}


def _trained(name, delay=0.0, fail=None):
    """A round's setup, for RoundPipeline.run: its training hands back a finishing."""

    def finish(host):
        time.sleep(delay)
        if fail is not None:
            raise fail
        return [name]

    return lambda: lambda: ({}, finish)


def test_the_pipeline_hands_back_every_round_in_order():
    overlapping = RoundPipeline(overlap=True)
    # The first round's finishing is slow: the second round trains meanwhile, and its outcomes wait.
    assert overlapping.run(_trained("r0", delay=0.3), 1) is None
    assert overlapping.run(_trained("r1"), 1) == ["r0"]
    assert overlapping.run(_trained("r2", fail=OSError("disk full")), 1) == ["r1"]
    # A finishing that fails comes back as its pods' errors, with the cause.
    (error,) = overlapping.run(_trained("r3"), 1)
    assert isinstance(error, RoundError) and "disk full" in str(error)
    assert overlapping.drain() == ["r3"] and overlapping.drain() is None

    # A round whose setup or training fails is its pods' errors, in its turn; the rounds around it
    # are unaffected.
    def broken():
        raise RuntimeError("no device")

    assert overlapping.run(_trained("r4"), 2) is None
    assert overlapping.run(broken, 2) == ["r4"]
    assert [str(e) for e in overlapping.run(lambda: broken, 1)] == ["RuntimeError: no device"] * 2
    assert [str(e) for e in overlapping.run(_trained("r5"), 1)] == ["RuntimeError: no device"]
    assert overlapping.drain() == ["r5"]
    overlapping.close()
    # Without overlap the same code hands back each round's own outcomes.
    lockstep = RoundPipeline(overlap=False)
    assert lockstep.run(_trained("a", delay=0.1), 1) == ["a"] and lockstep.run(_trained("b"), 1) == ["b"]
    assert lockstep.drain() is None
    lockstep.close()


def _fake_run(path, windows, workers=0):
    args = TournamentArgs(
        leaderboard_size=3, p_fresh=0.3, round_steps=100, budget_steps=1600, workers=workers, seed=0
    )  # fmt: skip
    backend = PopulationBackend(3, workers=workers, overlap=True)
    return run_tournament(
        path, *windows, args=args, round_fn=fake_round, backend=backend, annualization=TRADING_DAYS_PER_YEAR
    )


def test_overlapping_rounds_lose_reorder_and_vary_nothing(tmp_path, windows):
    """Each population is generated from a board one population behind, and every result lands on its pod."""
    result = _fake_run(tmp_path / "a", windows)
    pods = read_pods(tmp_path / "a")
    assert result.env_steps == 1600 and len(pods) == 16 and all(p["score"] is not None for p in pods)
    kinds = [e["kind"] for e in read_events(tmp_path / "a") if e["kind"] in ("started", "scored")]
    # Population k+1 starts before population k is scored; the last one (1 pod) comes back by a drain.
    expected = ["started"] * 6 + (["scored"] * 3 + ["started"] * 3) * 3 + ["scored"] * 3 + ["started"]
    assert kinds == expected + ["scored"] * 3 + ["scored"]
    for pod in pods:
        skill = json.loads((tmp_path / "a" / "pods" / pod["pod_id"] / "skill.json").read_text())["skill"]
        assert pod["score"] == skill  # its own outcome, not a neighbour's
        if pod["parent_id"] is not None:
            parent_seq = next(p["seq"] for p in pods if p["pod_id"] == pod["parent_id"])
            assert parent_seq < pod["seq"] - pod["seq"] % 3 - 3  # from a population two or more back
    board = read_leaderboard(tmp_path / "a")
    assert [e["score"] for e in board] == sorted((p["score"] for p in pods), reverse=True)[:3]
    # The same run again, and in a worker process (whose jobs hand back the round before theirs).
    keys = ("pod_id", "parent_id", "hparams", "score")
    for name, workers in (("b", 0), ("c", 1)):
        _fake_run(tmp_path / name, windows, workers=workers)
        again = read_pods(tmp_path / name)
        assert [{k: p[k] for k in keys} for p in again] == [{k: p[k] for k in keys} for p in pods], name
        assert [
            e["kind"] for e in read_events(tmp_path / name) if e["kind"] in ("started", "scored")
        ] == kinds


def _ppo_run(path, windows_ppo, budget_pods=6, **kw):
    train, valid = windows_ppo
    args = TournamentArgs(
        leaderboard_size=2, p_fresh=0.3, round_steps=256, budget_steps=256 * budget_pods, workers=0, seed=3,
        backend="population", population_size=3, overlap_rounds=True, max_consecutive_failures=6,
    )  # fmt: skip
    agent = {**AGENT, "update_epochs": 2}
    return run_tournament(path, train, valid, args=args, env=ENV, agent=agent, **kw)


def test_real_overlapping_rounds_give_the_same_run_with_every_file(tmp_path, windows_ppo, caplog):
    with caplog.at_level("INFO", logger="agents.tournament.population_backend"):
        a = _ppo_run(tmp_path / "a", windows_ppo)
    lines = [r.getMessage() for r in caplog.records if "population round of" in r.getMessage()]
    assert len(lines) == 2 and all("% of the time (device busy, estimated)" in line for line in lines), lines
    b = _ppo_run(tmp_path / "b", windows_ppo)
    pods_a, pods_b = read_pods(a.run_dir), read_pods(b.run_dir)
    assert len(pods_a) == 6 and all(p["score"] is not None for p in pods_a)
    keys = ("pod_id", "parent_id", "hparams", "score", "metrics", "env_steps")
    assert [{k: p[k] for k in keys} for p in pods_a] == [{k: p[k] for k in keys} for p in pods_b]
    for pod in pods_a:
        assert POD_FILES | {VALID_RETURNS} <= {f.name for f in (a.run_dir / "pods" / pod["pod_id"]).iterdir()}


def test_a_writer_or_scoring_failure_is_an_error_on_its_pods(tmp_path, windows_ppo, monkeypatch):
    save = population_module.save_round
    scoring = population_module.score_policies
    calls = []

    def failing_save(task, *args):
        if task.spec.pod_id == "p0001":
            raise OSError("disk full")
        return save(task, *args)

    def failing_scoring(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("scoring crashed")
        return scoring(*args, **kw)

    monkeypatch.setattr(population_module, "save_round", failing_save)
    monkeypatch.setattr(population_module, "score_policies", failing_scoring)
    result = _ppo_run(tmp_path / "run", windows_ppo, budget_pods=9)
    pods = {p["pod_id"]: p for p in read_pods(result.run_dir)}
    failed = {k: p["error"] for k, p in pods.items() if p["status"] == "failed"}
    assert set(failed) == {"p0001", "p0003", "p0004", "p0005"}, failed
    assert "disk full" in failed["p0001"]
    assert all("scoring crashed" in failed[k] for k in ("p0003", "p0004", "p0005"))
    assert result.pods_tried == 5 and all(pods[k]["score"] is not None for k in ("p0000", "p0002"))


def test_a_kill_leaves_the_board_at_its_last_recorded_state(tmp_path, windows_ppo):
    def stop_after_first_population(snapshot):
        if snapshot["env_steps_spent"] >= 3 * 256:
            raise KeyboardInterrupt

    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _ppo_run(run, windows_ppo, budget_pods=9, on_progress=stop_after_first_population)
    before = {p["pod_id"]: p for p in read_pods(run) if p["score"] is not None}
    assert len(before) == 3  # the first population; the second trained, but nothing of it was recorded
    for entry in read_leaderboard(run):
        assert {f.name for f in (run / entry["checkpoint"]).iterdir()} >= POD_FILES
    result = _ppo_run(run, windows_ppo, budget_pods=9, resume=True)
    after = {p["pod_id"]: p for p in read_pods(run)}
    assert result.env_steps == 256 * 9 and all(after[k]["score"] == p["score"] for k, p in before.items())
    for entry in read_leaderboard(run):
        assert {f.name for f in Path(run / entry["checkpoint"]).iterdir()} >= POD_FILES


def test_a_pods_host_copy_holds_its_weights_statistics_and_optimizer_state(windows_ppo):
    """What the file threads write on a GPU (``host_results``'s copy, exercised here without pinning)."""
    train_window, _valid = windows_ppo
    params = EnvParams(**{k: v for k, v in ENV.items() if k != "num_envs"})
    env = TradingVecEnv(train_window, params, num_envs=ENV["num_envs"], seed=0)
    result = train(PPOArgs(**AGENT, total_steps=256, seed=1), env)
    assert host_results([result])[0] is result  # (already on the host: nothing to copy)
    (copied,) = host_results([result], copy=True)
    original, host = result.policy.state_dict(), copied.policy.state_dict()
    assert original.keys() == host.keys() and all(torch.equal(original[k], host[k]) for k in original)
    assert all(host[k].data_ptr() != original[k].data_ptr() for k in original)
    assert copied.policy.obs_norm.count == result.policy.obs_norm.count > 0
    for i, per in result.optimizer_state["state"].items():
        for key, value in per.items():
            assert torch.equal(copied.optimizer_state["state"][i][key], value)
    assert (copied.env_steps, copied.history) == (result.env_steps, result.history)
