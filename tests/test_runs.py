"""app.runs: the run folder's paths, ids and record (the only reader and writer of the record)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.runs import RECORD, ChampionInfo, RunDir, RunInfo, list_runs, new_id
from data.errors import ArtifactError, ConfigError, PodracerError

ROOT = Path(__file__).resolve().parent.parent


def test_paths_and_ids(tmp_path):
    run = RunDir(tmp_path, "r1")
    assert run.path == tmp_path / "runs" / "r1"
    assert run.config.name == "config.toml" and run.leaderboard.name == "leaderboard.sqlite"
    assert run.pod("p0001") == run.path / "pods" / "p0001"
    assert run.champion.name == "champion" and run.backtest.name == "backtest"
    assert RunDir.at(run.path).path == run.path and RunDir.at(run.path).run_id == "r1"
    assert re.fullmatch(r"\d{8}-\d{6}-ppo", new_id(None, "ppo"))
    assert new_id("my.run_1", "ppo") == "my.run_1"
    with pytest.raises(ConfigError, match="--run"):
        new_id("../escape", "ppo")


def test_update_merges_mappings_one_level(tmp_path):
    run = RunDir(tmp_path, "r1")
    run.path.mkdir(parents=True)
    assert run.info() == RunInfo() and run.status() is None
    run.update(windows={"train": ["a", "b"], "test": ["e", "f"]}, status="running")
    run.on_status({"windows": {"train": ["a", "c"], "valid": ["c", "d"]}, "status": "done"})
    assert json.loads(run.record.read_text()) == {
        "windows": {"train": ["a", "c"], "test": ["e", "f"], "valid": ["c", "d"]},
        "status": "done",
        "schema_version": 1,
    }
    run.record.write_text("{broken")  # a foreign file: replaced, as every writer did
    run.update(status="running")
    assert json.loads(run.record.read_text()) == {"status": "running", "schema_version": 1}


@pytest.mark.parametrize(("text", "message"), [("{not json", "not valid JSON"), ("[1, 2]", "a JSON object")])
def test_a_malformed_record_is_a_one_line_error_naming_the_file(tmp_path, text, message):
    run = RunDir(tmp_path, "r1")
    run.path.mkdir(parents=True)
    run.record.write_text(text)
    with pytest.raises(PodracerError, match=message) as info:
        run.info()
    assert str(run.record) in str(info.value) and "\n" not in str(info.value)
    assert run.status() is None
    run.record.write_text(json.dumps({"pods_tried": "many"}))
    with pytest.raises(PodracerError, match="pods_tried: input should be a valid integer") as info:
        run.info()
    assert str(info.value).startswith(str(run.record)) and "\n" not in str(info.value)


def test_a_record_without_a_version_reads_and_a_newer_one_is_refused(tmp_path):
    run = RunDir(tmp_path, "r1")
    run.path.mkdir(parents=True)
    legacy = {"kind": "tournament", "pods_tried": 3, "trial_sharpes": [1.0, None], "peak_rss_mb": {"self": 9}}
    run.record.write_text(json.dumps(legacy))  # as written before the record had a schema version
    info = run.info()
    assert (info.schema_version, info.kind, info.trials()) == (1, "tournament", (3, [1.0]))
    assert info.extra == {"peak_rss_mb": {"self": 9}}
    run.update(status="done")  # a rewrite keeps every key, the undefined Sharpe's null included
    assert json.loads(run.record.read_text()) == {**legacy, "status": "done", "schema_version": 1}
    run.record.write_text(json.dumps({**legacy, "schema_version": 2}))
    with pytest.raises(ArtifactError, match="schema version 2 is newer than this podracer reads") as info:
        run.info()
    assert str(info.value).startswith(str(run.record)) and "\n" not in str(info.value)
    with pytest.raises(ArtifactError, match="schema version 2"):
        run.update(status="running")  # a newer record is not overwritten


def test_the_champion_sharpe_is_read_under_one_name(tmp_path):
    old_single = {"champion": {"pod_id": "single", "score": 0.5, "metrics": {"sharpe": 1.5, "score": 0.5}}}
    tournament = {"champion": {"pod_id": "p0007", "score": 2.0, "sharpe_ratio": 1.25, "generation": 3}}
    old = RunInfo.from_dict(old_single).champion
    assert (old.pod_id, old.score, old.sharpe_ratio, old.generation) == ("single", 0.5, 1.5, None)
    assert isinstance(old, ChampionInfo)
    champion = RunInfo.from_dict(tournament).champion
    assert champion.sharpe_ratio == 1.25 and champion.generation == 3
    assert RunInfo.from_dict({"champion": "p0001"}).champion.pod_id == "p0001"


def test_typed_fields_and_trials():
    info = RunInfo.from_dict(
        {
            "run_id": "r1",
            "pods_tried": 0,
            "trial_sharpes": [0.5, None, float("nan"), 1.0],
            "windows": {"train": ["2024-01-02", "2024-01-10"], "bad": ["x"]},
            "tickers": ["AAA", "BBB"],
            "custom": 1,
        }
    )
    assert info.trials() == (1, [0.5, 1.0])
    assert info.windows == {"train": ("2024-01-02", "2024-01-10")}
    assert info.tickers == ("AAA", "BBB") and info.extra == {"custom": 1}


def test_list_runs(tmp_path):
    assert list_runs(tmp_path) == []
    for name in ("a", "b", ".hidden"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    assert sorted(r.run_id for r in list_runs(tmp_path)) == ["a", "b"]


def test_the_record_file_is_named_in_one_module():
    named = [
        str(path.relative_to(ROOT))
        for package in ("app", "agents", "backtests", "envs", "data", "benchmarks")
        for path in (ROOT / package).rglob("*.py")
        if RECORD in path.read_text(encoding="utf-8")
    ]
    assert named == ["app/runs.py"]
