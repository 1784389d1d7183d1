"""Bounded disk: ``[retention]``, ``podracer prune [--dry-run]`` and journal compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.config import Config, RetentionConfig
from app.nightly.registry import Champion, DecisionRecord, current_champion, record_decision
from app.nightly.retention import plan_prune, prune, rotate_log
from app.paper.books import implied_positions
from app.paper.compact import compact_journal
from app.paper.journal import Journal, read_journal


def _promote(home: Path, run: str, previous: str | None) -> None:
    """A nightly run promoted: its run folder, export bundle and champion copy, and the registry rows."""
    for folder in (home / "runs" / run, home / "exports" / f"{run}-pod-0", home / "champions" / run):
        folder.mkdir(parents=True)
        (folder / "weights.bin").write_bytes(b"x" * 1000)
    decision = DecisionRecord(
        started_at="2026-03-09T06:00:00+00:00",
        decided_at="2026-03-09T06:30:00+00:00",
        verdict="promoted",
        reason="better",
        step="decide",
        challenger_run_id=run,
        bundle=str(home / "exports" / f"{run}-pod-0"),
    )
    champion = Champion(
        run_id=run,
        policy_dir=str(home / "champions" / run),
        promoted_at="2026-03-09T06:30:00+00:00",
        bundle=decision.bundle,
        info={"previous_champion": previous},
    )
    record_decision(home, decision, champion)


def _reject(home: Path, run: str) -> None:
    (home / "runs" / run).mkdir(parents=True)
    (home / "runs" / run / "leaderboard.sqlite").write_bytes(b"y" * 500)
    record_decision(
        home,
        DecisionRecord(
            started_at="2026-03-10T06:00:00+00:00",
            decided_at="2026-03-10T06:30:00+00:00",
            verdict="rejected",
            reason="not better",
            step="decide",
            challenger_run_id=run,
        ),
    )


@pytest.fixture
def nights(tmp_path) -> Path:
    """Eight nights: promotions on nights 1, 2, 4, 6 and 7, rejections between; a manual run."""
    home = tmp_path / "home"
    previous = None
    for night in range(1, 9):
        run = f"nightly-202603{night:02d}-060000"
        if night in (1, 2, 4, 6, 7):
            _promote(home, run, previous)
            previous = run
        else:
            _reject(home, run)
    (home / "runs" / "my-experiment").mkdir()
    return home


def test_dry_run_lists_and_prune_removes_only_what_retention_allows(nights, capsys):
    home = nights
    policy = RetentionConfig(keep_runs=3, keep_champions=2)
    plan = plan_prune(home, policy)
    runs = sorted(Path(d.path).name for d in plan if d.kind == "run")
    # newest 3 nightly runs kept (06, 07, 08) and never the champion (07) nor its predecessor (06)
    assert runs == [f"nightly-202603{n:02d}-060000" for n in (1, 2, 3, 4, 5)]
    exports = sorted(Path(d.path).name for d in plan if d.kind == "export")
    assert exports == [f"nightly-202603{n:02d}-060000-pod-0" for n in (1, 2, 4)]
    assert sorted(Path(d.path).name for d in plan if d.kind == "champion") == [
        f"nightly-202603{n:02d}-060000" for n in (1, 2, 4)
    ]
    # the CLI's dry run shows the same and removes nothing
    cfg = home.parent / "retention.toml"
    cfg.write_text("[retention]\nkeep_runs = 3\nkeep_champions = 2\n")
    assert main(["--home", str(home), "prune", "--dry-run", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"{len(plan)} item(s) would go" in out and "champion" in out and "export" in out
    assert (home / "runs" / "nightly-20260301-060000").is_dir()
    done = prune(home, policy)
    assert {d.path for d in done} == {d.path for d in plan}
    left = sorted(p.name for p in (home / "runs").iterdir())
    assert left == ["my-experiment", *(f"nightly-202603{n:02d}-060000" for n in (6, 7, 8))]
    champion = current_champion(home)
    assert Path(champion.bundle).is_dir() and Path(champion.policy_dir).is_dir()
    assert (home / "exports" / "nightly-20260306-060000-pod-0").is_dir()  # the predecessor's
    assert not list(home.rglob("*.pruning"))
    assert plan_prune(home, policy) == []  # nothing more is due


def test_the_champion_and_its_predecessor_survive_any_count(nights):
    home = nights
    prune(home, RetentionConfig(keep_runs=1, keep_champions=2))
    assert sorted(p.name for p in (home / "runs").iterdir()) == [
        "my-experiment",
        "nightly-20260306-060000",
        "nightly-20260307-060000",
        "nightly-20260308-060000",
    ]


def test_prune_refuses_while_a_retrain_holds_the_lock(nights, capsys):
    from app.nightly.lock import ProcessLock

    with ProcessLock(nights / "retrain.lock"):
        assert main(["--home", str(nights), "prune"]) == 75
    assert "is running" in capsys.readouterr().err
    assert (nights / "runs" / "nightly-20260301-060000").is_dir()


def test_an_interrupted_prune_is_finished_next_time(nights):
    leftover = nights / "runs" / ".nightly-20260301-060000.pruning"
    (nights / "runs" / "nightly-20260301-060000").rename(leftover)
    plan = plan_prune(nights, RetentionConfig(keep_runs=30))
    assert [d.kind for d in plan] == ["leftover"]
    prune(nights, RetentionConfig(keep_runs=30))
    assert not leftover.exists()


def test_log_rotation_keeps_n_copies_and_truncates_in_place(tmp_path):
    log = tmp_path / "logs" / "paper.log"
    log.parent.mkdir()
    with open(log, "ab") as writer:  # a writer appending all along, as cron's >> does
        for k in range(4):
            writer.write(f"round {k}\n".encode() * 10)
            writer.flush()
            rotate_log(log, keep=2)
        writer.write(b"after\n")
        writer.flush()
    assert log.read_bytes() == b"after\n"
    assert sorted(p.name for p in log.parent.iterdir()) == ["paper.log", "paper.log.1", "paper.log.2"]
    assert log.with_name("paper.log.1").read_text().startswith("round 3")
    assert log.with_name("paper.log.2").read_text().startswith("round 2")


def test_bad_retention_config_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[retention]\nkeep_champions = 1\n")
    assert main(["--home", str(tmp_path), "prune", "--config", str(cfg)]) == 2
    assert "retention.keep_champions" in capsys.readouterr().err
    assert Config().retention.keep_champions >= 2


def _day(journal: Journal, session: str, k: int) -> None:
    ts = f"{session}T15:{k:02d}:00+00:00"
    journal.decision(
        decision_ts=ts,
        bundle_id="b1",
        dry_run=False,
        equity=100.0,
        cash=50.0,
        tickers=["AAA", "OLD"] if session < "2024-01-04" else ["AAA"],
        current_weights=[0.0],
        target_weights=[0.5],
        policy_weights=[0.5],
        skipped=[],
        session=session,
    )
    cid = f"pr-{session}-{k}"
    journal.order(
        client_order_id=cid,
        decision_ts=ts,
        bundle_id="b1",
        ticker="AAA",
        side="buy",
        qty=2.0,
        est_price=10.0,
        status="filled",
        filled_qty=2.0,
        filled_avg_price=10.0,
    )
    journal.fill(
        client_order_id=cid, ticker="AAA", side="buy", filled_qty=2.0, filled_avg_price=10.0, status="filled"
    )
    journal.pnl(decision_ts=ts, equity=100.0 + k, cash=50.0, last_equity=100.0, bundle_id="b1")
    journal.event("risk", f"note {session}")


def test_journal_compaction_keeps_the_books_and_is_bounded(tmp_path):
    with Journal(tmp_path / "paper" / "journal.sqlite") as journal:
        journal.set_opening_book({"AAA": 1.0}, "first book check of this journal")
        for session in ("2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"):
            for k in range(3):
                _day(journal, session, k)
        # an order still open on an old day is never dropped
        journal.order(
            client_order_id="pr-open",
            decision_ts="2024-01-02T15:30:00+00:00",
            bundle_id="b1",
            ticker="AAA",
            side="sell",
            qty=1.0,
            est_price=10.0,
            status="accepted",
        )
        before = implied_positions(journal)
        tickers = journal.book_tickers()
        done = compact_journal(journal, keep_sessions=2)
        assert done.days == ["2024-01-02", "2024-01-03"]
        assert implied_positions(journal) == before == {"AAA": 1.0 + 2.0 * 12}
        assert journal.book_tickers() == tickers == {"AAA", "OLD"}
        again = compact_journal(journal, keep_sessions=2)
        assert again.empty
    tables = read_journal(tmp_path)
    assert sorted(tables["daily"]["session"]) == ["2024-01-02", "2024-01-03"]
    day = tables["daily"].set_index("session").loc["2024-01-02"]
    assert day["decisions"] == 3 and json.loads(day["orders"]) == {"filled": 3} and day["fills"] == 3
    assert day["first_equity"] == 100.0 and day["last_equity"] == 102.0
    assert set(tables["decisions"]["session"]) == {"2024-01-04", "2024-01-05"}
    assert set(tables["orders"]["client_order_id"]) >= {"pr-open"}
    assert len(tables["orders"]) == 6 + 1 and len(tables["pnl"]) == 6


def test_prune_of_a_missing_home_is_one_line_and_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["--home", str(missing), "prune", "--dry-run"]) == 2
    assert main(["--home", str(missing), "prune"]) == 2
    assert "no podracer home at" in capsys.readouterr().err and not missing.exists()
