"""An operator overrules the promotion rule, on the record: ``podracer promote RUN --reason`` and
``podracer demote --reason`` (app/nightly/manual.py).

End to end against the local Alpaca stand-in (tests/alpaca_fake.py): a run promoted by hand on a fresh
home is what ``paper --champion --once --dry-run`` trades and what ``podracer status`` names, with
the reason; after a demotion by hand the paper loop falls back to the benchmark. Then the record (the
registry's manual rows, which a retrain's checks do not count as retrains) and every refusal: one line,
a non-zero exit, nothing written.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from alpaca_fake import SECRET, FakeAlpaca, point_at
from test_demotion import _steps
from test_paper_champion import SESSIONS, at, events
from test_paper_support import DECISION_INTERVAL, make_run
from test_shadow import _fake_replay

from app.champion import Champion, ChampionNote
from app.cli import main
from app.commands.status import status_lines
from app.config import Config, write_config
from app.dashboard.in_charge import in_charge
from app.nightly import manual, shadow
from app.nightly.lock import ProcessLock
from app.nightly.pipeline import run_retrain
from app.nightly.registry import (
    DecisionRecord,
    current_champion,
    decision_gate,
    last_demotion,
    read_decisions,
    record_decision,
    registry_path,
)
from app.paper.benchmark import is_benchmark
from app.paper.journal import read_journal
from app.workflows.status import gather_status
from data.errors import PodracerError
from data.scrub import MASK

REASON = "reviewed its backtest and paper record: [ok] to trade"
ONCE = ["--fill-timeout", "1", "--max-order-notional", "1e9", "--daily-loss-limit", "0.5"]
FAST = ["--exporter", "torchscript"]  # the legacy exporter: the same bundle checks, a fraction of the time


def podracer(home: Path, *args: str) -> int:
    return main(["--home", str(home), *args])


def status_json(home: Path, capsys) -> dict:
    capsys.readouterr()
    podracer(home, "status", "--json")  # exit 1 when the fake clock's stale heartbeat is a problem
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def fresh_home(tmp_path, monkeypatch):
    """A fresh home holding one run (``run-a``), the fake Alpaca at 15:00 UTC on its first paper
    session, and a config whose universe is the run's tickers (the benchmark's)."""
    home = tmp_path / "home"
    run = make_run(home, "run-a", seed=0)
    config = tmp_path / "paper.toml"
    write_config(
        Config().with_updates(
            data={"tickers": list(run.splits.full.tickers)},
            env={"decision_interval": DECISION_INTERVAL},
            gate={"before_champion": "benchmark"},
        ),
        config,
    )
    with FakeAlpaca(cash=100_000.0, bars=run.bars, slippage_bps=5.0) as fake:
        fake.set_time(at(SESSIONS[0]))
        point_at(fake, monkeypatch)
        yield SimpleNamespace(home=home, fake=fake, config=config, run=run)


def test_promote_by_hand_paper_trades_it_status_names_it_and_demote_falls_back(fresh_home, capsys):
    m = fresh_home
    assert podracer(m.home, "promote", "run-a", "--reason", REASON, *FAST) == 0
    champion = current_champion(m.home)
    bundle_id = json.loads((Path(champion.bundle) / "manifest.json").read_text())["bundle_id"]
    assert champion.run_id == "run-a" and champion.by_hand and champion.info.reason == REASON

    paper = ["paper", "--champion", "--once", "--dry-run", "--config", str(m.config), *ONCE]
    assert podracer(m.home, *paper) == 0
    tables = read_journal(m.home)
    assert list(tables["decisions"]["bundle_id"]) == [bundle_id]  # the run's bundle decided
    assert set(tables["orders"]["status"]) == {"dry_run"} and not m.fake.orders
    assert tables["sessions"]["run_id"].tolist() == ["run-a"]
    (took,) = events(m.home, "champion").itertuples()
    assert "champion run-a" in took.message and f"put in charge by hand: {REASON}" in took.message

    shown = status_json(m.home, capsys)
    assert shown["champion"]["run_id"] == "run-a" and shown["champion"]["bundle_id"] == bundle_id
    assert (shown["champion"]["source"], shown["champion"]["reason"]) == ("manual", REASON)
    assert shown["last_decision"] is None  # a change made by hand is no retrain
    podracer(m.home, "status")
    text = capsys.readouterr().out
    assert "champion      run-a" in text and f"put in charge by hand (podracer promote): {REASON}" in text

    assert podracer(m.home, "demote", "--reason", "drawdown past what I accept") == 0
    assert current_champion(m.home) is None
    m.fake.set_time(at(SESSIONS[1]))  # the session after: the pointer is read at its first cycle
    assert podracer(m.home, *paper) == 0
    last = read_journal(m.home)["decisions"].iloc[-1]
    assert is_benchmark(last["bundle_id"]) and last["bundle_id"] != bundle_id
    (handed,) = events(m.home, "champion_demoted").itertuples()
    assert handed.bundle_id == bundle_id and "benchmark takes the account back" in handed.message
    assert not m.fake.orders  # dry run all along

    shown = status_json(m.home, capsys)
    assert shown["champion"] is None
    gone = shown["demotion"]
    assert (gone["run_id"], gone["source"], gone["reason"]) == (
        "run-a",
        "manual",
        "drawdown past what I accept",
    )


def test_the_manual_record_in_the_registry(fresh_home):
    m = fresh_home
    pasted = f"  {REASON}\n second line, key {SECRET} "
    assert podracer(m.home, "promote", "run-a", "--reason", pasted, *FAST) == 0
    # One line (whitespace runs collapsed), the pasted key masked in the pointer's info as in the row.
    reason = f"{REASON} second line, key {MASK}"
    assert current_champion(m.home).info.reason == reason
    assert podracer(m.home, "demote", "--reason", "out") == 0
    promoted, demoted = read_decisions(m.home)
    assert (promoted["source"], promoted["verdict"], promoted["step"], promoted["reason"]) == (
        "manual", "promoted", "promote", reason,
    )  # fmt: skip
    assert promoted["challenger_run_id"] == "run-a" and promoted["champion_run_id"] is None
    assert promoted["bundle"] == str(m.home / "exports" / "run-a-pod-0007")
    assert (
        promoted["inputs"]["command"] == "podracer promote"
        and promoted["inputs"]["exporter"] == "torchscript"
    )
    assert decision_gate(promoted) is None  # no gate decided it
    assert (demoted["source"], demoted["verdict"], demoted["step"], demoted["champion_run_id"]) == (
        "manual", "rejected", "demote", "run-a",
    )  # fmt: skip
    gone = last_demotion(m.home)
    assert (gone.run_id, gone.source, gone.reason, gone.decision_id) == (
        "run-a",
        "manual",
        "out",
        demoted["id"],
    )
    # The policy copy the next retrain scores as the incumbent, with the run's feature spec.
    copy = m.home / "champions" / "run-a"
    assert {p.name for p in copy.iterdir()} >= {"policy.safetensors", "spec.json", "feature_spec.json"}
    assert not (m.home / "retrain.lock").read_text()  # released


def by_hand_pointer(home: Path, run_id: str, reason: str, now: str) -> Champion:
    """The pointer ``podracer promote`` writes (its bundle and policy copy aside)."""
    return Champion(
        run_id=run_id,
        policy_dir=str(home / "champions" / run_id),
        promoted_at=now,
        info=ChampionNote(source="manual", reason=reason),
    )


def test_status_and_the_card_say_a_champion_was_set_by_hand(tmp_path):
    home = tmp_path / "home"
    now = "2030-01-02T03:04:05+00:00"
    rule = dict(started_at=now, decided_at=now, step="tournament", reason="no bars")
    record_decision(home, DecisionRecord(verdict="failed", **rule))
    record_decision(
        home,
        DecisionRecord.by_hand("promote", reason=REASON, decided_at=now, run_id="run-b"),
        by_hand_pointer(home, "run-b", REASON, now),
    )
    state = gather_status(home)
    assert state.champion.run_id == "run-b" and state.champion.source == "manual"
    # The last retrain failed: a promotion by hand after it neither hides that nor counts as a retrain.
    assert state.last_decision["verdict"] == "failed"
    assert any(p.startswith("last retrain failed") for p in state.problems)
    lines = status_lines(state)
    assert lines[1] == f"              put in charge by hand (podracer promote): {REASON}"
    card = in_charge(state)
    assert (card.value, card.note, card.since) == ("run-b", "set by hand", "2030-01-02 03:04")
    assert "by hand" in card.explanation and REASON in card.explanation


def test_a_rule_champion_shows_no_hand(tmp_path):
    home = tmp_path / "home"
    now = "2030-01-02T03:04:05+00:00"
    record_decision(
        home,
        DecisionRecord(started_at=now, decided_at=now, verdict="promoted", reason="passed", step="decide"),
        Champion(run_id="run-r", policy_dir="/x", promoted_at=now),
    )
    state = gather_status(home)
    assert (state.champion.source, state.champion.reason) == ("rule", None)
    assert not any("by hand" in line for line in status_lines(state))
    assert in_charge(state).explanation is None
    assert read_decisions(home)[0]["source"] == "rule"


# --- refusals: one line, non-zero, nothing written ------------------------------------------------


def _refused(home: Path, capsys, *args: str) -> tuple[int, str]:
    """The exit status and the error's line (the only one: log lines of the work done before aside)."""
    capsys.readouterr()
    rc = podracer(home, *args)
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith(("error:", "Error:", "Usage:"))]
    assert len(errors) == 1 or errors[0].startswith("Usage:"), lines
    return rc, next(line for line in reversed(lines) if line.strip())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("promote", "nope", "--reason", "x"), "no run 'nope' in"),
        (("promote", "../run-a", "--reason", "x"), "is not a run id"),
        (("promote", "run-a", "--reason", "   "), "--reason is empty"),
        (("demote", "--reason", "x"), "no champion in charge: nothing to demote"),
        (("promote", "run-a", "--reason", "x", "--exporter", "onnx2"), "--exporter 'onnx2'"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(tmp_path, capsys, args, says):
    home = tmp_path / "home"
    make_run(home, "run-a", seed=0)
    rc, err = _refused(home, capsys, *args)
    assert rc == 2 and says in err
    assert not registry_path(home).exists() and not (home / "exports").exists()


def test_reason_is_required(tmp_path, capsys):
    home = tmp_path / "home"
    rc, err = _refused(home, capsys, "promote", "run-a")
    assert rc == 2 and "Missing option '--reason'" in err
    rc, err = _refused(home, capsys, "demote")
    assert rc == 2 and "Missing option '--reason'" in err


def test_a_run_without_a_loadable_policy_is_refused(tmp_path, capsys):
    home = tmp_path / "home"
    make_run(home, "run-a", seed=0)
    (home / "runs" / "run-b").mkdir()  # a run folder with no champion policy
    rc, err = _refused(home, capsys, "promote", "run-b", "--reason", "x")
    assert rc == 2 and "run run-b has no champion policy" in err
    weights = home / "runs" / "run-a" / "champion" / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # a torn weights file: no bundle can be made
    rc, err = _refused(home, capsys, "promote", "run-a", "--reason", "x", *FAST)
    assert rc == 2 and "run run-a: its policy cannot be exported" in err
    assert current_champion(home) is None and not registry_path(home).exists()


def test_a_bundle_that_does_not_load_is_refused(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "run-a", seed=0)

    def refuse(path):
        raise PodracerError(f"{path}: sha256 of policy.onnx does not match the manifest")

    monkeypatch.setattr(manual, "load_bundle", refuse)
    rc, err = _refused(home, capsys, "promote", "run-a", "--reason", "x", *FAST)
    assert rc == 2 and "its bundle" in err and "does not load" in err
    assert current_champion(home) is None


def test_promoting_the_champion_again_and_beside_a_retrain(fresh_home, capsys):
    m = fresh_home
    assert podracer(m.home, "promote", "run-a", "--reason", "first", *FAST) == 0
    rc, err = _refused(m.home, capsys, "promote", "run-a", "--reason", "again", *FAST)
    assert rc == 2 and "run-a is already the champion" in err
    with ProcessLock(m.home / "retrain.lock"):  # a retrain (or a prune) running
        rc, err = _refused(m.home, capsys, "demote", "--reason", "x")
        assert rc == 75 and "is running" in err
    assert current_champion(m.home).run_id == "run-a" and len(read_decisions(m.home)) == 1


def test_a_schema_3_registry_reads_as_the_rules_and_a_manual_change_migrates_it(fresh_home):
    m = fresh_home
    now = "2030-01-02T03:04:05+00:00"
    record_decision(
        m.home, DecisionRecord(started_at=now, decided_at=now, verdict="rejected", reason="r", step="decide")
    )
    with sqlite3.connect(registry_path(m.home)) as conn:  # as schema 3 wrote it: no source columns
        conn.execute("ALTER TABLE decisions DROP COLUMN source")
        conn.execute("ALTER TABLE demotions DROP COLUMN source")
        conn.execute("PRAGMA user_version = 3")
    assert [d["source"] for d in read_decisions(m.home)] == ["rule"]
    assert podracer(m.home, "promote", "run-a", "--reason", "by hand", *FAST) == 0
    assert [d["source"] for d in read_decisions(m.home)] == ["rule", "manual"]
    with sqlite3.connect(registry_path(m.home)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4


def test_the_next_retrain_judges_against_the_champion_set_by_hand(tmp_path, monkeypatch):
    """The nightly follows a change made by hand as it follows its own: the champion put in charge is
    tonight's incumbent, and the shadow book starts its tenure record from the change."""
    home = tmp_path / "home"
    (home / "champions" / "run-h").mkdir(parents=True)
    now = "2030-01-02T03:04:05+00:00"
    record_decision(
        home,
        DecisionRecord.by_hand("promote", reason=REASON, decided_at=now, run_id="run-h"),
        by_hand_pointer(home, "run-h", REASON, now),
    )
    monkeypatch.setattr(shadow, "replay_returns", _fake_replay({}))
    config = Config().with_updates(nightly={"export": False}, retention={"after_retrain": False})
    outcome = run_retrain(config, home, steps=_steps(first_day=30))
    assert outcome.previous_champion == "run-h" and outcome.champion == "run-h"
    night = read_decisions(home)[-1]
    assert (night["source"], night["champion_run_id"]) == ("rule", "run-h")
    tenure = shadow.read_book(home).champion
    assert tenure.run_id == "run-h"
