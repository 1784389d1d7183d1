"""The Ray backend runs a small tournament on a local Ray cluster (2 CPUs, no dashboard)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from agents.tournament.backends import RayBackend  # noqa: E402
from agents.tournament.leaderboard import read_leaderboard, read_pods  # noqa: E402
from agents.tournament.orchestrator import run_tournament  # noqa: E402
from agents.tournament.population_backend import PopulationBackend  # noqa: E402
from agents.tournament.settings import TournamentArgs  # noqa: E402
from backtests.metrics import TRADING_DAYS_PER_YEAR  # noqa: E402
from data.toy import toy_market  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    import test_tournament_run

    # Ray workers cannot import the tests folder: ship the fake round function by value.
    ray.cloudpickle.register_pickle_by_value(test_tournament_run)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield test_tournament_run
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(test_tournament_run)


@pytest.mark.slow
def test_ray_backend_runs_a_small_tournament(tmp_path, local_ray):
    fake_round = local_ray.fake_round
    market = toy_market(num_steps=60 * 5, num_assets=2, num_features=3, bars_per_session=60, seed=0)
    market_windows = market.split_sessions(0.6, 0.2)[:2]
    snapshots = []
    args = TournamentArgs(
        pods=4, leaderboard_size=3, round_steps=100, budget_steps=1200, backend="ray", seed=0
    )
    backend = RayBackend(cpus_per_pod=1.0)
    result = run_tournament(
        tmp_path / "run",
        *market_windows,
        args=args,
        round_fn=fake_round,
        backend=backend,
        agent={"sleep": 0.3, "raise_seqs": [2]},
        on_progress=snapshots.append,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    pods = read_pods(tmp_path / "run")
    assert result.env_steps == 1200 and len(pods) == 12
    assert [p["pod_id"] for p in pods if p["status"] == "failed"] == ["p0002"]
    assert result.champion["pod_id"] == read_leaderboard(tmp_path / "run")[0]["pod_id"]
    # 4 pods requested, 2 CPUs free: the pool follows ray.available_resources().
    in_flight = [len(s["in_flight"]) for s in snapshots]
    assert max(in_flight) == 2
    assert backend.gpus_per_pod == 0.0
    assert ray.is_initialized(), "a cluster the caller started is left running"


@pytest.mark.slow
def test_population_backend_runs_one_population_per_lane_on_ray(tmp_path, local_ray):
    """Each population round is one Ray task; a 2-CPU cluster without GPUs has 2 lanes (1 CPU each)."""
    market = toy_market(num_steps=60 * 5, num_assets=2, num_features=3, bars_per_session=60, seed=0)
    backend = PopulationBackend(2, ray=True, cpus_per_population=1.0)
    args = TournamentArgs(pods=1, leaderboard_size=3, round_steps=100, budget_steps=1200, seed=0)
    result = run_tournament(
        tmp_path / "run",
        *market.split_sessions(0.6, 0.2)[:2],
        args=args,
        round_fn=local_ray.fake_round,
        backend=backend,
        agent={"sleep": 0.3},
        annualization=TRADING_DAYS_PER_YEAR,
    )
    assert result.env_steps == 1200 and len(read_pods(tmp_path / "run")) == 12
    assert backend.lanes() == 2
    # Two populations in flight at once: the second was launched before the first was recorded.
    pods = read_pods(tmp_path / "run")
    assert pods[2]["created"] < pods[0]["updated"]
