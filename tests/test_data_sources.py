"""yfinance (monkeypatched download with hand-built frames) and Alpaca (the real alpaca-py client over
HTTP against a loopback server serving recorded pages). No network."""

from __future__ import annotations

import json
import threading
from datetime import date
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from data.errors import DataError
from data.store import BarStore

FIXTURES = Path(__file__).parent / "fixtures" / "data"


# --- yfinance --------------------------------------------------------------------------------
def _yf_intraday(tickers, start, end, interval="1m"):
    """A frame shaped like yfinance.download(group_by="ticker"): columns (Ticker, Price), index in New York."""
    index = pd.date_range(
        f"{start} 09:30", f"{start} 09:34", freq="1min", tz="America/New_York", name="Datetime"
    )
    columns = pd.MultiIndex.from_product(
        [tickers, ["Open", "High", "Low", "Close", "Volume"]], names=["Ticker", "Price"]
    )
    data = np.tile([10.0, 10.5, 9.5, 10.2, 100.0], (len(index), len(tickers)))
    frame = pd.DataFrame(data, index=index, columns=columns)
    if len(tickers) > 1:
        frame.iloc[2, 5:10] = np.nan  # second ticker has no bar at 09:32 (yfinance leaves NaN)
    return frame


@pytest.fixture
def fake_download(monkeypatch):
    import yfinance

    calls = []

    def download(tickers, start=None, end=None, interval="1d", **kwargs):
        calls.append({"tickers": list(tickers), "start": start, "end": end, "interval": interval, **kwargs})
        if interval == "1d":
            index = pd.DatetimeIndex(["2024-01-02", "2024-01-03", "2024-01-04"], name="Date")
            columns = pd.MultiIndex.from_product([tickers, ["Open", "High", "Low", "Close", "Volume"]])
            return pd.DataFrame(
                np.tile([10.0, 11.0, 9.0, 10.5, 1e6], (3, len(tickers))), index=index, columns=columns
            )
        return _yf_intraday(list(tickers), start, end, interval)

    class Ticker:  # no splits or dividends (the streaming fetch asks for them per ticker)
        def __init__(self, symbol):
            self.splits = self.dividends = pd.Series([], dtype=float)

    monkeypatch.setattr(yfinance, "download", download)
    monkeypatch.setattr(yfinance, "Ticker", Ticker)
    return calls


def test_yfinance_intraday_is_chunked_and_tidied(fake_download, tmp_path):
    from data.sources.stream import fetch_to_store
    from data.sources.yfinance import fetch_chunk

    report = fetch_to_store(
        tmp_path, "yfinance", ["aapl", "msft"], "2024-01-02", "2024-01-19", "1m", today=date(2024, 1, 25)
    )
    # 18 calendar days in chunks of at most 7 (Yahoo's 1m request limit), end exclusive; Yahoo's Close
    # (auto_adjust off): the store keeps raw bars and adjusts on load.
    windows = [(c["start"], c["end"]) for c in fake_download]
    assert windows == [
        ("2024-01-02", "2024-01-09"),
        ("2024-01-09", "2024-01-16"),
        ("2024-01-16", "2024-01-20"),
    ]
    assert all(
        c["tickers"] == ["AAPL", "MSFT"] and not c["auto_adjust"] and c["interval"] == "1m"
        for c in fake_download
    )
    assert report.bars == {"AAPL": 3 * 5, "MSFT": 3 * 4}  # NaN rows dropped
    bars = fetch_chunk(["AAPL", "MSFT"], date(2024, 1, 2), date(2024, 1, 9), "1m")
    assert list(bars.columns) == ["timestamp", "ticker", "open", "high", "low", "close", "volume"]
    first = bars[bars.ticker == "AAPL"].timestamp.iloc[0]
    assert first == pd.Timestamp("2024-01-02T14:30:00Z")  # 09:30 New York -> UTC
    assert (bars.ticker == "AAPL").sum() == 5 and (bars.ticker == "MSFT").sum() == 4


def test_yfinance_daily_gets_session_dates(fake_download, tmp_path):
    from data.sources.stream import fetch_to_store
    from data.sources.yfinance import fetch_chunk

    report = fetch_to_store(tmp_path, "yfinance", ["SPY"], "2024-01-02", "2024-01-04", "1d")
    assert len(fake_download) == 1 and fake_download[0]["end"] == "2024-01-05"
    assert report.bars == {"SPY": 3}
    bars = fetch_chunk(["SPY"], date(2024, 1, 2), date(2024, 1, 5), "1d")
    assert bars.timestamp.tolist() == [
        pd.Timestamp(d, tz="UTC") for d in ("2024-01-02", "2024-01-03", "2024-01-04")
    ]


