"""The nightly registry: decisions and the champion pointer in one SQLite transaction."""

from __future__ import annotations

import sqlite3

import pytest

from app.champion import ChampionDemotion
from app.nightly.registry import (
    SCHEMA_VERSION,
    Champion,
    DecisionRecord,
    RegistryError,
    current_champion,
    last_demotion,
    read_decisions,
    record_decision,
    registry_path,
)


def _decision(verdict: str = "promoted", run: str = "r1", **extra) -> DecisionRecord:
    return DecisionRecord(
        started_at="2026-03-09T06:00:00+00:00",
        decided_at="2026-03-09T06:30:00+00:00",
        verdict=verdict,
        reason=f"{verdict} because",
        step="decide",
        challenger_run_id=run,
        challenger_fitness=1.25,
        inputs={"config": {"nightly": {"margin": 0.1}}},
        scores={"challenger": {"sharpe_ratio": 1.25, "max_drawdown": None}},
        **extra,
    )


def _champion(run: str = "r1") -> Champion:
    return Champion(
        run_id=run,
        policy_dir=f"/h/champions/{run}",
        promoted_at="2026-03-09T06:30:00+00:00",
        fitness="sharpe",
        fitness_value=1.25,
        info={"dsr": 0.97},
    )


def test_readers_on_a_missing_registry_create_nothing(tmp_path):
    assert read_decisions(tmp_path) == []
    assert current_champion(tmp_path) is None
    assert not registry_path(tmp_path).exists()


def test_record_and_read_back(tmp_path):
    first = record_decision(tmp_path, _decision("promoted", "r1"), _champion("r1"))
    second = record_decision(tmp_path, _decision("rejected", "r2"))
    assert second > first
    rows = read_decisions(tmp_path)
    assert [r["id"] for r in rows] == [first, second]
    assert rows[0]["inputs"] == {"config": {"nightly": {"margin": 0.1}}}
    assert rows[0]["scores"]["challenger"] == {"sharpe_ratio": 1.25, "max_drawdown": None}
    assert rows[1]["verdict"] == "rejected" and rows[1]["challenger_fitness"] == 1.25
    assert [r["id"] for r in read_decisions(tmp_path, limit=1)] == [second]
    champ = current_champion(tmp_path)
    # A rejection leaves the pointer on the decision that promoted it.
    assert (
        champ.run_id == "r1"
        and champ.decision_id == first
        and champ.info.model_dump(exclude_none=True) == {"dsr": 0.97}
    )
    third = record_decision(tmp_path, _decision("promoted", "r3"), _champion("r3"))
    assert current_champion(tmp_path).run_id == "r3" and current_champion(tmp_path).decision_id == third


def test_database_settings(tmp_path):
    record_decision(tmp_path, _decision())
    conn = sqlite3.connect(registry_path(tmp_path))
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        # At most one champion row, by construction.
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO champion (slot, decision_id, run_id, policy_dir, promoted_at) VALUES (2, 1, 'x', 'y', 'z')"
            )
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO decisions (started_at, decided_at, verdict, reason, step) VALUES ('a','b','maybe','c','d')"
            )
    finally:
        conn.close()


def test_failure_inside_the_transaction_writes_nothing(tmp_path):
    record_decision(tmp_path, _decision("promoted", "r1"), _champion("r1"))
    before = (read_decisions(tmp_path), current_champion(tmp_path))

    def boom():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        record_decision(tmp_path, _decision("promoted", "r2"), _champion("r2"), before_commit=boom)
    assert (read_decisions(tmp_path), current_champion(tmp_path)) == before
    # The connection was rolled back and closed: the next write goes through.
    record_decision(tmp_path, _decision("rejected", "r3"))
    assert len(read_decisions(tmp_path)) == 2


def test_a_registry_from_a_newer_podracer_is_refused(tmp_path):
    record_decision(tmp_path, _decision())
    conn = sqlite3.connect(registry_path(tmp_path))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(RegistryError, match="schema"):
        read_decisions(tmp_path)
    with pytest.raises(RegistryError, match="schema"):
        record_decision(tmp_path, _decision())


def test_a_corrupt_registry_is_a_one_line_error(tmp_path):
    registry_path(tmp_path).write_bytes(b"this is not a database" * 100)
    with pytest.raises(RegistryError) as info:
        current_champion(tmp_path)
    assert "\n" not in str(info.value) and str(registry_path(tmp_path)) in str(info.value)


