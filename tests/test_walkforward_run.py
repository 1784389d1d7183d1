"""``podracer walkforward`` end to end at tiny size: folds, the replayed gate, the stitched account and its
report; a kill -9 during the third fold then ``--resume`` ends exactly as a run that was never stopped.

The runs execute in subprocesses with one torch thread: the comparison needs the same numerics in the
uninterrupted, the killed and the resumed process (one pod in flight at a time, an env-step budget).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from agents.tournament.leaderboard import read_events, read_pods
from app.cli import main
from app.config import Config, config_to_toml, parse_config
from app.runs import RunDir
from app.walkforward.judging import PROVISIONAL_SHARE
from app.walkforward.record import read_fold_records
from backtests.looks import ledger_path, read_looks

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "data": {"source": "synthetic", "num_tickers": 3, "num_sessions": 28, "interval": "15m", "seed": 1},
    "env": {"decision_interval": 1, "episode_len": 16, "num_envs": 4},
    "agent": {"hidden": 8, "embed": 4, "num_steps": 8, "update_epochs": 1, "num_minibatches": 1},
    "tournament": {"pods": 1, "leaderboard_size": 2, "round_steps": 64, "budget_steps": 256, "workers": 0},
    # Windows this short are not measurable: folds take charge only under "always" (the plumbing).
    "gate": {"rule": "always", "margin": 0.1},  # the fold plumbing: windows this short are not measurable
    "walkforward": {
        "train_sessions": 8,
        "valid_sessions": 10,
        "gate_sessions": 0,
        "step_sessions": 3,
        "tearsheet": False,
    },
}
SCRIPT = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    from app.config import load_config
    from app.walkforward.run import run_walkforward
    config = load_config(sys.argv[1])
    run_walkforward(config, sys.argv[2], run="wf" if sys.argv[3] == "new" else None,
                    resume="wf" if sys.argv[3] == "resume" else None)
    """
)


def _start(config: Path, home: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(config), str(home), mode], cwd=ROOT, env=env)


