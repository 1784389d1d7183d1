"""Streaming, resumable fetch (data.sources.stream) against the local Alpaca stand-in, the universe
by date, and the fetch CLI's --universe / --tickers. No network: loopback only."""

from __future__ import annotations

import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pandas as pd
import pytest
import torch

from app.cli import main
from data.errors import DataError
from data.sources.chunks import plan_chunks, windows
from data.sources.retry import FetchFailed, FetchRetryPolicy, retry_after_seconds
from data.sources.stream import fetch_to_store
from data.store import BarStore
from data.universe import changes, members, resolve_tickers
from tests.alpaca_fake import FakeAlpaca, minute_bars, point_at

TICKERS = ["AAA", "BBB", "CCC"]
START, END = "2024-01-02", "2024-02-29"  # two months: with batch 2, four chunks


def _bars_requests(fake: FakeAlpaca) -> int:
    return sum(1 for _, path in fake.requests if path == "/v2/stocks/bars")


def _store_bytes(home: Path) -> dict[str, bytes]:
    root = home / "data" / "bars"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


@pytest.fixture
def fake(monkeypatch):
    bars = minute_bars(TICKERS, "2024-01-02", "2024-03-01", missing=0.1)
    with FakeAlpaca(bars=bars, page_size=100_000) as server:
        point_at(server, monkeypatch, trading=False)
        yield server


@pytest.fixture
def reference(fake, tmp_path):
    """The store after one uninterrupted fetch (bytes per file)."""
    home = tmp_path / "reference"
    report = fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2)
    assert report.chunks_fetched == 4 and report.chunks_skipped == 0
    fake.requests.clear()
    return _store_bytes(home)


def test_chunks_never_cross_a_month_nor_the_request_limit():
    assert windows(date(2024, 1, 30), date(2024, 2, 10), 7) == [
        (date(2024, 1, 30), date(2024, 2, 1)),
        (date(2024, 2, 1), date(2024, 2, 8)),
        (date(2024, 2, 8), date(2024, 2, 11)),
    ]
    chunks = plan_chunks(["A", "B", "C"], date(2024, 1, 2), date(2024, 2, 29), batch=2)
    assert [(c.tickers, c.start.month) for c in chunks] == [
        (("A", "B"), 1), (("C",), 1), (("A", "B"), 2), (("C",), 2)
    ]  # fmt: skip


def test_killed_after_two_chunks_resumes_with_only_the_missing_chunks(fake, reference, tmp_path, monkeypatch):
    home = tmp_path / "cut"
    real_write = BarStore.write
    calls = {"n": 0}

    def dying_write(self, *args, **kwargs):
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the process dies between two chunks' writes
        calls["n"] += 1
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(BarStore, "write", dying_write)
    with pytest.raises(KeyboardInterrupt):
        fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2)
    monkeypatch.setattr(BarStore, "write", real_write)
    fake.requests.clear()
    report = fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2)
    # chunks 1-2 are recorded; chunk 3 was fetched but never written, so it is asked again
    assert (report.chunks_skipped, report.chunks_fetched, report.chunks_failed) == (2, 2, 0)
    february = fake.bars[fake.bars["timestamp"] >= pd.Timestamp("2024-02-01T05:00Z")]
    assert report.bars_fetched == len(february)  # only the two February chunks were asked for
    assert _store_bytes(home) == reference
    asked = _bars_requests(fake)
    again = fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2)
    assert again.chunks_skipped == 4 and _bars_requests(fake) == asked  # nothing more asked


def test_server_errors_after_retries_stop_with_the_chunk_to_resume_from(fake, reference, tmp_path, capsys):
    home = tmp_path / "cut"
    fake.fail("GET", "/v2/stocks/bars", status=503, times=4)
    args = ["--home", str(home), "data", "fetch", "--source", "alpaca", "--tickers", ",".join(TICKERS),
            "--start", START, "--end", END, "--batch", "2", "--quiet"]  # fmt: skip
    # the first chunk's page fails 4 times in a row: the policy's 4 tries are spent
    policy = FetchRetryPolicy(backoff_s=0.0)
    with pytest.raises(
        FetchFailed, match=r"HTTP 503 .*stopped at chunk AAA..BBB \(2 ticker\(s\)\) 2024-01-02"
    ):
        fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2, policy=policy)
    assert not _store_bytes(home) if (home / "data" / "bars").exists() else True
    rc = main([*args, "--json"])
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["chunks"] == {"total": 4, "fetched": 4, "skipped": 0, "failed": 0}
    assert _store_bytes(home) == reference


