"""Every network call has a deadline (a server that accepts and never answers), and secrets never
leave memory: keys checked and the data URL allow-listed in the data path as in the broker's, and a
key planted in each failure path never reaches the registry, the journal, a record, a log or
``podracer status``. Loopback only (tests/alpaca_fake.py)."""

from __future__ import annotations

import threading
import time
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from app import cli
from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy
from app.paper.heartbeat import Heartbeat, heartbeat_path, write_heartbeat
from app.paper.journal import Journal, journal_path
from app.workflows.status import gather_status
from data.errors import BrokerError, DataError
from data.scrub import scrub
from data.sources import yfinance as yf_source
from data.sources.access import DATA_TIMEOUT_S
from data.sources.retry import FetchFailed, FetchRetryPolicy
from data.sources.stream import fetch_to_store
from tests.alpaca_fake import KEY_ID, SECRET, FakeAlpaca, HungServer, minute_bars

# A secret as a copied .env line leaves it: a newline inside (requests' InvalidHeader quotes it).
NEWLINE_SECRET = "sEcReTpArTone-0123456789\nsEcReTpArTtwo-9876543210"


def _within(seconds: float, fn) -> tuple[BaseException | None, float]:  # noqa: ANN001
    """Run ``fn`` in a thread; (what it raised, seconds taken). A call still running after
    ``seconds`` fails the test (it would hang without a deadline)."""
    box: dict[str, BaseException | None] = {"err": None}

    def run() -> None:
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["err"] = err

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s: no deadline"
    return box["err"], time.monotonic() - started


# --- deadlines ------------------------------------------------------------------------------------------
def test_a_fetch_from_a_server_that_never_answers_fails_within_its_deadline(tmp_path, monkeypatch):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    with HungServer() as hung:
        monkeypatch.setenv("APCA_API_DATA_URL", hung.url)
        policy = FetchRetryPolicy(timeout_s=0.2, backoff_s=0.0, attempts=3)
        err, took = _within(
            20,
            lambda: fetch_to_store(
                tmp_path / "h", "alpaca", ["AAPL"], "2024-01-02", "2024-01-05", policy=policy
            ),
        )
        assert hung.accepted >= 1
    assert isinstance(err, FetchFailed) and "cannot reach the data API" in str(err), err
    assert "(after 3 tries)" in str(err) and took < 10


def test_the_broker_gives_up_on_a_server_that_never_answers(monkeypatch):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    with HungServer() as hung:
        retry = BrokerRetryPolicy(timeout=0.2, attempts=2, base_delay=0.0, jitter=0.0)
        broker = AlpacaBroker(base_url=hung.url, data_url=hung.url, retry=retry, sleep=lambda s: None)
        err, took = _within(20, broker.account)
    assert isinstance(err, BrokerError) and took < 10


def test_yfinance_downloads_carry_the_data_deadline(monkeypatch):
    import yfinance

    asked: dict = {}

    def download(**kwargs):  # noqa: ANN003, ANN202
        asked.update(kwargs)
        return pd.DataFrame()

    monkeypatch.setattr(yfinance, "download", download)
    yf_source.fetch_chunk(["AAPL"], date(2024, 1, 2), date(2024, 1, 5), "1d")
    assert asked["timeout"] == DATA_TIMEOUT_S


# --- the data path checks keys and URLs as the broker does --------------------------------------------------
def test_the_data_path_refuses_a_key_with_a_newline_and_a_foreign_data_url(tmp_path, monkeypatch):
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", NEWLINE_SECRET)
    monkeypatch.setenv("APCA_API_DATA_URL", "http://127.0.0.1:9")
    with pytest.raises(DataError, match="APCA_API_SECRET_KEY contains whitespace or control") as info:
        fetch_to_store(tmp_path / "h", "alpaca", ["AAPL"], "2024-01-02", "2024-01-05")
    assert "sEcReT" not in str(info.value)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    monkeypatch.setenv("APCA_API_DATA_URL", "https://data.example.com")
    with pytest.raises(DataError, match="refusing market-data URL https://data.example.com"):
        fetch_to_store(tmp_path / "h", "alpaca", ["AAPL"], "2024-01-02", "2024-01-05")


def test_the_scrubber_masks_a_secret_as_given_escaped_and_in_pieces(monkeypatch):
    monkeypatch.setenv("APCA_API_SECRET_KEY", NEWLINE_SECRET)
    text = f"InvalidHeader: {NEWLINE_SECRET!r} / {NEWLINE_SECRET} / half: sEcReTpArTtwo-9876543210"
    assert "sEcReT" not in scrub(text) and scrub(text).count("***") >= 3


# --- a planted key never leaves memory --------------------------------------------------------------------
def _leaks(home: Path, *texts: str) -> list[str]:
    """Where a piece of the planted secrets appears: any file under ``home`` or a given text."""
    pieces = [p for s in (SECRET, NEWLINE_SECRET) for p in s.split("\n")] + [repr(NEWLINE_SECRET)[1:-1]]
    found = [
        str(f) for f in home.rglob("*") if f.is_file() and any(p.encode() in f.read_bytes() for p in pieces)
    ]
    return found + [f"text {i}" for i, t in enumerate(texts) if any(p in t for p in pieces)]


@pytest.fixture
def retrain_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    config = home / "nightly.toml"
    config.write_text('[data]\nsource = "stored"\ntickers = ["AAA"]\n\n[nightly]\nupdate = "alpaca"\n')
    return home, config


@pytest.mark.parametrize("plant", ["newline_secret", "echoed_by_the_server"])
def test_a_planted_key_reaches_no_registry_log_or_status(plant, retrain_home, monkeypatch, capsys):
    home, config = retrain_home
    bars = minute_bars(["AAA"], "2024-01-02", "2024-01-06")
    with FakeAlpaca(bars=bars) as fake:
        monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
        monkeypatch.setenv("APCA_API_DATA_URL", fake.url)
        if plant == "newline_secret":
            monkeypatch.setenv("APCA_API_SECRET_KEY", NEWLINE_SECRET)
        else:
            monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
            fake.fail("GET", "/v2/stocks/bars", kind="echo_key", times=10)
        rc = cli.main(["--home", str(home), "-v", "retrain", "--config", str(config)])
    run_err = capsys.readouterr().err
    assert rc == 1 and "step update_data" in run_err, run_err
    if plant == "echoed_by_the_server":
        assert "forbidden: key ***" in run_err  # the reply is quoted, its key masked
    status_rc = cli.main(["--home", str(home), "status"])
    status_out = capsys.readouterr()
    assert status_rc == 1 and "last retrain failed" in status_out.out
    assert cli.main(["--home", str(home), "status", "--json"]) == 1
    json_out = capsys.readouterr().out
    assert _leaks(home, run_err, status_out.out, status_out.err, json_out) == []


def test_a_planted_key_reaches_no_heartbeat_or_journal(tmp_path, monkeypatch):
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    home = tmp_path / "home"
    beat = Heartbeat(time="2024-01-03T15:00:00+00:00", status="error", mode="bundle", interval_s=60.0,
                     next_due="2024-01-03T15:01:00+00:00", alert=f"broker said {SECRET}")  # fmt: skip
    write_heartbeat(heartbeat_path(home), beat.model_copy(update={"messages": [f"again {SECRET}"]}))
    journal_path(home).parent.mkdir(parents=True, exist_ok=True)
    with Journal(journal_path(home)) as journal:
        journal.event("error", f"cycle failed: {SECRET}", "error")
    state = gather_status(home)
    assert _leaks(home, str(state.to_dict())) == []