def _scored(fold_dir: Path) -> int:
    if not (fold_dir / "leaderboard.sqlite").is_file():
        return 0
    try:
        return sum(1 for p in read_pods(fold_dir) if p["score"] is not None)
    except Exception:  # noqa: BLE001 - the board is being created: ask again
        return 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same walk-forward twice: uninterrupted, and killed (SIGKILL) in the third fold's tournament
    then resumed. Returns both run folders."""
    root = tmp_path_factory.mktemp("walkforward")
    config = root / "tiny.toml"
    config.write_text(config_to_toml(parse_config(TINY)))
    whole, killed = root / "whole", root / "killed"
    first = _start(config, whole, "new")
    proc = _start(config, killed, "new")
    third = killed / "runs" / "wf" / "folds" / "fold-002"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if _scored(third) >= 1 and not (third / "fold.json").is_file():
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the walk-forward ended before its third fold could be interrupted"
        assert _scored(third) >= 1, "the third fold did not start in time"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert first.wait(timeout=300) == 0
    assert not (third / "fold.json").is_file()
    assert json.loads((killed / "runs" / "wf" / "run.json").read_text())["status"] == "running"
    resumed = _start(config, killed, "resume")
    assert resumed.wait(timeout=300) == 0
    return RunDir(whole, "wf"), RunDir(killed, "wf")


def _comparable(record: dict) -> dict:
    out = {k: v for k, v in record.items() if k != "seconds"}
    out["gate"] = {k: v for k, v in record["gate"].items()}
    for side in ("challenger", "incumbent"):  # "its own (<path> run record)": the home differs
        if out["gate"].get(side):
            out["gate"][side] = {k: v for k, v in out["gate"][side].items() if k != "normalization"}
    test = out["gate"].get("oos_test")
    if test and test.get("look"):  # each home's looks ledger has an identity of its own
        out["gate"]["oos_test"] = {**test, "look": {k: v for k, v in test["look"].items() if k != "ledger"}}
    return out


@pytest.mark.slow
def test_kill_dash_nine_in_the_third_fold_then_resume_ends_as_an_uninterrupted_run(runs):
    whole, killed = runs
    a, b = [r.to_json() for r in read_fold_records(whole)], [r.to_json() for r in read_fold_records(killed)]
    assert len(a) == len(b) == 3
    assert [_comparable(r) for r in a] == [_comparable(r) for r in b]
    for name in ("daily_returns", "equity"):
        path = getattr(whole, f"backtest_{name}"), getattr(killed, f"backtest_{name}")
        pd.testing.assert_frame_equal(pd.read_parquet(path[0]), pd.read_parquet(path[1]))
    # The resumed tournament ran the pod that was in flight again rather than failing it.
    events = read_events(killed.fold(2).path)
    (resumed,) = [e for e in events if e["kind"] == "resumed"]
    assert len(resumed["payload"]["rerun"]) <= 1 and resumed["payload"]["interrupted"] == []
    assert [p["status"] for p in read_pods(killed.fold(2).path)] == [
        p["status"] for p in read_pods(whole.fold(2).path)
    ]
    assert killed.info().status == "done"


@pytest.mark.slow
def test_folds_gate_and_stitched_account_of_a_tiny_run(runs):
    run, _ = runs
    records = [r.to_json() for r in read_fold_records(run)]  # as written
    info = run.info()
    assert info.kind == "walkforward" and info.status == "done" and info.extra["peak_rss_mb"]["self"] > 0
    for r, after in zip(records, records[1:], strict=False):
        assert after["windows"]["test"][0] > r["windows"]["test"][1]  # the tests follow each other
    for r in records:
        w = r["windows"]
        # No lookahead: train < valid < embargo < test; the gate read the validation window only.
        assert (
            w["train"][1] < w["valid"][0] <= w["valid"][1] < w["embargo"][0] <= w["embargo"][1] < w["test"][0]
        )
        assert r["gate"]["window"] == w["valid"] == w["gate"]
        # The fold's features were normalized on its own train window; its tournament is a run folder.
        fold = run.fold(r["index"])
        assert fold.info().feature_spec["fitted_on"] == w["train"]
        assert fold.info().status == "done" and fold.champion.is_dir()
        # The gate's answer: "always" here, every fold's challenger takes charge whatever its figures.
        assert r["promoted"] and r["gate"]["reason"].startswith("[gate] rule = always")
        before = records[r["index"] - 1]["in_charge"] if r["index"] else None
        assert r["in_charge"] == ({"fold": r["index"], "run": fold.path.name} if r["promoted"] else before)
    assert records[1]["warm_started_from"] == f"wf/fold-{records[0]['in_charge']['fold']:03d}"
    # A warm-started fold's lineages from the incumbent's weights have no start to refit to.
    warm_pods = Config().nightly.warm_start_pods
    for r in records[1:]:
        refit = run.fold(r["index"]).info().extra["refit"]
        pods = {p["pod_id"]: p for p in read_pods(run.fold(r["index"]).path)}
        warm = refit.get("root_id") in pods and pods[refit["root_id"]]["seq"] < warm_pods
        assert warm == ("warm-started" in refit["reason"]), refit

    doc = json.loads(run.backtest_metrics.read_text())
    assert doc["window"] == "walkforward" and doc["num_trials"] == 1 and doc["final"] is True
    # The stitched account's capacity curve, on the final report: the account at every account size.
    assert [row["capital"] for row in doc["capacity"]] == [1e4, 1e5, 1e6, 1e7, 1e8]
    assert doc["estimated_capacity_rule"] in ("significant", "half_sharpe", "no_edge")
    # ... and its cost sensitivity: the account replayed at 0x, 1x and 2x the cost model, each judged.
    sensitivity = doc["cost_sensitivity"]
    assert [row["level"] for row in sensitivity] == [0.0, 1.0, 2.0]
    assert all(row["strategy"] == "champion" and "champion" in row["strategies"] for row in sensitivity)
    # What was priced: the bars' feed and the volume scale.
    assert doc["data_feed"] == "synthetic" and doc["volume_scale"] == 1.0
    # The span is one look: only the final account report is counted in the home's ledger (the
    # provisional ones after each fold spend a stated share of the level instead). The gates' looks
    # are in the run's own ledger.
    ends = [r["windows"]["test"][1] for r in records]
    assert [(x.run_id, x.start, x.end) for x in read_looks(ledger_path(run.home))] == [
        ("wf", doc["start"], ends[-1])
    ]
    assert doc["oos_test"]["looks"] == 1 and doc["oos_test"]["look"]["end"] == doc["end"]
    level = Config().backtest.significance_level
    assert doc["significance_level"] == pytest.approx(level * (1 - PROVISIONAL_SHARE))
    assert {x.run_id for x in read_looks(ledger_path(run.path))} == {f"wf/fold-{k:03d}" for k in range(3)}
    assert (doc["start"], doc["end"]) == (records[0]["windows"]["test"][0], records[-1]["windows"]["test"][1])
    assert {"champion", "buy_and_hold", "equal_weight", "cash"} <= set(doc["strategies"])
    assert doc["verdict_outcome"] in ("significant", "not significant", "not measurable")
    spans = doc["walkforward"]["champions"]
    assert (
        sum(s["sessions"] for s in spans)
        == doc["num_sessions"]
        == sum(r["test"]["sessions"] for r in records)
    )
    daily = pd.read_parquet(run.backtest_daily_returns)
    assert str(daily["date"].iloc[0]) == doc["start"] and str(daily["date"].iloc[-1]) == doc["end"]
    compounded = 1.0
    for r in records:
        compounded *= 1.0 + r["test"]["return"]
    assert compounded - 1.0 == pytest.approx(doc["strategies"]["champion"]["cum_returns_final"], rel=1e-9)


def test_walkforward_cli_json_and_bad_invocations(home, tmp_path, capsys):
    config = tmp_path / "wf.toml"
    # A gate window of its own after the validation window (as nightly's test window).
    raw = {
        **TINY,
        "tournament": {**TINY["tournament"], "budget_steps": 64},
        "walkforward": {**TINY["walkforward"], "gate_sessions": 2},
    }
    config.write_text(config_to_toml(parse_config(raw)))
    assert main(["walkforward", "--config", str(config), "--run", "c", "--folds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["run_id"] == "c" and out["walkforward"]["num_folds"] == 1
    assert out["strategies"]["champion"]["cum_returns_final"] is not None
    (record,) = [r.to_json() for r in read_fold_records(RunDir(home, "c"))]
    w = record["windows"]
    assert (
        w["valid"][1] < w["gate"][0] <= w["gate"][1] < w["embargo"][0]
        and record["gate"]["window"] == w["gate"]
    )
    assert json.loads(RunDir(home, "c").fold(0).backtest_metrics.read_text())["window"] == "gate"
    # A finished run resumed: nothing left to do but the report.
    assert main(["walkforward", "--resume", "c", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["walkforward"]["num_folds"] == 1
    assert main(["walkforward", "--resume", "c", "--config", str(config)]) == 2
    assert "drop --config" in capsys.readouterr().err
    assert main(["walkforward", "--resume", "nosuch"]) == 2
    assert "no walk-forward config" in capsys.readouterr().err
    assert main(["walkforward", "--config", str(config), "--run", "c"]) == 2
    assert "already exists" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(config_to_toml(parse_config({**raw, "walkforward": {"valid_sessions": 5}})))
    assert main(["walkforward", "--config", str(bad)]) == 2
    assert "valid_sessions = 5" in capsys.readouterr().err


@pytest.mark.slow
def test_fold_tournaments_on_the_ray_backend(tmp_path, monkeypatch):
    """Each fold's tournament on a local Ray cluster (2 CPUs); the walk-forward keeps one connection."""
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # Ray's workers import this checkout
    raw = {**TINY, "tournament": {**TINY["tournament"], "backend": "ray", "pods": 2, "budget_steps": 128}}
    raw["walkforward"] = {**TINY["walkforward"], "num_folds": 2}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        from app.walkforward.run import run_walkforward

        result = run_walkforward(parse_config(raw), tmp_path, run="ray")
        assert ray.is_initialized(), "a cluster the caller started is left running"
    finally:
        ray.shutdown()
    assert [r.index for r in result.folds] == [0, 1]
    for r in result.folds:
        pods = read_pods(RunDir(tmp_path, "ray").fold(r.index).path)
        assert len(pods) == 2 and all(p["score"] is not None for p in pods)
    assert result.metrics.walkforward.num_folds == 2