def test_failure_is_one_line_in_the_cli(fake, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        "app.workflows.data.FetchRetryPolicy", functools.partial(FetchRetryPolicy, backoff_s=0.0)
    )
    fake.fail("GET", "/v2/stocks/bars", kind="drop", times=100)
    rc = main(["--home", str(tmp_path / "h"), "data", "fetch", "--source", "alpaca", "--tickers", "AAA",
               "--start", START, "--end", START, "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert (
        "cannot reach the data API" in err and "rerun the same command" in err and "AAA (1 ticker(s))" in err
    )


def test_429_retry_after_is_waited_out_and_dropped_connections_retried(fake, reference, tmp_path):
    fake.fail("GET", "/v2/stocks/bars", status=429, retry_after="0.05", times=2)
    fake.fail("GET", "/v2/stocks/bars", kind="drop", times=1)
    slept: list[float] = []
    policy = FetchRetryPolicy(backoff_s=0.01, sleep=lambda s: (slept.append(s), time.sleep(s)))
    home = tmp_path / "throttled"
    report = fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2, policy=policy)
    assert (
        report.requests_throttled == 2 and slept[:2] == [0.05, 0.05] and report.waited_s == pytest.approx(0.1)
    )
    assert slept[2] == 0.01  # the dropped connection: one backoff
    assert report.chunks_fetched == 4 and _store_bytes(home) == reference


def test_429_beyond_the_wait_budget_names_the_chunk(fake, tmp_path):
    fake.fail("GET", "/v2/stocks/bars", status=429, retry_after="30", times=5)
    policy = FetchRetryPolicy(max_wait_s=10, sleep=lambda s: None)
    with pytest.raises(FetchFailed, match=r"rate limited after waiting 0 s .*chunk AAA..BBB .*resume"):
        fetch_to_store(tmp_path / "h", "alpaca", TICKERS, START, END, batch=2, policy=policy)


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2024, 1, 2, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("7", now=now) == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30.0
    assert retry_after_seconds(None, default=2.0) == 2.0 and retry_after_seconds("soon", default=3.0) == 3.0


def test_pages_follow_next_page_token_with_missing_minutes(fake, reference, tmp_path):
    fake.page_size = 997  # many pages per chunk, cut mid-ticker
    home = tmp_path / "paged"
    report = fetch_to_store(home, "alpaca", TICKERS, START, END, batch=2)
    assert _bars_requests(fake) > 20 and report.bars_fetched == len(fake.bars)
    assert _store_bytes(home) == reference
    aaa = BarStore(home).read("1m", ["AAA"])["AAA"]
    assert aaa["filled"].any() and (aaa.loc[aaa["filled"], "volume"] == 0).all()  # IEX-like holes filled


def test_sigkill_mid_fetch_then_rerun_gives_identical_bytes(fake, reference, tmp_path):
    home = tmp_path / "killed"
    fake.fail("GET", "/v2/stocks/bars", kind="delay", delay=0.25, times=100)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "app.cli", "--home", str(home), "data", "fetch", "--source", "alpaca",
           "--tickers", ",".join(TICKERS), "--start", START, "--end", END, "--batch", "1", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    manifest = home / "data" / "fetch_manifest.sqlite"
    deadline = time.monotonic() + 60
    done = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.exists():
            try:
                with sqlite3.connect(manifest) as conn:
                    done = conn.execute("SELECT COUNT(*) FROM done").fetchone()[0]
            except sqlite3.Error:
                done = 0
            if done >= 2:
                break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 2 <= done < 6
    fake.faults.clear()
    fake.requests.clear()
    report = fetch_to_store(home, "alpaca", TICKERS, START, END, batch=1)
    assert report.chunks_skipped >= 2 and report.chunks_skipped + report.chunks_fetched == 6
    assert _bars_requests(fake) == report.chunks_fetched
    assert _store_bytes(home) == reference


# --- universe by date ---------------------------------------------------------------------------------
def test_members_on_known_dates_from_the_shipped_history():
    # AAL: opt-in 2014-12-22, opt-out 2020-04-20 (the first day out)
    assert "AAL" not in members("2014-12-19") and "AAL" in members("2014-12-22")
    assert "AAL" in members("2020-04-17") and "AAL" not in members("2020-04-20")
    # AKAM left 2009-12-21 and came back 2010-12-20
    assert "AKAM" not in members("2010-06-01") and "AKAM" in members("2011-01-03")
    assert 98 <= len(members("2025-01-02")) <= 104
    moved = changes("2020-04-20", since="2020-04-01")
    assert {"symbol": "AAL", "name": "American Airlines Group", "date": "2020-04-20"} in moved["leaves"]
    assert moved["since"] == "2020-04-01" and "AAL" not in moved["members"]
    year = changes("2015-01-02")  # default window: the year before as-of
    assert year["since"] == "2014-01-02" and any(j["symbol"] == "AAL" for j in year["joins"])
    with pytest.raises(DataError, match="is after"):
        changes("2020-01-02", since="2021-01-01")


