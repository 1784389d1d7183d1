"""A full disk under the paper loop: its heartbeat and books record cannot be written (ENOSPC). The
loop goes on with no traceback, the last good files stay, one ``disk_full`` problem is raised (status
and the alert hook: one alert) and it clears when the writes succeed again (tests/alpaca_fake.py plays
the broker)."""

from __future__ import annotations

import errno
import os
from datetime import timedelta
from pathlib import Path

import pytest
from test_paper import FAST

from app.alerts import AlertSettings, notify
from app.paper.alpaca_broker import AlpacaBroker
from app.paper.books import record_path
from app.paper.cycle import run_paper
from app.paper.heartbeat import heartbeat_path
from app.paper.journal import Journal, read_journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits
from app.workflows.status import gather_status
from data import atomic


class NoSpaceUnder:
    """``os`` as ``data.atomic`` sees it while ``folder``'s disk is full (None: every folder's): renaming
    a finished temp file over a file there fails with ``code`` (the temp file is removed, the old file
    stays)."""

    def __init__(self, real, folder: Path | None, code: int = errno.ENOSPC) -> None:
        self._real, self.folder, self.code = real, folder, code

    def __getattr__(self, name):
        return getattr(self._real, name)

    def replace(self, src, dst):
        if self.folder is None or Path(dst).parent == self.folder:
            raise OSError(self.code, os.strerror(self.code))
        return self._real.replace(src, dst)


def _loop(env) -> str:
    options = PaperOptions(
        limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None), fill_timeout=0.5, fill_poll=0.01
    )
    with Journal.for_home(env["home"]) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        (result,) = run_paper(
            env["bundle"], broker, journal, options, max_cycles=1, heartbeat=heartbeat_path(env["home"])
        )
    return result.status


def test_a_full_disk_is_one_problem_the_loop_survives_and_it_clears(env, monkeypatch):
    fake, home = env["fake"], env["home"]
    sent: list[tuple[str, str]] = []

    def watch() -> None:  # the operator's timer: status and the hook
        notify(home, gather_status(home).problem_rows(), AlertSettings(command="true"),
               send=lambda p, s: sent.append((p["event"], p["key"])))  # fmt: skip

    assert _loop(env) == "traded"
    beat, books = heartbeat_path(home).read_bytes(), record_path(home).read_bytes()
    watch()
    monkeypatch.setattr(atomic, "os", NoSpaceUnder(os, home / "paper"))
    for _ in range(2):  # two cycles on the full disk
        fake.now += timedelta(minutes=15)
        assert _loop(env) == "traded"  # it traded, no traceback
        watch()
        # the last good files stay, whole; no temp file left behind
        assert heartbeat_path(home).read_bytes() == beat and record_path(home).read_bytes() == books
        assert sorted(p.name for p in (home / "paper").iterdir() if p.name.startswith(".")) == []
    state = gather_status(home)
    assert [p["check"] for p in state.checks] == ["disk_full"]
    assert "cannot write heartbeat.json" in state.problems[0] and "No space left" in state.problems[0]
    assert sent == [("problem", "disk_full")]  # one alert for two cycles
    monkeypatch.setattr(atomic, "os", os)
    fake.now += timedelta(minutes=15)
    assert _loop(env) == "traded"
    watch()
    assert heartbeat_path(home).read_bytes() != beat and gather_status(home).healthy
    assert sent == [("problem", "disk_full"), ("clear", "disk_full")]
    assert read_journal(home)["decisions"]["decision_ts"].nunique() == 4  # every cycle decided


def test_a_full_disk_everywhere_and_other_write_errors(env, monkeypatch):
    home = env["home"]
    assert _loop(env) == "traded"
    beat = heartbeat_path(home).read_bytes()
    # the alert store is on the full disk too: still no traceback, the heartbeat stays (it goes stale)
    monkeypatch.setattr(atomic, "os", NoSpaceUnder(os, None, errno.EDQUOT))
    env["fake"].now += timedelta(minutes=15)
    assert _loop(env) == "traded" and heartbeat_path(home).read_bytes() == beat
    assert "disk_full" not in [p["check"] for p in gather_status(home).checks]  # (paper_stale, in time)
    # an error that is not a full disk is not swallowed
    monkeypatch.setattr(atomic, "os", NoSpaceUnder(os, home / "paper", errno.EACCES))
    env["fake"].now += timedelta(minutes=15)
    with pytest.raises(PermissionError):
        _loop(env)
