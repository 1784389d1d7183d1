"""The files the stages hand each other are typed, versioned and validated on read (``data.artifact``):
a round trip keeps every key, a file from before ``schema_version`` reads as version 1, and a newer or
unknown version or a malformed field is one line naming the file."""

from __future__ import annotations

import json

import pytest

from backtests.metrics_model import METRIC_KEYS, MetricsDocument, read_metrics
from data.errors import ArtifactError, PodracerError

#: A metrics.json as the current report writes it, less the figures a reader does not need here.
LEGACY = {
    "window": "test",
    "start": "2024-01-02",
    "end": "2024-03-28",
    "annualization": 252,
    "benchmark": "buy_and_hold",
    "num_trials": 12,
    "significance": 0.05,
    "strategies": {
        "champion": {"sharpe_ratio": 1.5, "annual_return": None, "calmar_ratio": float("nan")},
        "buy_and_hold": {"sharpe_ratio": 0.7},
    },
    "oos_test": {
        "strategy": "champion",
        "looks": 2,
        "excess": {"buy_and_hold": {"mean_per_day": 0.001, "p_value_after_looks": 0.02}},
    },
    "verdict_outcome": "not significant",
    "verdict_figures": ["PSR 0.900"],
    "verdict_reasons": [],
    "a_key_from_a_newer_writer": {"kept": True},
}


def _write(path, doc) -> None:
    path.write_text(json.dumps(doc), encoding="utf-8")


def test_a_file_without_a_schema_version_reads_as_version_1(tmp_path):
    path = tmp_path / "metrics.json"
    _write(path, LEGACY)
    doc = read_metrics(path)
    assert doc.schema_version == 1
    assert doc.strategies["champion"].sharpe_ratio == 1.5
    assert doc.strategies["champion"].calmar_ratio is None  # NaN reads as undefined
    assert doc.oos_test.excess["buy_and_hold"].p_value_after_looks == 0.02
    assert doc.annualization == 252 and isinstance(doc.annualization, int)
    assert doc.significance_level == 0.05  # the level's earlier name, read under its name now


def test_the_model_round_trips_and_keeps_unknown_keys(tmp_path):
    path = tmp_path / "metrics.json"
    _write(path, LEGACY)
    doc = read_metrics(path)
    doc.model_copy(update={"role": "selection"}).write(path)
    again = read_metrics(path)
    assert again == doc.model_copy(update={"role": "selection"})
    written = json.loads(path.read_text())
    assert written["schema_version"] == MetricsDocument.SCHEMA_VERSION
    assert written["a_key_from_a_newer_writer"] == {"kept": True}
    # Only what was set is written: a key the file never had does not appear as null.
    assert "walkforward" not in written and "final" not in written
    assert written["significance_level"] == 0.05 and "significance" not in written
    assert written["strategies"]["champion"]["calmar_ratio"] is None  # NaN is written as null


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (2, "schema version 2 is newer than this podracer reads (1): upgrade podracer"),
        (0, "unknown schema version 0"),
        ("1", "unknown schema version '1'"),
        (True, "unknown schema version True"),
    ],
)
def test_a_newer_or_unknown_schema_version_is_refused_in_one_line(tmp_path, version, message):
    path = tmp_path / "metrics.json"
    _write(path, {**LEGACY, "schema_version": version})
    with pytest.raises(ArtifactError) as info:
        read_metrics(path)
    text = str(info.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text
    assert isinstance(info.value, PodracerError)  # the CLI prints it and exits 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_trials": "many"}, "num_trials: input should be a valid integer"),
        ({"strategies": {}}, "strategies: dictionary should have at least 1 item"),
        ({"strategies": {"champion": {"sharpe_ratio": True}}}, "strategies.champion.sharpe_ratio"),
        ({"verdict_outcome": "maybe"}, "verdict_outcome: input should be"),
        ({"oos_test": {"excess": []}}, "oos_test.excess: input should be a valid dictionary"),
    ],
)
def test_a_malformed_field_is_one_line_naming_the_file_and_the_field(tmp_path, change, message):
    path = tmp_path / "metrics.json"
    _write(path, {**LEGACY, **change})
    with pytest.raises(ArtifactError) as info:
        read_metrics(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


@pytest.mark.parametrize(
    ("payload", "message"), [(b"{not json", "is corrupt: not valid JSON"), (b"[1]", "expected a JSON object")]
)
def test_a_file_that_is_not_a_document_is_one_line(tmp_path, payload, message):
    path = tmp_path / "metrics.json"
    path.write_bytes(payload)
    with pytest.raises(ArtifactError, match=message) as info:
        read_metrics(path)
    assert "\n" not in str(info.value)
    with pytest.raises(ArtifactError, match="no such file"):
        read_metrics(tmp_path / "absent.json")


def test_the_metric_keys_are_the_models_fields():
    from backtests import metrics as m

    assert METRIC_KEYS[: len(m.SUMMARY_METRICS)] == m.SUMMARY_METRICS
    assert (
        *m.SUMMARY_METRICS,
        "probabilistic_sharpe_ratio",
        "beta",
        "alpha",
        "information_ratio",
    ) == METRIC_KEYS


def test_a_fold_record_reads_typed_and_a_newer_one_is_refused(tmp_path):
    from app.runs import RunDir
    from app.walkforward.record import FoldRecord, read_fold_records

    run = RunDir(tmp_path, "wf")
    legacy = {  # as the walk-forward wrote it before the record had a schema version
        "index": 0,
        "windows": {"train": ["a", "b"], "valid": ["c", "d"], "test": ["e", "f"]},
        "in_charge": {"fold": 0, "run": "fold-000"},
        "gate": {"promote": True, "challenger": {"sharpe_ratio": 1.2, "normalization": "its own"}},
        "test": {"sessions": 2, "return": 0.01},
        "seconds": {"total": 3.0},
    }
    run.fold(0).path.mkdir(parents=True)
    run.fold_record(0).write_text(json.dumps(legacy))
    (record,) = read_fold_records(run)
    assert isinstance(record, FoldRecord) and record.schema_version == 1
    assert (record.in_charge.run, record.test.period_return, record.test_window()) == (
        "fold-000",
        0.01,
        ("e", "f"),
    )
    run.write_fold_record(0, record)  # rewritten: the same keys, "return" under its own name
    assert json.loads(run.fold_record(0).read_text()) == {**legacy, "schema_version": 1}
    run.fold_record(0).write_text(json.dumps({**legacy, "schema_version": 3}))
    with pytest.raises(ArtifactError, match="schema version 3 is newer") as info:
        read_fold_records(run)
    assert str(info.value).startswith(str(run.fold_record(0))) and "\n" not in str(info.value)
    run.fold_record(0).write_text(json.dumps({**legacy, "index": "first"}))
    with pytest.raises(ArtifactError, match="index: input should be a valid integer"):
        read_fold_records(run)
