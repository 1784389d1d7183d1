"""The tournament on the population backend: lockstep rounds, the same run every time, resume, the
backend choice (``auto``), and a real PPO population end to end."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from test_tournament_ppo import AGENT, ENV
from test_tournament_run import fake_round, run_tournament

from agents.tournament.backend_choice import make_backend, resolve_backend
from agents.tournament.backends import InlineBackend, ProcessBackend, RayBackend
from agents.tournament.leaderboard import read_events, read_leaderboard, read_pods
from agents.tournament.pod import VALID_RETURNS
from agents.tournament.population_backend import PopulationBackend
from agents.tournament.settings import TournamentArgs
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def test_auto_is_population_on_cuda_and_local_workers_on_a_cpu():
    assert resolve_backend("auto", "cpu") == "local"
    assert resolve_backend("auto", "cuda") == "population"
    assert resolve_backend("auto", torch.device("cuda", 1)) == "population"
    assert resolve_backend("auto", "cuda", algo="sac") == "local"  # no population learner for SAC
    assert isinstance(make_backend("auto", workers=2, device="cpu"), ProcessBackend)
    assert isinstance(make_backend("auto", workers=0, device="cpu"), InlineBackend)
    backend = make_backend("auto", workers=3, device="cuda", population_size=16)
    assert isinstance(backend, PopulationBackend) and backend.mode == "process"
    assert backend.population_size == 16
    assert make_backend("population", workers=0).mode == "inline"
    # ``pods`` is the population size on the population backend (the same setting as population_size).
    assert make_backend("population", workers=0, pods=8).population_size == 8
    assert make_backend("population", workers=0, pods=8, population_size=8).population_size == 8
    with pytest.raises(ConfigError, match="give one of them"):
        make_backend("population", pods=8, population_size=16)
    # A setting the chosen backend would not use is refused, never ignored.
    with pytest.raises(ConfigError, match="population_size = 16 applies to the population backend only"):
        make_backend("auto", device="cpu", population_size=16)
    with pytest.raises(ConfigError, match="address"):
        make_backend("local", address="ray://x:1")
    with pytest.raises(ConfigError, match="envs_per_pod = 512 applies to the population backend only"):
        make_backend("ray", envs_per_pod=512)
    assert make_backend("population", envs_per_pod=512).shape.envs == 512
    assert isinstance(make_backend("ray", address="ray://x:1"), RayBackend)
    with pytest.raises(ConfigError, match="ppo and direct pods only"):
        make_backend("population", algo="sac")
    with pytest.raises(ConfigError, match="unknown backend"):
        make_backend("gpu")
    assert TournamentArgs().backend == "auto"
    # Refused when the settings are read, before a run folder exists.
    with pytest.raises(ConfigError, match="ppo and direct pods only"):
        TournamentArgs(backend="population", algo="sac")
    with pytest.raises(ConfigError, match="tournament.backend"):
        TournamentArgs(backend="gpu")


def test_pods_run_in_lockstep_populations(tmp_path, windows):
    """Every pod of a population is generated from a board that holds every earlier population."""
    args = TournamentArgs(
        pods=1, leaderboard_size=3, p_fresh=0.3, round_steps=100, budget_steps=1600, workers=0, seed=0
    )
    backend = PopulationBackend(3, workers=0)
    result = run_tournament(
        tmp_path / "run",
        *windows,
        args=args,
        round_fn=fake_round,
        backend=backend,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    pods = read_pods(tmp_path / "run")
    assert result.env_steps == 1600 and len(pods) == 16  # 5 populations of 3, then the last pod
    kinds = [e["kind"] for e in read_events(tmp_path / "run") if e["kind"] in ("started", "scored")]
    assert kinds == (["started"] * 3 + ["scored"] * 3) * 5 + ["started", "scored"]
    for pod in pods:
        if pod["parent_id"] is not None:
            parent_seq = next(p["seq"] for p in pods if p["pod_id"] == pod["parent_id"])
            assert parent_seq < pod["seq"] - pod["seq"] % 3  # from an earlier population
    board = read_leaderboard(tmp_path / "run")
    assert [e["score"] for e in board] == sorted((p["score"] for p in pods), reverse=True)[:3]
    assert result.champion["pod_id"] == board[0]["pod_id"]


def test_a_failing_pod_fails_alone_in_its_population(tmp_path, windows):
    args = TournamentArgs(pods=1, leaderboard_size=3, round_steps=100, budget_steps=600, workers=0, seed=1)
    result = run_tournament(
        tmp_path / "run",
        *windows,
        args=args,
        round_fn=fake_round,
        backend=PopulationBackend(3, workers=0),
        agent={"raise_seqs": [1], "nan_seqs": [4]},
        annualization=TRADING_DAYS_PER_YEAR,
    )
    failed = {p["pod_id"] for p in read_pods(tmp_path / "run") if p["status"] == "failed"}
    assert failed == {"p0001", "p0004"} and result.pods_tried == 4


def _ppo_run(tmp_path, name, windows_ppo, **kw):
    train, valid = windows_ppo
    args = TournamentArgs(
        leaderboard_size=2, p_fresh=0.3, round_steps=256, budget_steps=256 * 6, workers=0, seed=3,
        backend="population", population_size=3,
    )  # fmt: skip
    agent = {**AGENT, "update_epochs": 2}
    return run_tournament(tmp_path / name, train, valid, args=args, env=ENV, agent=agent, **kw)


def test_real_pods_same_seed_and_budget_give_the_same_run(tmp_path, windows_ppo, caplog):
    with caplog.at_level("INFO", logger="agents.tournament.population_backend"):
        a = _ppo_run(tmp_path, "a", windows_ppo)
    # Each population says where its round's time went (two populations of 3 pods: 6 pods).
    lines = [r.getMessage() for r in caplog.records if "population round of" in r.getMessage()]
    assert len(lines) == 2, lines
    assert all(line.startswith("population round of 3 pods (3 scored): setup ") for line in lines)
    assert all(all(f"{phase} " in line for phase in ("train", "validation", "files")) for line in lines)
    b = _ppo_run(tmp_path, "b", windows_ppo)
    pods_a, pods_b = read_pods(a.run_dir), read_pods(b.run_dir)
    assert len(pods_a) == 6 and all(p["status"] == "scored" or p["score"] is not None for p in pods_a)
    keys = ("pod_id", "parent_id", "hparams", "score", "metrics", "env_steps")
    assert [{k: p[k] for k in keys} for p in pods_a] == [{k: p[k] for k in keys} for p in pods_b]
    assert a.champion["pod_id"] == b.champion["pod_id"]
    wa = load_file(a.run_dir / "champion" / "policy.safetensors")
    wb = load_file(b.run_dir / "champion" / "policy.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # Every pod got the files a separately trained pod gets.
    for pod in pods_a:
        folder = a.run_dir / "pods" / pod["pod_id"]
        names = {
            "policy.safetensors",
            "spec.json",
            "optimizer.safetensors",
            "optimizer.json",
            "curve.parquet",
        }
        assert names | {VALID_RETURNS} <= {f.name for f in folder.iterdir()}
    children = [p for p in pods_a if p["parent_id"] is not None]
    assert children and all(p["generation"] >= 1 for p in children)


def test_real_pods_resume_after_an_interruption(tmp_path, windows_ppo):
    seen = []

    def stop_after_first_population(snapshot):
        seen.append(snapshot)
        if snapshot["env_steps_spent"] >= 3 * 256:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _ppo_run(tmp_path, "run", windows_ppo, on_progress=stop_after_first_population)
    before = {p["pod_id"]: p for p in read_pods(tmp_path / "run")}
    assert len(before) == 3 and all(p["score"] is not None for p in before.values())
    result = _ppo_run(tmp_path, "run", windows_ppo, resume=True)
    after = {p["pod_id"]: p for p in read_pods(tmp_path / "run")}
    assert result.env_steps == 256 * 6 and len(after) == 6
    assert all(after[k]["score"] == p["score"] for k, p in before.items())
    assert [e["kind"] for e in read_events(tmp_path / "run")].count("resumed") == 1
    assert (tmp_path / "run" / "champion" / "spec.json").is_file()


def test_envs_per_pod_pinned_sets_the_populations_env_batch(tmp_path, windows_ppo, caplog):
    """``envs_per_pod`` = 16 (the run's ``num_envs`` is 8): each pod trains on 16 envs, so a round of
    256 env-steps is one update of 16 steps x 16 envs (two of 8 envs otherwise)."""
    import pandas as pd

    train, valid = windows_ppo
    args = TournamentArgs(
        leaderboard_size=2, round_steps=256, budget_steps=256 * 3, workers=0, seed=3,
        backend="population", pods=3, envs_per_pod=16,
    )  # fmt: skip
    with caplog.at_level("INFO", logger="agents.tournament.population_backend"):
        result = run_tournament(
            tmp_path / "run",
            train,
            valid,
            args=args,
            env=ENV,
            agent=AGENT,
            annualization=TRADING_DAYS_PER_YEAR,
        )
    assert any("3 pods x 16 envs per population" in r.getMessage() for r in caplog.records)
    for pod in read_pods(result.run_dir):
        curve = pd.read_parquet(result.run_dir / "pods" / pod["pod_id"] / "curve.parquet")
        assert curve["env_steps"].tolist() == [256.0], pod["pod_id"]


def test_a_second_market_in_the_same_process_trains_on_its_own_window(tmp_path, windows_ppo):
    """A process keeps its populations for later rounds of the same shapes; a tournament on another
    market of the same shapes (the next market of a benchmark, the next fold of a walk-forward) must
    train on its own train window, so it equals the same run in a process that saw nothing before."""
    from helpers import toy_market

    from agents.tournament import population

    other = toy_market(num_steps=60 * 10, num_assets=3, num_features=4, bars_per_session=60, seed=2)
    train_b, valid_b, _ = other.split_sessions(0.6, 0.2)
    population._CACHE.clear()
    _ppo_run(tmp_path, "a", windows_ppo)  # (leaves its populations cached)
    assert population._CACHE
    after_a = _ppo_run(tmp_path, "b", (train_b, valid_b))
    # (and only b's populations stay: a's window, envs and buffers are not held market after market)
    assert population._CACHE
    assert {key[-1] for key in population._CACHE} == {population.window_key(train_b)}
    population._CACHE.clear()
    alone = _ppo_run(tmp_path, "b_alone", (train_b, valid_b))
    keys = ("pod_id", "score", "metrics")
    pods, pods_alone = read_pods(after_a.run_dir), read_pods(alone.run_dir)
    assert [{k: p[k] for k in keys} for p in pods] == [{k: p[k] for k in keys} for p in pods_alone]
    wa = load_file(after_a.run_dir / "champion" / "policy.safetensors")
    wb = load_file(alone.run_dir / "champion" / "policy.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_the_population_cache_tells_train_windows_apart(windows_ppo):
    """The same window (moved, or a copy) finds its population; another window of the same shapes does
    not."""
    from helpers import toy_market

    from agents.tournament.population import window_key

    train, _ = windows_ppo
    other = toy_market(num_steps=60 * 10, num_assets=3, num_features=4, bars_per_session=60, seed=2)
    other_train = other.split_sessions(0.6, 0.2)[0]
    assert window_key(train) == window_key(train.to("cpu")) == window_key(train.slice(0, train.num_steps))
    assert window_key(train) != window_key(other_train)
    assert window_key(train) != window_key(train.slice(0, train.num_steps - 60))