@pytest.mark.parametrize("before_champion", ["benchmark", "cash"])
def test_a_noise_champion_never_takes_charge_by_default(home, before_champion):
    # The fixed-window gate ("window"): on a null market, with windows too short to
    # measure, no fold's challenger is significant, so no champion takes charge and the account holds
    # [gate] before_champion throughout: buy-and-hold (the default) or cash.
    from app.walkforward.run import run_walkforward

    raw = {
        **TINY,
        "data": {**TINY["data"], "signal": 0.0},
        "gate": {"rule": "window", "margin": 0.1, "before_champion": before_champion},
        "tournament": {**TINY["tournament"], "budget_steps": 64},
        "walkforward": {**TINY["walkforward"], "num_folds": 2},
    }
    result = run_walkforward(parse_config(raw), home, run=f"quiet-{before_champion}")
    assert [r.promoted for r in result.folds] == [False, False]
    assert [r.before_champion for r in result.folds] == [before_champion] * 2
    label = f"{before_champion} (no qualified champion)"
    assert [s.champion for s in result.metrics.walkforward.champions] == [label]
    assert [row["in_charge"] for row in result.metrics.walkforward.folds] == [label] * 2
    equity = pd.read_parquet(RunDir(home, f"quiet-{before_champion}").backtest_equity)
    mine = equity["champion"].to_numpy()
    if before_champion == "benchmark":  # bought once with the span's first decision, then held
        assert mine == pytest.approx(equity["buy_and_hold"].to_numpy(), rel=1e-12)
    else:
        assert (mine == mine[0]).all()


def test_a_resumed_walkforward_keeps_what_it_ran_with_for_keys_it_predates(home, monkeypatch):
    """``--resume`` reads the run's own config.toml as a run's (app.config.load_run_config): a key
    the file predates (the nonlinear start's pair candidate here) stays at the value it ran with."""
    import app.walkforward.run as wf_run
    from app.config import ConfigError

    stored = RunDir(home, "old").config
    stored.parent.mkdir(parents=True)
    full = config_to_toml(Config())
    stored.write_text("\n".join(line for line in full.splitlines() if not line.startswith("start_products")))
    seen = {}

    def capture(cfg, *args, **kwargs):
        seen["agent"] = cfg.agent
        raise ConfigError("captured")

    monkeypatch.setattr(wf_run, "run_walkforward", capture)
    assert main(["walkforward", "--resume", "old", "--json"]) == 2
    assert seen["agent"].start_products is False and seen["agent"].start_crossfit is True
