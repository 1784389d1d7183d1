"""Tournament building blocks: search space, generator selection, leaderboard ordering and pruning."""

from __future__ import annotations

import sqlite3
from collections import Counter

import numpy as np
import pytest

from agents.tournament.generator import best_first, next_pod, rank_weights, select_parent
from agents.tournament.leaderboard import Leaderboard, read_events, read_leaderboard, read_pods
from agents.tournament.search_space import Param, SearchSpace, default_search_space
from data.errors import ConfigError, PodracerError


# --- search space ---------------------------------------------------------------------------------
def test_sample_is_within_bounds_and_reproducible():
    space = default_search_space("ppo")
    draws = [space.sample(np.random.default_rng(i)) for i in range(200)]
    assert all(space.contains(d) for d in draws)
    assert space.sample(np.random.default_rng(7)) == space.sample(np.random.default_rng(7))
    lrs = np.array([d["learning_rate"] for d in draws])
    # Log-uniform over the range: about half the draws below the geometric midpoint.
    lr = next(p for p in space.params if p.name == "learning_rate")
    assert 0.3 < np.mean(lrs < np.sqrt(lr.low * lr.high)) < 0.7


def test_mutation_stays_within_bounds_even_from_the_edges():
    space = default_search_space("ppo")
    rng = np.random.default_rng(0)
    for low_edge in (True, False):
        parent = {p.name: (p.low if low_edge else p.high) for p in space.params}
        parent["update_epochs"] = int(parent["update_epochs"])
        for _ in range(300):
            child = space.mutate(parent, rng)
            assert space.contains(child), child
            parent = child


def test_mutation_perturbs_by_the_pbt_factors():
    space = SearchSpace(params=(Param("x", 0.001, 1000.0),), resample_prob=0.0)
    rng = np.random.default_rng(1)
    seen = {round(space.mutate({"x": 10.0}, rng)["x"], 9) for _ in range(100)}
    assert seen == {8.0, 12.0}


def test_integer_parameters_move_and_stay_integral():
    space = SearchSpace(params=(Param("epochs", 1, 8, kind="int"),), resample_prob=0.0)
    rng = np.random.default_rng(2)
    children = {space.mutate({"epochs": 2}, rng)["epochs"] for _ in range(50)}
    assert children == {1, 3}
    assert all(isinstance(c, int) for c in children)


def test_bad_search_spaces_are_config_errors():
    with pytest.raises(ConfigError):
        Param("lr", 0.0, 1.0, log=True)
    with pytest.raises(ConfigError):
        Param("x", 2.0, 1.0)
    with pytest.raises(ConfigError):
        default_search_space("dqn")


# --- generator ------------------------------------------------------------------------------------
def _entries(scores):
    return [
        {
            "pod_id": f"p{i:04d}",
            "score": s,
            "hparams": {"learning_rate": 1e-3},
            "generation": i,
            "checkpoint": f"/ckpt/p{i:04d}",
            "env_steps": 100 * i,
            "algo": "ppo",
        }
        for i, s in enumerate(scores)
    ]


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_selection_prefers_the_best_whatever_the_input_order(order):
    scores = [0.1, 0.5, -0.3, 2.0, 1.0]
    entries = _entries(scores)
    if order == "ascending":
        entries.sort(key=lambda e: e["score"])
    elif order == "descending":
        entries.sort(key=lambda e: -e["score"])
    else:
        np.random.default_rng(3).shuffle(entries)
    rng = np.random.default_rng(0)
    counts = Counter(select_parent(entries, rng)["score"] for _ in range(5000))
    by_rank = [counts[s] for s in sorted(scores, reverse=True)]
    # Linear rank weights 5:4:3:2:1 -> the best is picked about a third of the time, the worst 1/15.
    assert by_rank == sorted(by_rank, reverse=True)
    assert counts[2.0] / 5000 == pytest.approx(5 / 15, abs=0.03)
    assert counts[-0.3] / 5000 == pytest.approx(1 / 15, abs=0.02)


def test_rank_weights_put_the_most_mass_first():
    w = rank_weights(4)
    assert w.sum() == pytest.approx(1.0)
    assert list(w) == sorted(w, reverse=True) and w[0] > w[-1]
    assert best_first(_entries([1.0, 3.0, 2.0]))[0]["score"] == 3.0


def test_child_copies_parent_checkpoint_and_lineage():
    entries = _entries([0.1, 9.0])
    space = default_search_space("ppo")
    children = [
        next_pod(seq, entries=entries, space=space, p_fresh=0.0, seed=0, algo="ppo") for seq in range(200)
    ]
    assert all(c.parent_id is not None for c in children)
    best_share = np.mean([c.parent_id == "p0001" for c in children])
    assert best_share == pytest.approx(2 / 3, abs=0.08)
    child = next(c for c in children if c.parent_id == "p0001")
    assert child.init_checkpoint == "/ckpt/p0001"
    assert child.generation == 2 and child.parent_env_steps == 100
    assert space.contains(child.hparams)


