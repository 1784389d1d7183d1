"""The app's own JSON documents on the one base (``data.artifact.Artifact``): the schedule record and
the alerts' state read as written before ``schema_version`` existed, and a newer file is one line."""

from __future__ import annotations

import json

import pytest

from app import alerts
from app.nightly.schedule import ScheduleRecord, read_schedule, record_schedule, schedule_path
from data.errors import ArtifactError


def test_a_schedule_record_without_a_version_reads_and_a_newer_one_is_refused(tmp_path):
    old = {
        "cron": "0 3 * * 1-5",
        "tz": "UTC",
        "config": None,
        "format": "systemd",
        "written_at": "2024-01-02T03:04:05+00:00",
    }
    schedule_path(tmp_path).write_text(json.dumps(old))
    record = read_schedule(tmp_path)
    assert isinstance(record, ScheduleRecord) and record.schema_version == 1
    assert record.settings() == old and record.source == "schedule print --format systemd"
    written = record_schedule(tmp_path, cron="30 2 * * *", tz="UTC", config=None, fmt="crontab")
    assert json.loads(schedule_path(tmp_path).read_text())["schema_version"] == 1
    assert read_schedule(tmp_path) == written
    schedule_path(tmp_path).write_text(json.dumps({**old, "schema_version": 2}))
    with pytest.raises(ArtifactError, match="schema version 2 is newer") as info:
        read_schedule(tmp_path)
    assert "\n" not in str(info.value)
    schedule_path(tmp_path).write_text(json.dumps({**old, "tz": "Mars/Olympus"}))
    with pytest.raises(ArtifactError, match="tz") as info:
        read_schedule(tmp_path)
    assert str(info.value).startswith(str(schedule_path(tmp_path))) and "\n" not in str(info.value)


def test_the_alerts_state_reads_its_older_form_and_refuses_a_newer_one(tmp_path):
    folder = alerts.alerts_dir(tmp_path)
    folder.mkdir(parents=True)
    old = {"books": {"check": "books", "message": "AAPL: 5 vs 10", "since": "2024-01-02T15:00:00+00:00"}}
    (folder / "raised.json").write_text(json.dumps(old))  # the rows at the top level, no version
    ((problem, since),) = alerts.raised_problems(tmp_path)
    assert (problem.check, problem.message, problem.key, since) == (
        "books",
        "AAPL: 5 vs 10",
        "books",
        old["books"]["since"],
    )
    alerts.raise_problem(tmp_path, "disk_full", "disk full", check="disk_full")
    doc = json.loads((folder / "raised.json").read_text())
    assert doc["schema_version"] == 1 and set(doc["rows"]) == {"books", "disk_full"}
    assert alerts.clear_problem(tmp_path, "books") and [
        p.key for p, _ in alerts.raised_problems(tmp_path)
    ] == ["disk_full"]
    (folder / "raised.json").write_text("{not json")  # damaged: starts over (one alert at worst again)
    assert alerts.raised_problems(tmp_path) == []
    (folder / "raised.json").write_text(json.dumps({"schema_version": 5, "rows": {}}))
    with pytest.raises(ArtifactError, match="schema version 5 is newer"):
        alerts.raised_problems(tmp_path)


def test_the_run_records_blocks_read_typed_and_keep_what_they_do_not_declare(tmp_path):
    from app.runs import RunDir

    run = RunDir(tmp_path, "r")
    run.path.mkdir(parents=True)
    written = {  # as the stages wrote them before the blocks were typed
        "run_id": "r",
        "seeds": {"tournament": 3, "data": 0},
        "feature_spec": {
            "names": ["ret_short"],
            "windows": {"ret_short": 15},
            "mean": [0.1],
            "std": [1.0],
            "later": 1,
        },
        "nightly": {
            "warm_started_from": None,
            "warm_start_pods": 1,
            "eval_role": "selection",
            "verdict": "promoted",
        },
        "ensemble": {
            "pod_id": "ensemble",
            "size": 2,
            "members": [{"pod_id": "p0", "score": 1.5}],
            "sharpe_ratio": 1.2,
        },
        "walkforward": {"run": "wf", "fold": 2, "warm_started_from": "wf/fold-001"},
        "valid": {"score": 0.7, "sharpe_ratio": None},
    }
    run.record.write_text(json.dumps(written))
    info = run.info()
    assert (info.nightly.verdict, info.ensemble.members[0].pod_id, info.walkforward.fold) == (
        "promoted",
        "p0",
        2,
    )
    assert info.feature_spec["windows"] == {"ret_short": 15} and info.feature_spec["later"] == 1
    run.update(nightly={"decision_id": 7})  # a stage merges its keys one level deep
    again = json.loads(run.record.read_text())
    assert again["nightly"] == {**written["nightly"], "decision_id": 7}
    assert {k: again[k] for k in written if k != "nightly"} == {
        k: v for k, v in written.items() if k != "nightly"
    }