def test_yfinance_refuses_old_intraday_and_reports_empty(fake_download, monkeypatch, tmp_path):
    from data.sources.stream import fetch_to_store

    with pytest.raises(DataError, match="only for the last 29 days"):
        fetch_to_store(
            tmp_path, "yfinance", ["SPY"], "2020-01-02", "2020-01-03", "1m", today=date(2024, 1, 25)
        )
    assert fake_download == []  # refused before any request
    import yfinance

    monkeypatch.setattr(yfinance, "download", lambda *a, **k: pd.DataFrame())
    empty = fetch_to_store(tmp_path, "yfinance", ["SPY"], "2024-01-02", "2024-01-04", "1d")
    assert empty.chunks_fetched == 1 and empty.bars_fetched == 0 and empty.bars == {}

    def broken(*a, **k):
        raise ConnectionError("Failed to perform, curl: (6) Could not resolve host\nmore")

    monkeypatch.setattr(yfinance, "download", broken)
    with pytest.raises(DataError, match=r"^yfinance: download failed: Failed to perform.*host$"):
        fetch_to_store(tmp_path / "other", "yfinance", ["SPY"], "2024-01-02", "2024-01-04", "1d")


def test_fetch_cli_with_yfinance_stores_bars(fake_download, tmp_path, capsys):
    home = tmp_path / "home"
    rc = main(
        [
            "--home",
            str(home),
            "data",
            "fetch",
            "--source",
            "yfinance",
            "--tickers",
            "SPY,QQQ",
            "--start",
            "2024-01-02",
            "--end",
            "2024-01-04",
            "--interval",
            "1d",
            "--json",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["tickers"] == ["QQQ", "SPY"] and report["bars"] == {"QQQ": 3, "SPY": 3}
    frame = BarStore(home).read("1d", ["SPY"])["SPY"]
    # daily bars sit at each session's open (14:30 UTC in January)
    assert frame.timestamp.tolist()[0] == pd.Timestamp("2024-01-02T14:30:00Z")


# --- alpaca ----------------------------------------------------------------------------------
class _AlpacaHandler(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_GET(self):  # noqa: N802 - http.server API
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        type(self).requests.append(
            {
                "path": url.path,
                "query": query,
                "key": self.headers.get("APCA-API-KEY-ID"),
                "secret": self.headers.get("APCA-API-SECRET-KEY"),
            }
        )
        if url.path == "/v1/corporate-actions":  # none in these days
            body = json.dumps({"corporate_actions": {}, "next_page_token": None})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())
            return
        if url.path != "/v2/stocks/bars":
            self.send_response(404)
            self.end_headers()
            return
        if query.get("symbols") == "DENIED":
            body = json.dumps(
                {"code": 40310000, "message": "subscription does not permit querying recent SIP data"}
            )
            self.send_response(403)
        else:
            page = "alpaca_bars_page2.json" if query.get("page_token") else "alpaca_bars_page1.json"
            body = (FIXTURES / page).read_text()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture
def alpaca_server(monkeypatch):
    _AlpacaHandler.requests = []
    server = HTTPServer(("127.0.0.1", 0), _AlpacaHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("APCA_API_KEY_ID", "test-key")
    monkeypatch.setenv("APCA_API_SECRET_KEY", "test-secret")
    monkeypatch.setenv("APCA_API_DATA_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("APCA_RETRY_MAX", "0")
    yield _AlpacaHandler.requests
    server.shutdown()
    server.server_close()


def test_alpaca_follows_pagination_with_the_real_client(alpaca_server):
    from data.sources import alpaca

    client = alpaca.quiet_client(alpaca.make_client())
    bars = alpaca.fetch_chunk(client, ["AAPL", "MSFT"], date(2024, 1, 3), date(2024, 1, 4), "1m")
    assert len(alpaca_server) == 2  # two pages
    first, second = alpaca_server
    assert (
        first["path"] == "/v2/stocks/bars" and first["key"] == "test-key" and first["secret"] == "test-secret"
    )
    assert first["query"]["symbols"] == "AAPL,MSFT" and first["query"]["timeframe"] == "1Min"
    assert first["query"]["adjustment"] == "raw" and first["query"]["feed"] == "iex"
    assert first["query"]["start"].startswith("2024-01-03T05:00:00")  # midnight New York in UTC
    assert (
        "page_token" not in first["query"]
        and second["query"]["page_token"] == "QUFQTHwyMDI0LTAxLTAzVDE0OjMzOjAwWg=="
    )
    assert bars.groupby("ticker").size().to_dict() == {"AAPL": 5, "MSFT": 4}
    aapl = bars[bars.ticker == "AAPL"]
    assert aapl.timestamp.iloc[0] == pd.Timestamp("2024-01-03T14:30:00Z") and aapl.open.iloc[0] == 184.0
    assert aapl.volume.tolist() == [1000, 1010, 1020, 1000, 1010]


def test_fetch_cli_with_alpaca_fills_the_gap(alpaca_server, tmp_path, capsys):
    home = tmp_path / "home"
    rc = main(
        [
            "--home",
            str(home),
            "data",
            "fetch",
            "--source",
            "alpaca",
            "--tickers",
            "AAPL",
            "--tickers",
            "MSFT",
            "--start",
            "2024-01-03",
            "--end",
            "2024-01-03",
            "--json",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["bars"] == {"AAPL": 5, "MSFT": 4}
    aapl = BarStore(home).read("1m", ["AAPL"])["AAPL"]
    gap = aapl[aapl.timestamp == pd.Timestamp("2024-01-03T14:33:00Z")].iloc[0]
    assert (
        gap.filled and gap.volume == 0 and gap.close == pytest.approx(184.0 + 0.02 + 0.02)
    )  # previous close
    assert report["gaps_filled"]["AAPL"] == 390 - 5


def test_alpaca_errors_are_one_line(alpaca_server, monkeypatch, tmp_path, capsys):
    from data.sources.stream import fetch_to_store

    with pytest.raises(DataError, match="^alpaca: the data API refused the request: .*SIP"):
        fetch_to_store(tmp_path / "denied", "alpaca", ["DENIED"], "2024-01-03", "2024-01-03", "1m")
    monkeypatch.delenv("APCA_API_SECRET_KEY")
    before = sorted(p for p in tmp_path.rglob("*"))
    rc = main(
        [
            "--home",
            str(tmp_path / "home"),
            "data",
            "fetch",
            "--source",
            "alpaca",
            "--tickers",
            "AAPL",
            "--start",
            "2024-01-03",
            "--end",
            "2024-01-03",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "APCA_API_SECRET_KEY" in err and len(err.strip().splitlines()) == 1
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_unknown_source_is_one_line(tmp_path, capsys):
    rc = main(
        [
            "--home",
            str(tmp_path),
            "data",
            "fetch",
            "--source",
            "ftp",
            "--tickers",
            "A",
            "--start",
            "2024-01-02",
            "--end",
            "2024-01-03",
        ]
    )
    assert rc == 2 and "unknown source" in capsys.readouterr().err


# --- the ticker rule before any request ----------------------------------------------------------------
@pytest.mark.parametrize("ticker", ["../../../../x", "a/b/c", "", "ABCDEFGHIJKLMNOP", "BRK B"])
def test_sources_refuse_bad_tickers_before_any_request(
    ticker, fake_download, alpaca_server, tmp_path, capsys
):
    from data.sources.stream import fetch_to_store

    for source in ("yfinance", "alpaca"):
        with pytest.raises(DataError, match=f"^{source}: ticker "):
            fetch_to_store(tmp_path / source, source, ["SPY", ticker], "2024-01-03", "2024-01-03", "1d")
        assert not (tmp_path / source).exists()  # no store, no manifest
    assert fake_download == [] and alpaca_server == []
    if not ticker:
        return  # `--tickers SPY,` just has no second ticker
    home = tmp_path / "home"
    rc = main(["--home", str(home), "data", "fetch", "--source", "alpaca", "--tickers", f"SPY,{ticker}",
               "--start", "2024-01-03", "--end", "2024-01-03"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert alpaca_server == [] and not home.exists()


def test_sources_query_the_normalized_spelling_once(fake_download, alpaca_server, tmp_path):
    from data.sources.stream import fetch_to_store

    fetch_to_store(tmp_path / "yf", "yfinance", ["brk/b", "BRK.B", "spy"], "2024-01-02", "2024-01-04", "1d")
    assert fake_download[0]["tickers"] == ["BRK.B", "SPY"]
    fetch_to_store(tmp_path / "alpaca", "alpaca", ["brk/b", "BRK.B"], "2024-01-03", "2024-01-03", "1m")
    assert alpaca_server[0]["query"]["symbols"] == "BRK.B"


def test_yfinance_streaming_fetch_chunks_by_week_and_month(fake_download, tmp_path):
    from data.sources.stream import fetch_to_store

    report = fetch_to_store(
        tmp_path, "yfinance", ["aapl", "msft"], "2024-01-25", "2024-02-06", "1m", today=date(2024, 2, 10)
    )
    # 1m: at most 7 days per request (Yahoo allows 8) and never across a month (one store file per chunk)
    assert [(c["start"], c["end"]) for c in fake_download] == [
        ("2024-01-25", "2024-02-01"),
        ("2024-02-01", "2024-02-07"),
    ]
    assert report.chunks_fetched == 2 and report.bars == {"AAPL": 10, "MSFT": 8}
    again = fetch_to_store(tmp_path, "yfinance", ["AAPL", "MSFT"], "2024-01-25", "2024-02-06", "1m",
                           today=date(2024, 2, 10))  # fmt: skip
    assert again.chunks_skipped == 2 and len(fake_download) == 2
    with pytest.raises(DataError, match="only for the last 29 days"):
        fetch_to_store(
            tmp_path, "yfinance", ["AAPL"], "2023-12-01", "2023-12-05", "1m", today=date(2024, 2, 10)
        )
