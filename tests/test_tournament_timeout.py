"""A pod round that hangs (no NaN, no crash) is killed after ``round_timeout_s`` and recorded failed."""

from __future__ import annotations

import time

import pytest
from test_tournament_run import _args, fake_round, run_tournament

from agents.tournament.backends import ProcessBackend
from agents.tournament.leaderboard import read_pods
from agents.tournament.settings import AUTO_TIMEOUT_FIRST_S, AUTO_TIMEOUT_FLOOR_S, auto_round_timeout
from backtests.metrics import TRADING_DAYS_PER_YEAR


def test_hung_pod_is_killed_and_failed_local_workers(tmp_path, windows):
    started = time.monotonic()
    result = run_tournament(
        tmp_path / "run",
        *windows,
        args=_args(budget_steps=400, workers=1, round_timeout_s=2.0),
        round_fn=fake_round,
        backend=ProcessBackend(1),
        agent={"hang_seqs": [1]},  # seq 0 runs first, so the worker is warm when the timer starts
        annualization=TRADING_DAYS_PER_YEAR,
    )
    pods = {p["pod_id"]: p for p in read_pods(tmp_path / "run")}
    assert pods["p0001"]["status"] == "failed" and "round timeout" in pods["p0001"]["error"]
    assert all(p["status"] != "failed" for k, p in pods.items() if k != "p0001") and len(pods) == 4
    assert result.champion is not None
    assert time.monotonic() - started < 120  # not the hour the hung round would have slept


def test_auto_timeout_is_generous():
    assert auto_round_timeout([]) == AUTO_TIMEOUT_FIRST_S
    assert auto_round_timeout([1.0, 2.0, 3.0]) == AUTO_TIMEOUT_FLOOR_S  # 4x median is 8 s: floored
    assert auto_round_timeout([300.0, 400.0, 500.0]) == pytest.approx(1600.0)
    assert auto_round_timeout([300.0, 400.0, 500.0], round_seconds=1000.0) == 2000.0


@pytest.mark.slow
def test_hung_pod_is_killed_and_failed_ray(tmp_path, windows):
    ray = pytest.importorskip("ray")
    import test_tournament_run

    from agents.tournament.backends import RayBackend

    ray.cloudpickle.register_pickle_by_value(test_tournament_run)  # workers cannot import tests/
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        result = run_tournament(
            tmp_path / "run",
            *windows,
            args=_args(budget_steps=400, backend="ray", round_timeout_s=3.0),
            round_fn=fake_round,
            backend=RayBackend(cpus_per_pod=1.0),
            agent={"hang_seqs": [1]},
            annualization=TRADING_DAYS_PER_YEAR,
        )
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(test_tournament_run)
    pods = {p["pod_id"]: p for p in read_pods(tmp_path / "run")}
    assert pods["p0001"]["status"] == "failed" and "round timeout" in pods["p0001"]["error"]
    assert all(p["status"] != "failed" for k, p in pods.items() if k != "p0001")
    assert len(pods) == 4 and result.champion is not None