def test_fresh_pods_when_board_empty_or_p_fresh_one():
    space = default_search_space("ppo")
    assert next_pod(0, entries=[], space=space, p_fresh=0.0, seed=0, algo="ppo").parent_id is None
    fresh = [
        next_pod(s, entries=_entries([1.0]), space=space, p_fresh=1.0, seed=0, algo="ppo") for s in range(20)
    ]
    assert all(p.parent_id is None and p.init_checkpoint is None and p.generation == 0 for p in fresh)
    # Same (seed, seq) -> same pod: what makes a resumed run draw what it would have drawn.
    a = next_pod(5, entries=_entries([1.0, 2.0]), space=space, p_fresh=0.3, seed=4, algo="ppo")
    b = next_pod(5, entries=_entries([1.0, 2.0]), space=space, p_fresh=0.3, seed=4, algo="ppo")
    assert a == b


# --- leaderboard ----------------------------------------------------------------------------------
def _start(board, seq, parent=None):
    pod_id = f"p{seq:04d}"
    board.start_pod(
        pod_id,
        seq=seq,
        parent_id=parent,
        generation=0 if parent is None else 1,
        algo="ppo",
        hparams={"learning_rate": 1e-3},
        seed=seq,
        checkpoint=f"pods/{pod_id}",
    )
    return pod_id


def test_leaderboard_keeps_the_best_k_in_order(tmp_path):
    scores = [0.5, -1.0, 2.0, 0.7, 3.0, 0.1, 1.5, -2.0]
    with Leaderboard(tmp_path, size=3) as board:
        decisions = {}
        for seq, score in enumerate(scores):
            pod_id = _start(board, seq)
            decisions[pod_id] = board.record_score(
                pod_id, score=score, metrics={"sharpe_ratio": score}, round_steps=10, env_steps=10
            )
        top = [e["score"] for e in board.entries()]
        assert top == sorted(scores, reverse=True)[:3]
        assert board.env_steps_spent() == 10 * len(scores)
    # The read helpers see the same, from a read-only connection.
    board_rows = read_leaderboard(tmp_path)
    assert [r["rank"] for r in board_rows] == [1, 2, 3]
    assert [r["pod_id"] for r in board_rows] == ["p0004", "p0002", "p0006"]
    assert board_rows[0]["metrics"] == {"sharpe_ratio": 3.0}
    pods = {p["pod_id"]: p for p in read_pods(tmp_path)}
    assert len(pods) == len(scores)
    assert pods["p0004"]["status"] == "leader"
    assert pods["p0000"]["status"] == "pruned"  # inserted while there was room, pushed out later
    assert pods["p0007"]["status"] == "rejected"
    kinds = Counter(e["kind"] for e in read_events(tmp_path))
    assert kinds["started"] == kinds["scored"] == len(scores)
    assert kinds["inserted"] == sum(1 for d in decisions.values() if d == "inserted")
    assert kinds["inserted"] - kinds["pruned"] == 3
    assert kinds["rejected"] == sum(1 for d in decisions.values() if d == "rejected")


def test_equal_score_does_not_evict_and_nan_is_refused(tmp_path):
    with Leaderboard(tmp_path, size=1) as board:
        first = _start(board, 0)
        assert board.record_score(first, score=1.0, metrics={}, round_steps=1, env_steps=1) == "inserted"
        tie = _start(board, 1)
        assert board.record_score(tie, score=1.0, metrics={}, round_steps=1, env_steps=1) == "rejected"
        assert [e["pod_id"] for e in board.entries()] == [first]
        bad = _start(board, 2)
        with pytest.raises(ValueError):
            board.record_score(bad, score=float("nan"), metrics={}, round_steps=1, env_steps=1)
        board.record_failure(bad, "NaN score", round_steps=5)
        assert board.env_steps_spent() == 7
        assert board.pods()[2]["status"] == "failed"


def test_leaderboard_is_wal_and_failed_transactions_roll_back(tmp_path):
    with Leaderboard(tmp_path, size=2) as board:
        pod = _start(board, 0)
        with pytest.raises(sqlite3.IntegrityError):
            _start(board, 0)  # duplicate pod id: the whole transaction (row + event) rolls back
        assert len(board.events()) == 1
        board.record_score(pod, score=0.3, metrics={"x": float("inf")}, round_steps=1, env_steps=1)
        assert board.entries()[0]["metrics"] == {"x": None}  # non-finite values stored as null
    conn = sqlite3.connect(tmp_path / "leaderboard.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_resume_marks_in_flight_pods_failed(tmp_path):
    with Leaderboard(tmp_path, size=2) as board:
        done = _start(board, 0)
        board.record_score(done, score=1.0, metrics={}, round_steps=1, env_steps=1)
        _start(board, 1)
    with Leaderboard(tmp_path, size=2) as board:
        assert board.mark_resumed({"pid": 1}) == ["p0001"]
        assert [e["pod_id"] for e in board.entries()] == [done]
        assert board.next_seq() == 2
    events = read_events(tmp_path)
    assert events[-1]["kind"] == "resumed" and events[-1]["payload"]["interrupted"] == ["p0001"]


def test_readers_refuse_a_missing_board(tmp_path):
    with pytest.raises(PodracerError):
        read_leaderboard(tmp_path)


def test_corrupt_leaderboard_is_a_one_line_error(tmp_path):
    (tmp_path / "leaderboard.sqlite").write_text("not a database\n")
    with pytest.raises(PodracerError, match="cannot open leaderboard .*leaderboard.sqlite"):
        Leaderboard(tmp_path, size=2)