def _version_1_registry(home) -> None:
    """A registry as version 1 wrote it: the gate's level stored as ``dsr_threshold = 1 - level``."""
    conn = sqlite3.connect(registry_path(home))
    with conn:
        conn.execute(
            "CREATE TABLE decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at TEXT NOT NULL, "
            "decided_at TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT NOT NULL, step TEXT NOT NULL, "
            "challenger_run_id TEXT, champion_run_id TEXT, fitness TEXT, challenger_fitness REAL, "
            "champion_fitness REAL, margin REAL, challenger_dsr REAL, dsr_threshold REAL, num_trials INTEGER, "
            "data_start TEXT, data_end TEXT, selection_start TEXT, selection_end TEXT, eval_start TEXT, "
            "eval_end TEXT, bundle TEXT, inputs TEXT NOT NULL DEFAULT '{}', scores TEXT NOT NULL DEFAULT '{}')"
        )
        conn.execute(
            "CREATE TABLE champion (slot INTEGER PRIMARY KEY CHECK (slot = 1), decision_id INTEGER NOT NULL "
            "REFERENCES decisions(id), run_id TEXT NOT NULL, policy_dir TEXT NOT NULL, bundle TEXT, "
            "promoted_at TEXT NOT NULL, fitness TEXT, fitness_value REAL, selection_end TEXT, eval_start TEXT, "
            "eval_end TEXT, info TEXT NOT NULL DEFAULT '{}')"
        )
        conn.execute(
            "INSERT INTO decisions (started_at, decided_at, verdict, reason, step, dsr_threshold) "
            "VALUES ('s', 'd', 'rejected', 'r', 'decide', 0.95)"
        )
        conn.execute(
            "INSERT INTO decisions (started_at, decided_at, verdict, reason, step) "
            "VALUES ('s', 'd', 'failed', 'r', 'tournament')"
        )
        conn.execute("PRAGMA user_version = 1")
    conn.close()


def test_a_version_1_registry_reads_its_level_under_the_current_name(tmp_path):
    _version_1_registry(tmp_path)
    # A reader never writes: it renames on the way out.
    rows = read_decisions(tmp_path)
    assert [r["significance_level"] for r in rows] == [pytest.approx(0.05), None]
    assert all("dsr_threshold" not in r for r in rows)
    with sqlite3.connect(registry_path(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1


def test_a_writer_migrates_a_version_1_registry_in_place(tmp_path):
    _version_1_registry(tmp_path)
    record_decision(tmp_path, _decision("promoted", "r3", significance_level=0.1), _champion("r3"))
    with sqlite3.connect(registry_path(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        columns = [row[1] for row in conn.execute("PRAGMA table_info(decisions)")]
    assert "significance_level" in columns and "dsr_threshold" not in columns
    rows = read_decisions(tmp_path)
    assert [r["significance_level"] for r in rows] == [pytest.approx(0.05), None, pytest.approx(0.1)]
    assert current_champion(tmp_path).run_id == "r3"


def _demotion(run: str = "r1") -> ChampionDemotion:
    return ChampionDemotion(
        run_id=run,
        reason=f"champion {run}'s edge is gone: the demotion test's e-value reached 21.3 >= 20",
        demoted_at="2026-04-01T06:30:00+00:00",
        session="2026-03-31",
    )


def test_a_demotion_removes_the_champion_and_says_why(tmp_path):
    record_decision(tmp_path, _decision("promoted", "r1"), _champion("r1"))
    assert last_demotion(tmp_path) is None
    decision_id = record_decision(tmp_path, _decision("rejected", "r2"), demotion=_demotion("r1"))
    assert current_champion(tmp_path) is None  # the benchmark (or cash) is in charge
    demoted = last_demotion(tmp_path)
    assert demoted == _demotion("r1").model_copy(update={"decision_id": decision_id})
    assert (demoted.session, demoted.demoted_at) == ("2026-03-31", "2026-04-01T06:30:00+00:00")
    assert "edge is gone" in demoted.reason
    # A later promotion puts a champion back; the demotion stays on record.
    record_decision(tmp_path, _decision("promoted", "r3"), _champion("r3"))
    assert current_champion(tmp_path).run_id == "r3" and last_demotion(tmp_path).run_id == "r1"


def test_a_demotion_rolled_back_leaves_the_champion(tmp_path):
    record_decision(tmp_path, _decision("promoted", "r1"), _champion("r1"))

    def crash():
        raise RuntimeError("killed before COMMIT")

    with pytest.raises(RuntimeError):
        record_decision(tmp_path, _decision("rejected", "r2"), demotion=_demotion("r1"), before_commit=crash)
    assert current_champion(tmp_path).run_id == "r1" and last_demotion(tmp_path) is None


def test_a_version_2_registry_reads_with_no_demotion_and_a_writer_adds_the_table(tmp_path):
    record_decision(tmp_path, _decision("promoted", "r1"), _champion("r1"))
    with sqlite3.connect(registry_path(tmp_path)) as conn:  # as schema 2 wrote it: no demotions table
        conn.execute("DROP TABLE demotions")
        conn.execute("ALTER TABLE decisions DROP COLUMN source")  # nor the schema-4 column
        conn.execute("PRAGMA user_version = 2")
    assert last_demotion(tmp_path) is None and current_champion(tmp_path).run_id == "r1"
    record_decision(tmp_path, _decision("rejected", "r2"), demotion=_demotion("r1"))
    with sqlite3.connect(registry_path(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert current_champion(tmp_path) is None and last_demotion(tmp_path).run_id == "r1"
