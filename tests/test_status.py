"""`podracer status` (+ `--json`): the operating loop in one screen, from the stores' real writers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pandas as pd
import pytest

from app.cli import main
from app.nightly.registry import Champion, DecisionRecord, record_decision
from app.nightly.schedule import read_schedule, record_schedule, schedule_path
from app.paper.heartbeat import Heartbeat, heartbeat_path, write_heartbeat
from app.paper.journal import Journal
from app.workflows.status import gather_status

# Thursday 2024-01-04, 11:00 New York: the market is open.
OPEN_NOW = pd.Timestamp("2024-01-04 16:00", tz="UTC").to_pydatetime()


def beat(home: Path, time: datetime, **fields) -> Heartbeat:
    values = dict(
        time=time.isoformat(), status="traded", mode="champion", interval_s=900.0,
        next_due=(time + timedelta(minutes=15)).isoformat(), bundle_id="b" * 64, run_id="run-a",
        session="2024-01-04", orders=3, submitted=3,
    )  # fmt: skip
    heartbeat = Heartbeat(**(values | fields))
    write_heartbeat(heartbeat_path(home), heartbeat)
    return heartbeat


def champion(home: Path, bundle_id: str = "b" * 64) -> None:
    bundle = home / "exports" / "run-a-champion"
    bundle.mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"bundle_id": bundle_id}))
    common = dict(started_at="2024-01-03T07:00:00+00:00", step="decide")
    record_decision(
        home,
        DecisionRecord(
            decided_at="2024-01-03T07:10:00+00:00", verdict="promoted", reason="first champion", **common
        ),
        Champion(
            run_id="run-a",
            policy_dir=str(bundle),
            promoted_at="2024-01-03T07:10:00+00:00",
            bundle=str(bundle),
        ),
    )
    record_decision(
        home,
        DecisionRecord(
            decided_at="2024-01-04T07:10:00+00:00", verdict="rejected", reason="below margin", **common
        ),
    )


def cli_status(home: Path, capsys, *args: str) -> tuple[int, dict]:
    rc = main(["--home", str(home), "status", "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_fresh_home(tmp_path, capsys):
    home = tmp_path / "fresh"
    home.mkdir()
    state = gather_status(home, now=OPEN_NOW)
    assert state.healthy and state.champion is None and state.last_decision is None
    assert state.loop == "not started" and state.heartbeat is None and state.today is None
    assert state.next_retrain == "2024-01-05T02:00:00-05:00"  # the default schedule, 02:00 New York
    rc, shown = cli_status(home, capsys)
    assert rc == 0 and shown["loop"] == "not started" and shown["healthy"] is True
    assert main(["--home", str(home), "status"]) == 0
    out = capsys.readouterr().out
    assert "none yet" in out and "not started" in out and "healthy" in out
    assert not any(home.iterdir())  # status reads, never creates


def test_healthy_loop(tmp_path, capsys):
    home = tmp_path / "home"
    champion(home)
    beat(home, OPEN_NOW - timedelta(minutes=5))
    with Journal.for_home(home) as journal:
        journal.pnl(
            decision_ts=None, equity=101_000.0, cash=1_000.0, last_equity=100_000.0, bundle_id="b" * 64
        )
    state = gather_status(home, now=OPEN_NOW, cron="30 3 * * 1-5")
    assert state.healthy and state.loop == "ok" and not state.switch_pending
    assert state.champion.run_id == "run-a" and state.champion.bundle_id == "b" * 64
    assert state.last_decision["verdict"] == "rejected" and state.next_retrain == "2024-01-05T03:30:00-05:00"
    assert state.heartbeat_age_s == pytest.approx(300.0) and state.kill_switch["on"] is False
    # today's P&L: the journal's newest P&L row is from today's session
    now = datetime.now(UTC)
    today = gather_status(home, now=now).today
    assert (
        today is not None
        and today["pnl"] == pytest.approx(1_000.0)
        and today["return"] == pytest.approx(0.01)
    )
    beat(home, now)  # the CLI's clock is the real one: a heartbeat written just now
    rc, shown = cli_status(home, capsys)
    assert rc == 0 and shown["loop"] == "ok" and shown["champion"]["run_id"] == "run-a"
    assert shown["today"]["pnl"] == pytest.approx(1_000.0)
    assert main(["--home", str(home), "status"]) == 0
    out = capsys.readouterr().out
    assert (
        "run-a (bundle bbbbbbbbbbbb)" in out
        and "paper loop    ok: traded" in out
        and "+$1,000.00 (+1.00%)" in out
    )


def test_the_benchmark_in_charge_is_named(tmp_path, capsys):
    """With no champion yet the paper loop holds the benchmark (app.paper.benchmark): status says so."""
    home = tmp_path / "home"
    beat(home, datetime.now(UTC), status="benchmark", bundle_id="benchmark-0123456789abcdef", run_id=None)
    assert main(["--home", str(home), "status"]) == 0  # holding the benchmark is healthy
    out = capsys.readouterr().out
    assert "paper loop    ok: benchmark" in out and "(benchmark (no qualified champion))" in out


def test_stale_heartbeat(tmp_path, capsys):
    home = tmp_path / "home"
    champion(home)
    beat(home, OPEN_NOW - timedelta(minutes=31))  # 31 min of an open market > 2 x 15 min
    state = gather_status(home, now=OPEN_NOW)
    assert state.loop == "stale" and not state.healthy and "stale" in state.problems[0]
    # a heartbeat from Friday's close is not stale on Sunday, nor just after Monday's open
    friday = pd.Timestamp("2024-01-05 20:59", tz="UTC").to_pydatetime()
    beat(home, friday)
    assert gather_status(home, now=friday + timedelta(days=2)).loop == "ok"
    assert gather_status(home, now=pd.Timestamp("2024-01-08 14:50", tz="UTC").to_pydatetime()).loop == "ok"
    assert gather_status(home, now=pd.Timestamp("2024-01-08 15:10", tz="UTC").to_pydatetime()).loop == "stale"
    beat(home, datetime.now(UTC) - timedelta(days=30))  # the CLI, on the real clock
    rc, shown = cli_status(home, capsys)
    assert rc == 1 and shown["loop"] == "stale" and shown["healthy"] is False


def test_kill_switch_on(tmp_path, capsys):
    home = tmp_path / "home"
    beat(home, datetime.now(UTC), status="kill_switch", kill_switch=str(home / "stop-now"))
    (home / "stop-now").touch()
    rc, shown = cli_status(home, capsys)
    assert rc == 0 and shown["kill_switch"] == {"on": True, "path": str(home / "stop-now")}
    assert shown["loop"] == "ok"  # a halt the operator chose is the loop working
    main(["--home", str(home), "status"])
    assert "ON: no new orders" in capsys.readouterr().out


def test_a_gone_ticker_needs_attention(tmp_path, capsys):
    home = tmp_path / "home"
    beat(home, datetime.now(UTC), attention=["ZOMB"])
    rc, shown = cli_status(home, capsys)
    assert rc == 1 and shown["gone"] == ["ZOMB"]
    assert shown["problems"] == ["gone tickers need manual attention: ZOMB"]


def test_a_refused_champion_and_a_pending_switch(tmp_path, capsys):
    home = tmp_path / "home"
    champion(home, bundle_id="c" * 64)  # promoted; the loop still trades b until the next session
    refused = "champion run-a's bundle ... failed verification: ...; not traded"
    beat(home, datetime.now(UTC), alert=refused)
    rc, shown = cli_status(home, capsys)
    assert rc == 1 and shown["loop"] == "failing" and shown["switch_pending"] is True
    assert any("not traded" in p for p in shown["problems"])
    (home / "paper" / "heartbeat.json").write_text("{not json")
    rc, shown = cli_status(home, capsys)
    assert rc == 1 and "heartbeat.json is unreadable (corrupt: not valid JSON" in shown["problems"][0]
    assert "the paper loop rewrites it each cycle" in shown["problems"][0]
    (home / "paper" / "heartbeat.json").write_text(json.dumps({"schema_version": 5, "time": "x"}))
    rc, shown = cli_status(home, capsys)
    assert (
        rc == 1
        and "heartbeat.json is unreadable (schema version 5 is newer than this podracer reads"
        in shown["problems"][0]
    )


def test_status_shows_the_schedule_that_schedule_print_recorded(tmp_path, capsys):
    home = tmp_path / "home"
    argv = ["--home", str(home), "schedule", "print", "--format", "systemd", "--cron", "30 3 * * 1-5"]
    assert main([*argv, "--tz", "Europe/London"]) == 0
    assert "OnCalendar=Mon..Fri *-*-* 03:30:00 Europe/London" in capsys.readouterr().out
    recorded = read_schedule(home)
    assert (recorded.cron, recorded.tz, recorded.format, recorded.config) == (
        "30 3 * * 1-5",
        "Europe/London",
        "systemd",
        None,
    )
    # gather_status (also the dashboard's Nightly status box): the recorded schedule's next fire time
    state = gather_status(home, now=OPEN_NOW)
    assert state.next_retrain == "2024-01-05T03:30:00+00:00" and state.warnings == []
    assert (
        state.schedule["source"] == "recorded"
        and state.schedule["command"] == "schedule print --format systemd"
    )
    rc, shown = cli_status(home, capsys)
    assert (
        rc == 0 and shown["schedule"]["cron"] == "30 3 * * 1-5" and shown["schedule"]["tz"] == "Europe/London"
    )
    assert main(["--home", str(home), "status"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("next retrain"))
    day = datetime.fromisoformat(recorded.written_at).astimezone(ZoneInfo("Europe/London")).date()
    assert line.endswith(
        f"03:30 Europe/London (cron '30 3 * * 1-5', schedule from schedule print --format systemd, {day})"
    )
    # a later print replaces the record: the one printed last is the one about to be installed
    assert main(["--home", str(home), "schedule", "print", "--format", "crontab"]) == 0
    capsys.readouterr()
    state = gather_status(home, now=OPEN_NOW)
    assert state.schedule["command"] == "schedule print --format crontab"
    assert state.next_retrain == "2024-01-05T02:00:00-05:00"


def test_cron_and_tz_override_the_recorded_schedule(tmp_path, capsys):
    home = tmp_path / "home"
    record_schedule(home, cron="30 3 * * 1-5", tz="Europe/London", config=None, fmt="crontab")
    state = gather_status(home, now=OPEN_NOW, cron="0 4 * * *")
    assert state.schedule == {
        "cron": "0 4 * * *",
        "tz": "America/New_York",
        "source": "options",
        "described": "from --cron/--tz",
    }
    assert state.next_retrain == "2024-01-05T04:00:00-05:00"  # the --tz default, not the record's
    assert gather_status(home, now=OPEN_NOW, tz="Asia/Tokyo").next_retrain == "2024-01-05T02:00:00+09:00"
    assert main(["--home", str(home), "status", "--cron", "0 4 * * *", "--tz", "UTC"]) == 0
    out = capsys.readouterr().out
    assert "(cron '0 4 * * *', from --cron/--tz)" in out and "Europe/London" not in out


def test_no_recorded_schedule_says_so(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    assert gather_status(home, now=OPEN_NOW).schedule["source"] == "default"
    assert main(["--home", str(home), "status"]) == 0
    assert "(cron '0 2 * * 1-5', default schedule: none recorded)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        '{"cron": "61 2 * * *", "tz": "UTC", "format": "crontab", "written_at": "2024-01-01T00:00:00+00:00"}',
        '{"cron": "0 3 * * *", "tz": "Mars/Olympus", "format": "crontab", "written_at": "2024-01-01T00:00:00"}',
        '{"cron": "0 3 * * *", "tz": "UTC", "format": "launchd", "written_at": "2024-01-01T00:00:00+00:00"}',
        '{"cron": "0 3 * * *", "tz": "UTC", "format": "crontab"}',
        "",
    ],
    ids=["not-json", "not-an-object", "bad-cron", "bad-tz", "bad-format", "no-time", "empty"],
)
def test_a_malformed_schedule_record_is_a_warning_and_the_default(tmp_path, capsys, text):
    home = tmp_path / "home"
    champion(home)
    schedule_path(home).write_text(text)
    state = gather_status(home, now=OPEN_NOW)
    assert state.healthy and state.schedule["source"] == "default"
    assert state.next_retrain == "2024-01-05T02:00:00-05:00"
    assert len(state.warnings) == 1 and "schedule.json is unreadable" in state.warnings[0]
    assert "\n" not in state.warnings[0]
    rc, shown = cli_status(home, capsys)
    assert rc == 0 and shown["warnings"] == state.warnings and shown["champion"]["run_id"] == "run-a"
    assert main(["--home", str(home), "status"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [x.split()[0] for x in lines] == [
        "champion", "last", "next", "paper", "kill", "gone", "today's", "warning", "healthy",
    ]  # fmt: skip
    assert "default schedule: the recorded one is unreadable" in lines[2]
    assert "Traceback" not in captured.out + captured.err


def test_status_loads_no_torch(tmp_path):
    """`podracer status` is what a watchdog runs every few minutes: no torch, no onnxruntime."""
    import subprocess
    import sys

    code = (
        "import sys; from app.cli import main; rc = main(['--home', sys.argv[1], 'status', '--json']); "
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules), rc)"
    )
    root = Path(__file__).resolve().parents[1]
    record_schedule(tmp_path, cron="0 3 * * 1-5", tz="UTC", config=None, fmt="systemd")  # read, too
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[] 0", out.stdout + out.stderr


def test_status_help_loads_no_torch():
    import subprocess
    import sys

    code = (
        "import contextlib, io, sys; from app.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out: rc = main(['status', '--help'])\n"
        "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules), rc, 'recorded' in out.getvalue())"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[] 0 True", out.stdout + out.stderr
