"""`podracer status` (+ `--json`): the operating loop in one screen, from the stores' real writers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from app.cli import main
from app.nightly.registry import Champion, Decision, record_decision
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
        Decision(
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
        Decision(decided_at="2024-01-04T07:10:00+00:00", verdict="rejected", reason="below margin", **common),
    )


def cli_status(home: Path, capsys, *args: str) -> tuple[int, dict]:
    rc = main(["--home", str(home), "status", "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_fresh_home(tmp_path, capsys):
    home = tmp_path / "fresh"
    state = gather_status(home, now=OPEN_NOW)
    assert state.healthy and state.champion is None and state.last_decision is None
    assert state.loop == "not started" and state.heartbeat is None and state.today is None
    assert state.next_retrain == "2024-01-05T02:00:00-05:00"  # the default schedule, 02:00 New York
    rc, shown = cli_status(home, capsys)
    assert rc == 0 and shown["loop"] == "not started" and shown["healthy"] is True
    assert main(["--home", str(home), "status"]) == 0
    out = capsys.readouterr().out
    assert "none yet" in out and "not started" in out and "healthy" in out
    assert not home.exists()  # status reads, never creates


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
    assert state.champion["run_id"] == "run-a" and state.champion["bundle_id"] == "b" * 64
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
    assert rc == 1 and "heartbeat.json is unreadable" in shown["problems"][0]


def test_status_loads_no_torch(tmp_path):
    """`podracer status` is what a watchdog runs every few minutes: no torch, no onnxruntime."""
    import subprocess
    import sys

    code = (
        "import sys; from app.cli import main; rc = main(['--home', sys.argv[1], 'status', '--json']); "
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules), rc)"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[] 0", out.stdout + out.stderr
