"""One writer at a time per bar store (data.lock.store_lock): two fetches into one home keep every
bar, a writer waits for another with a progress line, and exits 75 naming it when it waits too long.
Loopback only (tests/alpaca_fake.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from data.lock import LockBusyError, ProcessLock, store_lock, store_lock_path
from data.sources.chunks import FetchManifest
from data.sources.stream import fetch_to_store
from data.store import BarStore
from tests.alpaca_fake import FakeAlpaca, minute_bars, point_at

FIRST = ("2024-01-02", "2024-01-05")
SECOND = ("2024-01-08", "2024-01-12")


@pytest.fixture
def writer_fake(monkeypatch):
    bars = minute_bars(["AAPL"], "2024-01-02", "2024-01-13", missing=0.05)
    with FakeAlpaca(bars=bars) as server:
        point_at(server, monkeypatch, trading=False)
        yield server


def _stored_minutes(home: Path) -> set[pd.Timestamp]:
    frame = BarStore(home).read("1m", ["AAPL"])["AAPL"]
    return set(frame.loc[~frame["filled"], "timestamp"])


def _served(server: FakeAlpaca) -> set[pd.Timestamp]:
    return set(server.bars["timestamp"])


def test_a_writer_that_read_a_month_file_keeps_the_other_writers_bars(writer_fake, tmp_path, monkeypatch):
    """The lost update: fetch A reads January (empty), fetch B writes Jan 8-12, A renames its merge
    over it. Under the store lock B's write waits for A's, then merges A's bars in."""
    home = tmp_path / "home"
    real_merge = BarStore._merge
    a_merged, b_done = threading.Event(), threading.Event()

    def slow_merge(self, *args, **kwargs):  # noqa: ANN001, ANN202
        merged = real_merge(self, *args, **kwargs)
        if threading.current_thread().name == "fetch-a":
            a_merged.set()
            b_done.wait(timeout=1.5)  # the old store: B writes in this gap; a locked one: B waits
        return merged

    monkeypatch.setattr(BarStore, "_merge", slow_merge)
    errors: list[BaseException] = []

    def run(name: str, span: tuple[str, str], after: threading.Event | None) -> None:
        try:
            if after is not None:
                assert after.wait(timeout=30)
            fetch_to_store(home, "alpaca", ["AAPL"], *span)
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(err)
        finally:
            if name == "fetch-b":
                b_done.set()

    threads = [
        threading.Thread(target=run, args=("fetch-a", FIRST, None), name="fetch-a"),
        threading.Thread(target=run, args=("fetch-b", SECOND, a_merged), name="fetch-b"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert _stored_minutes(home) == _served(writer_fake)
    done = FetchManifest(home).completed("alpaca/iex", "1m")
    assert {(s, e) for _, s, e in done} == {("2024-01-02", "2024-01-06"), ("2024-01-08", "2024-01-13")}


def test_two_concurrent_fetch_commands_store_every_requested_bar(writer_fake, tmp_path):
    """The CLI repro: two `podracer data fetch` processes of AAPL into one home at once."""
    home = tmp_path / "home"
    writer_fake.fail("GET", "/v2/stocks/bars", kind="delay", delay=0.3, times=100)  # both in flight together
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def command(span: tuple[str, str]) -> list[str]:
        return [sys.executable, "-m", "app.cli", "--home", str(home), "data", "fetch", "--source", "alpaca",
                "--tickers", "AAPL", "--start", span[0], "--end", span[1], "--quiet"]  # fmt: skip

    procs = [subprocess.Popen(command(s), env=env, stderr=subprocess.PIPE) for s in (FIRST, SECOND)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    assert _stored_minutes(home) == _served(writer_fake)


def test_a_second_writer_waits_with_a_progress_line_then_exits_75_naming_the_holder(tmp_path, caplog):
    home = tmp_path / "home"
    holder = ProcessLock(store_lock_path(home), command="podracer data fetch").acquire()
    try:
        caplog.set_level(logging.WARNING, logger="data.lock")
        busy = pytest.raises(LockBusyError, match=f"podracer data fetch held it .*pid {os.getpid()}")
        with busy as info, store_lock(home, command="podracer data import", wait_s=2.3):
            pass
        assert info.value.exit_code == 75
        assert any("waiting 2 s for the bar store: podracer data fetch" in r.message for r in caplog.records)
    finally:
        holder.release()
    with store_lock(home, wait_s=0.0), store_lock(home, wait_s=0.0):  # free again, and re-entrant
        assert BarStore(home).root is not None
