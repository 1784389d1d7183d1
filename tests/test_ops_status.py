"""`podracer status` tells the truth and problems reach a person: one line per problem and exit 1
for each check of app.alerts.CHECKS, the alert hook (a command and a webhook) fires once per new
problem and once when it clears, the retrain's time budget, and `schedule print` refusing a bad
config before it writes anything."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from app.alerts import AlertSettings, Problem, clear_problem, notify, raise_problem
from app.cli import main
from app.config import Config
from app.nightly.budget import RetrainOverBudget
from app.nightly.lock import RETRAIN_LOCK_NAME as LOCK_NAME
from app.nightly.lock import ProcessLock
from app.nightly.os_schedule import systemd_units, watch_units
from app.nightly.pipeline import RetrainError, RetrainSteps, run_retrain
from app.nightly.registry import DecisionRecord, read_decisions, record_decision
from app.nightly.schedule import record_schedule, schedule_path
from app.paper.books import BookRecord, record_path
from app.paper.heartbeat import Heartbeat, heartbeat_path, write_heartbeat
from app.paper.journal import Journal
from app.workflows.status import gather_status


def _status(home: Path, capsys, *args: str) -> tuple[int, list[str]]:
    rc = main(["--home", str(home), "status", *args])
    out = capsys.readouterr()
    return rc, [line for line in out.out.splitlines() if line.startswith("problem")] + out.err.splitlines()


def _failed(home: Path, reason: str, when: str = "2024-01-04T07:10:00+00:00") -> None:
    record_decision(
        home,
        DecisionRecord(started_at=when, decided_at=when, verdict="failed", reason=reason, step="update_data"),
    )


def test_a_missing_home_is_a_problem(tmp_path, capsys):
    rc, lines = _status(tmp_path / "nope", capsys)
    assert rc == 1 and lines == [
        f"problem       home {tmp_path / 'nope'} does not exist (--home / PODRACER_HOME)"
    ]


def test_failed_retrains_are_a_problem_counted(home, capsys):
    for _ in range(3):
        _failed(home, "cannot reach the data API")
    rc, lines = _status(home, capsys)
    assert rc == 1 and len(lines) == 1 and "the last 3 retrains failed" in lines[0]
    assert "cannot reach the data API" in lines[0]


def test_no_retrain_since_the_recorded_schedule_is_overdue(home):
    record_schedule(home, cron="0 2 * * *", tz="UTC", config=None, fmt="crontab")
    later = datetime.now(UTC) + timedelta(days=2)
    state = gather_status(home, now=later)
    assert [p["check"] for p in state.checks] == ["retrain_overdue"]
    assert "no retrain recorded since the scheduled run of" in state.problems[0]
    assert gather_status(home).healthy  # just installed: nothing was due yet


def test_a_retrain_past_its_budget_and_one_killed_mid_run(home):
    lock = ProcessLock(home / LOCK_NAME).acquire()
    try:
        assert gather_status(home).healthy  # running, within its budget
        later = datetime.now(UTC) + timedelta(minutes=360 + 31)
        state = gather_status(home, now=later)
        assert [p["check"] for p in state.checks] == ["retrain_stuck"]
        assert f"pid {os.getpid()}" in state.problems[0] and "past its budget of 360 min" in state.problems[0]
    finally:
        lock.release()
    assert gather_status(home).healthy  # released cleanly
    # kill -9: the lock file keeps its dead holder's pid; its run folder says "running"
    (home / LOCK_NAME).write_text(json.dumps({"pid": 2**22 + 12345, "started_at": time.time()}))
    run = home / "runs" / "nightly-20240104T070000Z"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "running"}))
    state = gather_status(home)
    assert [p["check"] for p in state.checks] == ["retrain_killed"]
    (home / LOCK_NAME).write_text("")  # the next retrain took the lock over and released it
    state = gather_status(home)
    assert [p["check"] for p in state.checks] == ["retrain_killed"]
    assert "nightly run nightly-20240104T070000Z is still marked running" in state.problems[0]


def _beat(home: Path, **fields) -> None:
    now = datetime.now(UTC)
    values = dict(time=now.isoformat(), status="traded", mode="champion", interval_s=900.0,
                  next_due=(now + timedelta(minutes=15)).isoformat())  # fmt: skip
    write_heartbeat(heartbeat_path(home), Heartbeat(**(values | fields)))


def test_a_halted_paper_loop_is_a_problem(home, capsys):
    _beat(home, status="halted", messages=["daily loss 3.10% reached the limit 3.00%: no new orders"])
    rc, lines = _status(home, capsys)
    assert rc == 1 and lines == [
        "problem       paper loop halted: daily loss 3.10% reached the limit 3.00%: no new orders"
    ]


def test_a_heartbeat_with_a_mistyped_field_is_one_unreadable_line(home, capsys):
    _beat(home)
    raw = json.loads(heartbeat_path(home).read_text())
    raw["interval_s"] = "fifteen minutes"
    heartbeat_path(home).write_text(json.dumps(raw))
    rc, lines = _status(home, capsys)
    assert rc == 1 and len(lines) == 1 and "heartbeat.json is unreadable" in lines[0], lines
    assert "interval_s: input should be a valid number" in lines[0] and "internal error" not in lines[0]


def _decision(journal: Journal) -> None:
    journal.decision(decision_ts="2024-01-04T15:00:00+00:00", bundle_id="b", dry_run=False, equity=1.0,
                     cash=1.0, tickers=["AAA"], current_weights=[0.0], target_weights=[0.5],
                     policy_weights=[0.5], skipped=[])  # fmt: skip


def test_a_session_without_data_and_one_whose_orders_were_all_rejected(home):
    with Journal.for_home(home) as journal:
        for _ in range(2):
            journal.event("missing_bars", "AAA: the last bar is 45 min old", "warning")
    tomorrow = datetime.now(UTC) + timedelta(days=2)
    assert gather_status(home).healthy  # two cycles of an open session: not yet
    assert [p["check"] for p in gather_status(home, now=tomorrow).checks] == ["no_data"]
    with Journal.for_home(home) as journal:
        _decision(journal)
        for n in range(2):
            journal.order(client_order_id=f"c{n}", decision_ts="2024-01-04T15:00:00+00:00", bundle_id="b",
                          ticker="AAA", side="buy", qty=1.0, est_price=1.0, status="rejected",
                          message="insufficient buying power")  # fmt: skip
    state = gather_status(home, now=tomorrow)
    assert [p["check"] for p in state.checks] == ["orders_rejected"]
    assert "all 2 order(s) sent were rejected" in state.problems[0]


def _session(journal: Journal, session: str, statuses: list[str]) -> None:
    """One cycle of ``session`` (the broker's date, as a replay runs it: all on today's wall clock)."""
    journal.session = session
    ts = f"{session}T15:00:00+00:00"
    journal.decision(decision_ts=ts, bundle_id="b", dry_run=False, equity=1.0, cash=1.0, tickers=["AAA"],
                     current_weights=[0.0], target_weights=[0.5], policy_weights=[0.5], skipped=[],
                     session=session)  # fmt: skip
    for n, status in enumerate(statuses):
        journal.order(client_order_id=f"{session}-{n}", decision_ts=ts, bundle_id="b", ticker="AAA",
                      side="buy", qty=1.0, est_price=1.0, status=status)  # fmt: skip


def test_sessions_are_told_apart_by_the_broker_session_not_the_wall_clock(home):
    # Three sessions journaled on one wall-clock day (a replay): each is judged on its own rows.
    with Journal.for_home(home) as journal:
        _session(journal, "2024-01-03", ["filled", "filled"])
        _session(journal, "2024-01-04", ["rejected", "rejected", "not_sent"])
    state = gather_status(home)
    assert [p["check"] for p in state.checks] == ["orders_rejected"]
    assert state.problems == ["session 2024-01-04: all 2 order(s) sent were rejected"]
    with Journal.for_home(home) as journal:
        _session(journal, "2024-01-05", ["filled"])
    assert gather_status(home).healthy
    with Journal.for_home(home) as journal:
        journal.session = "2024-01-08"
        journal.event("missing_bars", "AAA: the last bar is 45 min old", "warning")
    state = gather_status(home)  # a session before today's, none of its cycles decided
    assert [p["check"] for p in state.checks] == ["no_data"] and "session 2024-01-08" in state.problems[0]


def test_books_that_do_not_reconcile_are_a_problem(home):
    record = BookRecord(status="mismatch", checked_at="2024-01-04T15:00:00+00:00",
                        since="2024-01-04T15:00:00+00:00", when="cycle_start", tolerance=1e-4,
                        diffs=[["AAA", 5.0, 10.0]], message="AAA: broker holds 5, the journal's fills imply 10")  # fmt: skip
    record.write(record_path(home))
    state = gather_status(home)
    assert [p["check"] for p in state.checks] == ["books"] and "AAA: broker holds 5" in state.problems[0]


def test_raised_problems_show_until_cleared(home):
    raise_problem(home, "books:acct", "the journal and the broker disagree on AAA", check="books")
    assert [(p["key"], p["check"]) for p in gather_status(home).checks] == [("books:acct", "books")]
    assert clear_problem(home, "books:acct") and gather_status(home).healthy


# --- the hook ---------------------------------------------------------------------------------------------
def test_the_command_hook_fires_once_per_new_problem_and_once_when_it_clears(home, tmp_path, capsys):
    sink = tmp_path / "alerts.jsonl"
    config = tmp_path / "alerts.toml"
    config.write_text(f'[alerts]\ncommand = "cat >> {sink}"\n')
    _failed(home, "disk on fire")
    for _ in range(2):  # the second run finds nothing new
        assert main(["--home", str(home), "status", "--notify", "--silent", "--config", str(config)]) == 1
    sent = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [(s["event"], s["check"]) for s in sent] == [("problem", "retrain_failed")]
    assert "disk on fire" in sent[0]["message"] and sent[0]["home"] == str(home)
    record_decision(home, DecisionRecord(started_at="2024-01-05T07:00:00+00:00", decided_at="2024-01-05T07:10:00+00:00",
                                   verdict="rejected", reason="below margin", step="decide"))  # fmt: skip
    capsys.readouterr()
    for _ in range(2):
        assert main(["--home", str(home), "status", "--notify", "--silent", "--config", str(config)]) == 0
    sent = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [(s["event"], s["key"]) for s in sent] == [
        ("problem", "retrain_failed"),
        ("clear", "retrain_failed"),
    ]


def test_the_webhook_gets_the_problem_and_a_failed_delivery_is_retried(home):
    got: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        problem = Problem("paper_halted", "paper loop halted: daily loss")
        down = AlertSettings(webhook="http://127.0.0.1:9/nothing-listens", timeout_s=1.0)
        assert notify(home, [problem], down).failed == ["paper_halted"]
        report = notify(home, [problem], AlertSettings(webhook=url))
        assert report.raised == ["paper_halted"] and [g["check"] for g in got] == ["paper_halted"]
        assert notify(home, [problem], AlertSettings(webhook=url)).raised == []
    finally:
        server.shutdown()


def test_a_failed_unit_alerts_at_once(home, tmp_path):
    sink = tmp_path / "alerts.jsonl"
    config = tmp_path / "alerts.toml"
    config.write_text(f'[alerts]\ncommand = "cat >> {sink}"\n')
    rc = main(["--home", str(home), "status", "--silent", "--config", str(config),
               "--unit-failed", "podracer-paper.service"])  # fmt: skip
    assert rc == 1
    sent = json.loads(sink.read_text())
    assert sent["check"] == "unit_failed" and "podracer-paper.service failed" in sent["message"]


# --- the OS schedule and the budget --------------------------------------------------------------------------
def test_schedule_print_refuses_an_invalid_config_before_writing_anything(home, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[gate]\nmargin = -1\n")
    rc = main(["--home", str(home), "schedule", "print", "--config", str(bad)])
    err = capsys.readouterr()
    assert rc == 2 and "gate.margin" in err.err and err.out == ""
    assert not schedule_path(home).exists()
    bad.write_text('[alerts]\nwebhook = "ftp://x"\n')
    assert main(["--home", str(home), "schedule", "print", "--config", str(bad)]) == 2
    assert not schedule_path(home).exists()


def test_the_units_time_out_after_the_budget_and_alert_on_failure(home):
    units = systemd_units("0 2 * * 1-5", home=home, config=None, max_minutes=90)
    service = units["podracer-retrain.service"]
    assert "TimeoutStartSec=100min" in service and "OnFailure=podracer-alert@%n.service" in service
    watch = watch_units(home, None)
    assert (
        "--unit-failed %i" in watch["podracer-alert@.service"]
        and "OnCalendar=*:0/5" in watch["podracer-watch.timer"]
    )


def test_a_retrain_past_its_budget_stops_records_the_reason_and_releases_its_lock(home):
    def hangs(config, home_dir):  # a market-data server that accepts and never answers
        time.sleep(30)

    def unused(*args):
        raise AssertionError("not reached")

    config = Config().with_updates(nightly={"max_minutes": 0.01})
    started = time.monotonic()
    with pytest.raises(RetrainError, match="step update_data: ran past its budget of") as info:
        run_retrain(config, home, steps=RetrainSteps(hangs, unused, unused, unused))
    assert time.monotonic() - started < 10 and isinstance(info.value.__cause__, RetrainOverBudget)
    last = read_decisions(home)[-1]
    assert last["verdict"] == "failed" and "max_minutes = 0.01" in last["reason"]
    with ProcessLock(home / LOCK_NAME):  # released
        pass


def test_a_failed_retrain_alerts_as_it_ends(home, tmp_path, monkeypatch, capsys):
    from app.nightly import pipeline

    def broken(config, home_dir):
        raise RuntimeError("disk on fire")

    def unused(*args):
        raise AssertionError("not reached")

    monkeypatch.setattr(pipeline, "default_steps", lambda: RetrainSteps(broken, unused, unused, unused))
    sink = tmp_path / "alerts.jsonl"
    config = tmp_path / "nightly.toml"
    config.write_text(f'[alerts]\ncommand = "cat >> {sink}"\n')
    assert main(["--home", str(home), "retrain", "--config", str(config)]) == 1
    (sent,) = [json.loads(line) for line in sink.read_text().splitlines()]
    assert sent["check"] == "retrain_failed" and "RuntimeError: disk on fire" in sent["message"]


def test_a_missing_home_alerts_without_creating_it_and_clears_when_it_is_back(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    sink = tmp_path / "alerts.jsonl"
    config = tmp_path / "alerts.toml"
    config.write_text(f'[alerts]\ncommand = "cat >> {sink}"\n')
    home = tmp_path / "mount" / "home"
    args = ["--home", str(home), "status", "--notify", "--silent", "--config", str(config)]
    assert main(args) == 1 and main(args) == 1 and not home.exists()
    home.mkdir(parents=True)
    assert main(args) == 0
    sent = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [(s["event"], s["key"]) for s in sent] == [("problem", "home"), ("clear", "home")]


def test_a_killed_run_is_history_once_a_later_retrain_ran(home):
    old = home / "runs" / "nightly-20240104-070000"
    old.mkdir(parents=True)
    (old / "run.json").write_text(json.dumps({"status": "running"}))
    assert [p["check"] for p in gather_status(home).checks] == ["retrain_killed"]
    new = home / "runs" / "nightly-20240105-070000"
    new.mkdir()
    (new / "run.json").write_text(json.dumps({"status": "done"}))
    os.utime(old, (time.time() - 86400, time.time() - 86400))
    assert gather_status(home).healthy


def test_a_hook_that_fails_or_hangs_is_retried_next_time(home, tmp_path):
    problem = Problem("no_data", "session 2024-01-04: no fresh bars")
    assert notify(home, [problem], AlertSettings(command="echo down >&2; exit 3")).failed == ["no_data"]
    assert notify(home, [problem], AlertSettings(command="sleep 5", timeout_s=0.2)).failed == ["no_data"]
    sink = tmp_path / "sink.jsonl"
    assert notify(home, [problem], AlertSettings(command=f"cat >> {sink}")).raised == ["no_data"]
    assert json.loads(sink.read_text())["message"] == "session 2024-01-04: no fresh bars"


def test_docs_name_every_check():
    from app.alerts import CHECKS

    text = (Path(__file__).resolve().parents[1] / "docs" / "nightly.md").read_text()
    assert [name for name in CHECKS if f"`{name}`" not in text] == []
