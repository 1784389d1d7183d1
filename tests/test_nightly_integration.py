"""The real retrain pipeline (data -> tournament -> joint backtest -> decision -> ONNX export) on tiny
synthetic data, twice: the first night promotes, the second scores that champion again on the same
window and is not warm-started from it (the champion was gated on the sessions the second gate reads)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.config import parse_config
from app.gate import decide
from app.nightly.pipeline import run_retrain
from app.nightly.registry import current_champion, read_decisions
from app.nightly.steps import RetrainSteps, default_steps, warm_start_round
from backtests.looks import ledger_path, read_looks
from backtests.metrics_model import MetricsDocument
from backtests.verdict import EdgeVerdict, stated_verdict

TINY = {
    "data": {"source": "synthetic", "num_tickers": 3, "num_sessions": 15, "interval": "15m", "seed": 1},
    "env": {"decision_interval": 1, "episode_len": 16, "num_envs": 4},
    "agent": {
        "hidden": 8,
        "embed": 4,
        "num_steps": 8,
        "update_epochs": 1,
        "num_minibatches": 1,
        "eval_every": 1_000_000,
    },
    "tournament": {"pods": 2, "leaderboard_size": 2, "round_steps": 64, "budget_steps": 128, "workers": 0},
    # The fixed-window gate, twice on the same test window. 15 sessions hold no measurable test window:
    # the first night's verdict is scripted "significant" (_first_champion) so that a champion exists.
    "nightly": {"tearsheet": False},
    "gate": {"rule": "window", "margin": 0.1, "level": 0.5},
}


def _first_champion() -> RetrainSteps:
    """The real steps, the challenger's verdict on the gate window scripted "significant": the way to a
    first champion on a window too short to measure (every figure and the rest of the night real)."""
    real = default_steps()

    def evaluate(config, home, data, challenger, champion):
        scored = real.evaluate(config, home, data, challenger, champion)
        return dataclasses.replace(scored, edge=EdgeVerdict("significant", ("scripted for the first night",)))

    return dataclasses.replace(real, evaluate=evaluate)


def test_warm_start_round_seeds_only_the_first_fresh_pods(monkeypatch):
    import dataclasses

    from agents.tournament import pod as pod_module
    from agents.tournament.generator import PodSpec
    from agents.tournament.pod import PodTask

    seen = []
    monkeypatch.setattr(pod_module, "learner_round", lambda task, ctx: seen.append(task.spec) or "done")
    fresh = PodSpec(pod_id="p0000", seq=0, seed=1, algo="ppo")
    tasks = [
        PodTask(spec=fresh, checkpoint_dir="/x/p0000", round_steps=8),
        PodTask(
            spec=dataclasses.replace(fresh, pod_id="p0001", seq=1), checkpoint_dir="/x/p0001", round_steps=8
        ),
        PodTask(
            spec=dataclasses.replace(fresh, pod_id="p0002", seq=0, parent_id="p9", init_checkpoint="/x/p9"),
            checkpoint_dir="/x/p0002",
            round_steps=8,
        ),
    ]
    for task in tasks:
        assert warm_start_round(task, None, champion_dir="/h/champions/r0", warm_pods=1) == "done"
    assert [s.init_checkpoint for s in seen] == ["/h/champions/r0", None, "/x/p9"]  # a child keeps its parent


@pytest.mark.slow
def test_real_pipeline_twice_on_tiny_synthetic_data(home, caplog):
    from agents.policy import Policy
    from agents.tournament.leaderboard import read_pods
    from app.bundle import load_bundle
    from data.loader import load_market

    config = parse_config(TINY)
    first = run_retrain(config, home, steps=_first_champion())
    assert first.verdict == "promoted" and first.previous_champion is None
    champ = current_champion(home)
    assert champ.run_id == first.challenger_run_id
    policy = Policy.load(champ.policy_dir)
    bundle = load_bundle(first.bundle, expect_tickers=list(policy.meta.tickers))  # hashes verified
    assert Path(first.bundle, "policy.onnx").is_file() and bundle is not None

    # The windows recorded are the data layer's own split; selection ends before evaluation starts.
    windows = load_market(config.data, home=home).windows()
    (row,) = read_decisions(home)
    assert (row["selection_start"], row["selection_end"]) == tuple(windows["valid"])
    assert (row["eval_start"], row["eval_end"]) == tuple(windows["test"])
    assert row["selection_end"] < row["eval_start"]
    run_dir = home / "runs" / first.challenger_run_id
    metrics = json.loads((run_dir / "backtest" / "metrics.json").read_text())
    assert metrics["start"] == row["eval_start"] and metrics["end"] == row["eval_end"]
    assert metrics["strategies"]["champion"]["sharpe_ratio"] == pytest.approx(row["challenger_fitness"])

    caplog.set_level("INFO", logger="app.nightly.steps")
    second = run_retrain(config, home)
    run_info = json.loads((home / "runs" / second.challenger_run_id / "run.json").read_text())
    # The champion was gated on this very window: a challenger warm-started from it would be judged
    # "out of sample" on sessions its ancestry was selected on, so the warm start is dropped.
    assert run_info["nightly"]["warm_started_from"] is None
    assert "no warm start" in caplog.text and "warm-started from the champion" not in caplog.text
    pods = {p["pod_id"]: p for p in read_pods(home / "runs" / second.challenger_run_id)}
    assert pods["p0000"]["parent_id"] is None and pods["p0000"]["score"] is not None
    assert pods["p0000"]["status"] != "failed"
    rows = read_decisions(home)
    assert len(rows) == 2 and rows[1]["champion_run_id"] == first.challenger_run_id
    # The champion is re-scored on the same window: a deterministic backtest gives the same number.
    assert rows[1]["champion_fitness"] == pytest.approx(rows[0]["challenger_fitness"], rel=1e-6)
    # The second challenger looked at the same window of the same market: its test counts two looks,
    # from the looks ledger (the first night's challenger, then its own).
    assert (rows[0]["num_trials"], rows[1]["num_trials"]) == (1, 2)
    assert [r.run_id for r in read_looks(ledger_path(home))] == [
        first.challenger_run_id,
        second.challenger_run_id,
    ]
    second_metrics = json.loads(
        (home / "runs" / second.challenger_run_id / "backtest" / "metrics.json").read_text()
    )
    assert second_metrics["oos_test"]["looks"] == 2 and second_metrics["significance_level"] == 0.5
    edge = stated_verdict(MetricsDocument.parse(second_metrics))
    assert rows[1]["scores"]["edge"] == edge.text == second.challenger_edge
    expected = decide(
        rows[1]["challenger_fitness"], rows[1]["champion_fitness"], edge, has_champion=True, margin=0.1
    )
    assert second.verdict == ("promoted" if expected.promote else "rejected")
    now = current_champion(home)
    if expected.promote:
        assert now.run_id == second.challenger_run_id and Path(now.bundle, "manifest.json").is_file()
    else:
        assert now == champ