def test_resolve_combines_universe_and_tickers():
    names = resolve_tickers("nasdaq100", "2025-01-02", ["spy", "AAPL", "brk/b"])
    assert names[: len(members("2025-01-02"))] == members("2025-01-02")
    assert names[-2:] == ["SPY", "BRK.B"] and names.count("AAPL") == 1
    assert resolve_tickers("", None, ["qqq"]) == ["QQQ"]
    with pytest.raises(DataError, match="unknown universe"):
        resolve_tickers("sp500", "2025-01-02")


def test_universe_cli_json(tmp_path, capsys):
    rc = main(["--home", str(tmp_path), "data", "universe", "--as-of", "2020-04-20", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["as_of"] == "2020-04-20" and out["members"] == members("2020-04-20")
    assert any(leave["symbol"] == "AAL" for leave in out["leaves"])


def test_fetch_cli_universe_plus_tickers(tmp_path, capsys, monkeypatch):
    as_of = "2024-01-02"
    wanted = [*members(as_of), "SPY"]

    def source(symbols, start, end):
        return minute_bars(symbols, start, end, missing=0.5)

    with FakeAlpaca(bar_source=source, page_size=10_000) as server:
        point_at(server, monkeypatch, trading=False)
        rc = main(["--home", str(tmp_path / "h"), "data", "fetch", "--source", "alpaca", "--universe", "nasdaq100",
                   "--tickers", "SPY", "--start", as_of, "--end", as_of, "--batch", "50", "--json"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["tickers"] == sorted(wanted) and report["chunks"]["fetched"] == 3
    assert BarStore(tmp_path / "h").tickers("1m") == sorted(wanted)


def test_stored_market_and_info_use_the_universe(tmp_path, capsys):
    from data.loader import load_market

    home = tmp_path / "h"
    bars = minute_bars(["AAPL", "MSFT", "SPY", "AAL"], "2024-01-02", "2024-01-20", missing=0.05)
    BarStore(home).write(bars, "1m", source="test")
    splits = load_market(
        home=home, source="stored", universe="nasdaq100", as_of="2024-01-02", tickers=["SPY"]
    )
    assert list(splits.full.tickers) == ["AAPL", "MSFT", "SPY"]  # AAL left the index in 2020: not a member
    rc = main(["--home", str(home), "data", "info", "--universe", "nasdaq100", "--json"])
    assert rc == 0
    part = json.loads(capsys.readouterr().out)["universe"]["1m"]
    assert part["as_of"] == "2024-01-01" and part["stored"] == ["AAPL", "MSFT"]
    assert len(part["missing"]) == len(members("2024-01-01")) - 2


def test_stored_market_masks_a_member_after_it_leaves_the_index(tmp_path):
    """Point in time: ANSS left the NASDAQ-100 on 2025-07-17 (shipped history), so with the universe
    it is untradable from that session on (and never listed again there); the named SPY is not
    affected; before the leave, ANSS is tradable exactly where it has real bars."""
    from data.loader import load_market

    home = tmp_path / "h"
    BarStore(home).write(
        minute_bars(["AAPL", "ANSS", "SPY"], "2025-07-07", "2025-07-25", missing=0.0), "1m", source="test"
    )
    market = load_market(
        home=home, source="stored", universe="nasdaq100", as_of="2025-07-07", tickers=["SPY"]
    ).full
    assert list(market.tickers) == ["AAPL", "ANSS", "SPY"]
    day = pd.DatetimeIndex(market.timestamps).tz_localize("UTC").tz_convert("America/New_York").normalize()
    after = torch.as_tensor(day.tz_localize(None) >= pd.Timestamp("2025-07-17"))
    assert after.any() and (~after).any()
    anss, spy = market.tickers.index("ANSS"), market.tickers.index("SPY")
    assert not bool(market.tradable[after, anss].any())
    assert not bool(market.listed[after, anss].any())
    assert bool(market.tradable[~after, anss].all())  # missing=0: every minute real
    assert bool(market.tradable[:, spy].all())
