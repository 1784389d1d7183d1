"""The Parquet store and `podracer data import/info/synth`: values checked against an independent
computation from the raw Lean file and exchange-calendars."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import file_hashes

from app.cli import main
from data.sources.sample import SAMPLE_TICKERS, real_sample_path
from data.store import BarStore

LEAN_MINUTE = real_sample_path()  # the real Lean minute bars shipped in data/resources


def _expected_from_raw(path: Path) -> dict[str, dict[str, int]]:
    """Per ticker: regular-hours sessions, real bars, and grid minutes from each session's first bar
    to its close, computed straight from the raw file and the XNAS schedule."""
    import exchange_calendars as xcals

    raw = pd.read_csv(path)
    ts = pd.to_datetime(raw["timestamp"], utc=True)
    cal = xcals.get_calendar("XNAS", start="2005-01-03")
    out = {}
    for ticker, idx in raw.groupby("ticker").groups.items():
        sessions = bars = rows = 0
        t = ts[idx]
        for day, group in t.groupby(t.dt.tz_convert("America/New_York").dt.date):
            day = pd.Timestamp(day)
            if not cal.is_session(day):
                continue
            open_, close = cal.session_open(day), cal.session_close(day)
            regular = group[(group >= open_) & (group < close)]
            if regular.empty:
                continue
            sessions += 1
            bars += len(regular)
            rows += int((close - regular.min()) / pd.Timedelta(minutes=1))
        out[ticker] = {"sessions": sessions, "bars": bars, "rows": rows, "gaps_filled": rows - bars}
    return out


def test_import_lean_minute_bars_then_info_reports_the_right_values(tmp_path, capsys):
    home = tmp_path / "home"
    assert main(["--home", str(home), "data", "import", str(LEAN_MINUTE)]) == 0
    capsys.readouterr()
    assert main(["--home", str(home), "data", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    part = info["intervals"]["1m"]
    expected = _expected_from_raw(LEAN_MINUTE)
    assert part["tickers"] == sorted(expected) == list(SAMPLE_TICKERS)
    for ticker, exp in expected.items():
        got = part["by_ticker"][ticker]
        assert (got["sessions"], got["rows"], got["gaps_filled"]) == (
            exp["sessions"],
            exp["rows"],
            exp["gaps_filled"],
        ), ticker
    # Hand-checked anchors: the four tickers trade in the same 6 sessions, 2013-10-04 .. 2013-10-11.
    assert {t: part["by_ticker"][t]["sessions"] for t in SAMPLE_TICKERS} == dict.fromkeys(SAMPLE_TICKERS, 6)
    assert part["sessions"] == 6 and (part["start"], part["end"]) == ("2013-10-04", "2013-10-11")
    assert part["rows"] == sum(e["rows"] for e in expected.values())
    assert part["gaps_filled"] == sum(e["gaps_filled"] for e in expected.values())


def test_reimport_is_idempotent_and_overlaps_do_not_duplicate(tmp_path):
    home = tmp_path / "home"
    store = BarStore(home)
    from data.sources.csv import import_files

    first = import_files([LEAN_MINUTE], home)
    assert first.files_written and first.files_unchanged == 0
    snap = file_hashes(home)
    again = import_files([LEAN_MINUTE], home)
    assert again.files_written == [] and file_hashes(home) == snap  # same rows -> same bytes
    # A one-day subset of SPY: already there, so nothing changes either.
    raw = pd.read_csv(LEAN_MINUTE)
    subset = raw[(raw.ticker == "SPY") & raw.timestamp.str.startswith("2013-10-07")]
    sub_path = tmp_path / "spy_day.csv"
    subset.to_csv(sub_path, index=False)
    assert import_files([sub_path], home).files_written == []
    assert file_hashes(home) == snap
    # A corrected bar replaces the old one (no duplicate timestamps).
    fixed = subset.copy()
    row = fixed.index[(pd.to_datetime(fixed.timestamp) == pd.Timestamp("2013-10-07T15:00:00Z"))][0]
    fixed.loc[row, ["open", "high", "low", "close"]] = [170.0, 170.0, 170.0, 170.0]
    fixed.to_csv(sub_path, index=False)
    report = import_files([sub_path], home)
    assert len(report.files_written) == 1
    spy = store.read("1m", ["SPY"])["SPY"]
    assert not spy["timestamp"].duplicated().any()
    assert spy.loc[spy.timestamp == pd.Timestamp("2013-10-07T15:00:00Z"), "close"].item() == 170.0


def test_store_layout_and_month_files(tmp_path):
    from data.sources.csv import import_files

    path = tmp_path / "bars.csv"
    rows = ["timestamp,ticker,open,high,low,close,volume"]
    for day in ("2024-01-31", "2024-02-01"):
        for minute in range(3):
            rows.append(f"{day}T14:{30 + minute}:00Z,abc,1,1,1,1,5")
    path.write_text("\n".join(rows) + "\n")
    report = import_files([path], tmp_path / "home")
    files = sorted(str(Path(p).relative_to(tmp_path / "home")) for p in report.files_written)
    assert files == [
        "data/bars/interval=1m/ticker=ABC/2024-01.parquet",
        "data/bars/interval=1m/ticker=ABC/2024-02.parquet",
    ]
    frame = BarStore(tmp_path / "home").read("1m")["ABC"]
    assert len(frame) == 2 * 390 and frame["filled"].sum() == 2 * 387
    filled = frame[frame.filled]
    assert (filled.volume == 0).all() and (filled.close == 1).all()


def test_interval_aggregation_and_extended_hours(tmp_path):
    from data.sources.csv import import_files

    path = tmp_path / "bars.csv"
    rows = ["timestamp,ticker,open,high,low,close,volume"]
    # 13:00Z is 08:00 ET (pre-market); 14:30..14:39Z regular.
    rows.append("2024-01-03T13:00:00Z,X,5,5,5,5,1")
    for minute in range(10):
        price = 10 + minute
        rows.append(
            f"2024-01-03T14:{30 + minute:02d}:00Z,X,{price},{price + 0.5},{price - 0.5},{price},{minute + 1}"
        )
    path.write_text("\n".join(rows) + "\n")
    report = import_files([path], tmp_path / "h1", interval="5m")
    assert report.dropped_outside_hours == 1
    frame = BarStore(tmp_path / "h1").read("5m")["X"]
    first, second = frame.iloc[0], frame.iloc[1]
    assert (first.open, first.high, first.low, first.close, first.volume) == (10, 14.5, 9.5, 14, 15)
    assert (second.open, second.close, second.volume) == (15, 19, 40)
    assert len(frame) == 78  # 6.5 hours of 5-minute bars
    report = import_files([path], tmp_path / "h2", extended_hours=True)
    frame = BarStore(tmp_path / "h2").read("1m")["X"]
    assert report.dropped_outside_hours == 0 and frame.timestamp.iloc[0] == pd.Timestamp(
        "2024-01-03T13:00:00Z"
    )
    # the store remembers regular vs extended hours per interval
    from data.errors import DataError

    with pytest.raises(DataError, match="extended-hours"):
        import_files([path], tmp_path / "h2")
    # _meta.json is a versioned document: a file from before the version field reads, a newer refuses
    meta = tmp_path / "h2" / "data" / "bars" / "interval=1m" / "_meta.json"
    assert json.loads(meta.read_text()) == {"extended_hours": True, "schema_version": 1}
    meta.write_text(json.dumps({"extended_hours": True}))
    assert import_files([path], tmp_path / "h2", extended_hours=True).dropped_outside_hours == 0
    meta.write_text(json.dumps({"extended_hours": True, "schema_version": 9}))
    with pytest.raises(DataError, match="_meta.json: schema version 9 is newer") as err:
        import_files([path], tmp_path / "h2", extended_hours=True)
    assert "\n" not in str(err.value)


def test_synth_cli_then_load_stored(tmp_path, capsys):
    home = tmp_path / "home"
    assert (
        main(
            [
                "--home",
                str(home),
                "data",
                "synth",
                "--tickers",
                "3",
                "--sessions",
                "5",
                "--seed",
                "4",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["tickers"] == ["SYN000", "SYN001", "SYN002"] and report["gaps_filled"] == {
        "SYN000": 0,
        "SYN001": 0,
        "SYN002": 0,
    }
    assert main(["--home", str(home), "data", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["intervals"]["1m"]
    assert info["sessions"] == 5 and info["rows"] == 3 * 5 * 390 and info["gaps_filled"] == 0
    from data.loader import load_market, synthetic_market

    stored = load_market(source="stored", home=home)
    memory = synthetic_market(num_tickers=3, num_sessions=5, seed=4)
    assert stored.full.tickers == memory.full.tickers
    np.testing.assert_allclose(stored.full.close.numpy(), memory.full.close.numpy(), rtol=1e-6)
    assert stored.full.num_sessions == 5


def _sessions_of_other_tickers(path: Path) -> Path:
    """Three regular-hours bars a session for tickers that never trade with the sample's four: three
    tickers with two sessions each before the sample (2013-09-24 .. 2013-10-01), four after it
    (2014-01-06 .. 2014-01-14), and SPY again on 2014-01-15. With the sample's 6 sessions that makes
    20: the four cover 6 of the first 12 (the train window at train_frac 0.6), no ticker more than 2
    of the first 6 (train_frac 0.3)."""
    days = {
        "EAA": ["2013-09-24", "2013-09-25"],
        "EBB": ["2013-09-26", "2013-09-27"],
        "ECC": ["2013-09-30", "2013-10-01"],
        "LAA": ["2014-01-06", "2014-01-07"],
        "LBB": ["2014-01-08", "2014-01-09"],
        "LCC": ["2014-01-10", "2014-01-13"],
        "LDD": ["2014-01-14"],
        "SPY": ["2014-01-15"],
    }
    rows = ["timestamp,ticker,open,high,low,close,volume"]
    for ticker, dates in days.items():
        rows += [
            f"{day}T15:{minute:02d}:00Z,{ticker},10,10,10,10,100" for day in dates for minute in range(3)
        ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_load_stored_real_bars_with_coverage_rules(tmp_path):
    from data.errors import DataError
    from data.loader import load_market
    from data.sources.csv import import_files

    home = tmp_path / "home"
    import_files([LEAN_MINUTE], home)
    splits = load_market(
        source="stored",
        home=home,
        tickers=["SPY", "IBM", "BAC", "AIG"],
        start_date="2013-10-04",
        end_date="2013-10-11",
    )
    assert splits.full.tickers == ("AIG", "BAC", "IBM", "SPY") and splits.full.num_sessions == 6
    assert splits.full.date_range() == ("2013-10-04", "2013-10-11")
    assert (splits.full.volume >= 0).all() and (splits.full.close > 0).all()
    # Coverage is judged on the train window only (the first 60% of the 20 sessions: the four have
    # bars in 6 of those 12), never on data the model must not see. The sessions where they have no
    # bars later on are forward-filled and not tradable.
    import_files([_sessions_of_other_tickers(tmp_path / "others.csv")], home)
    splits = load_market(source="stored", home=home)
    assert splits.full.num_sessions == 14  # the panel starts at the kept tickers' first bar
    assert splits.full.tickers == ("AIG", "BAC", "IBM", "SPY")
    assert splits.train.tradable.any(0).tolist() == [True] * 4
    assert not bool(splits.valid.tradable.any())  # sessions of other tickers only: all filled
    # SPY trades again in the test window; the other three never do: gone for good (held shares are sold).
    assert splits.valid.listed[0].tolist() == [False, False, False, True]
    # Over a train window where no ticker has 50% coverage: a one-line error, not an empty market.
    with pytest.raises(DataError, match="no ticker has bars in at least 50%"):
        load_market(source="stored", home=home, train_frac=0.3, valid_frac=0.1)
    # SPY (7 sessions of the 7 where SPY or IBM trade) stays; IBM (6/7) too.
    splits = load_market(source="stored", home=home, tickers=["SPY", "IBM"])
    assert splits.full.tickers == ("IBM", "SPY") and splits.full.num_sessions == 7


def test_real_sample_ships_with_the_package():
    from data.loader import load_market
    from data.sources.sample import SAMPLE_TICKERS, real_sample_path

    assert real_sample_path().is_file()
    assert (real_sample_path().parent / "LICENSE-Apache-2.0").is_file()
    splits = load_market(source="real-sample")
    assert splits.full.tickers == SAMPLE_TICKERS and splits.full.num_sessions == 6
    assert splits.full.num_steps == 6 * 390


def test_info_on_an_empty_home(tmp_path, capsys):
    assert main(["--home", str(tmp_path / "nothing"), "data", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["intervals"] == {}
    assert main(["--home", str(tmp_path / "nothing"), "data", "info"]) == 0
    assert "no bars" in capsys.readouterr().out


def test_minute_bars_import_as_daily_bars(tmp_path):
    from data.sources.csv import import_files

    import_files([LEAN_MINUTE], tmp_path / "home", interval="1d")
    spy = BarStore(tmp_path / "home").read("1d", ["SPY"])["SPY"]
    raw = pd.read_csv(LEAN_MINUTE)
    raw = raw[raw.ticker == "SPY"]
    ts = pd.to_datetime(raw.timestamp, utc=True)
    day = raw[(ts >= "2013-10-04T13:30Z") & (ts < "2013-10-04T20:00Z")]  # regular hours, EDT
    first = spy.iloc[0]
    assert first.timestamp == pd.Timestamp("2013-10-04T13:30Z") and len(spy) == 6
    assert (first.open, first.high, first.low, first.close, first.volume) == (
        day.open.iloc[0],
        day.high.max(),
        day.low.min(),
        day.close.iloc[-1],
        day.volume.sum(),
    )


def test_corrupt_store_file_is_a_one_line_error(tmp_path, capsys):
    from data.synthetic import SyntheticSpec, write_synthetic

    home = tmp_path / "home"
    write_synthetic(home, SyntheticSpec(num_tickers=1, num_sessions=1))
    victim = next((home / "data" / "bars").rglob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:100])  # truncated, as by a crash of a non-atomic writer
    rc = main(["--home", str(home), "data", "info"])
    err = capsys.readouterr().err
    assert rc == 2 and "unreadable" in err and victim.name in err and len(err.strip().splitlines()) == 1


# --- ticker hygiene: the store never builds a path from an unchecked string ----------------------------
def _bars_csv(path: Path, tickers: list[str], day: str = "2024-01-03") -> Path:
    rows = ["timestamp,ticker,open,high,low,close,volume"]
    for ticker in tickers:
        rows += [f"{day}T14:{30 + m:02d}:00Z,{ticker},10,10.5,9.5,10.2,100" for m in range(3)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


BAD_TICKERS = ["../../../../x", "a/b/c", "../x", "", "   ", "ABCDEFGHIJKLMNOP", "BRK B", "\u00c4PFEL", "x\ny"]


def test_share_class_with_a_slash_is_stored_as_a_dot_and_reads_back(tmp_path, capsys):
    from data.sources.csv import import_files

    home = tmp_path / "home"
    report = import_files([_bars_csv(tmp_path / "b.csv", ["BRK/B", "spy"])], home)
    assert report.to_dict()["tickers"] == ["BRK.B", "SPY"]
    store = BarStore(home)
    assert store.tickers("1m") == ["BRK.B", "SPY"]
    assert (home / "data" / "bars" / "interval=1m" / "ticker=BRK.B" / "2024-01.parquet").is_file()
    for spelling in ("BRK.B", "brk.b", "BRK/B", " brk/b "):
        frame = store.read("1m", [spelling])["BRK.B"]
        assert int((~frame["filled"]).sum()) == 3
    panel = store.load_panel("1m", ["brk/b", "SPY"])
    assert tuple(panel.tickers) == ("BRK.B", "SPY")
    capsys.readouterr()
    assert main(["--home", str(home), "data", "info", "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["intervals"]["1m"]["by_ticker"]) == ["BRK.B", "SPY"]


@pytest.mark.parametrize("ticker", BAD_TICKERS)
def test_no_path_is_built_from_a_bad_ticker(ticker, tmp_path):
    from data.errors import DataError

    store = BarStore(tmp_path / "home")
    with pytest.raises(DataError) as err:
        store.ticker_dir("1m", ticker)
    assert "\n" not in str(err.value) and str(err.value).startswith("store: ticker ")
    import_files_bars = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2024-01-03T14:30:00Z"]),
            "ticker": [ticker],
            "open": [1.0],
            "high": [1.0],
            "low": [1.0],
            "close": [1.0],
            "volume": [1.0],
        }
    )
    with pytest.raises(DataError):  # unvalidated bars handed to the store directly
        store.write(import_files_bars, "1m", source="direct")
    assert not (tmp_path / "home").exists()
    with pytest.raises(DataError):
        store.read("1m", [ticker])


def test_store_refuses_two_spellings_of_one_ticker(tmp_path):
    from data.errors import DataError

    bars = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2024-01-03T14:30:00Z", "2024-01-03T14:31:00Z"]),
            "ticker": ["BRK/B", "BRK.B"],
            "open": 1.0,
            "high": 1.0,
            "low": 1.0,
            "close": 1.0,
            "volume": 1.0,
        }
    )
    with pytest.raises(DataError, match="ticker BRK/B is not in its stored spelling BRK.B"):
        BarStore(tmp_path / "home").write(bars, "1m", source="direct")
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("ticker", [t for t in BAD_TICKERS if t.strip() and "\n" not in t])
def test_a_failing_import_writes_nothing_anywhere(ticker, tmp_path, capsys):
    from data.errors import DataError
    from data.sources.csv import import_files

    work = tmp_path / "a" / "b" / "c" / "d"
    work.mkdir(parents=True)
    home = work / "home"
    good = _bars_csv(work / "good.csv", ["SPY"])
    bad = _bars_csv(work / "bad.csv", ["QQQ", ticker])
    before = file_hashes(tmp_path)
    with pytest.raises(DataError, match="row 4, ticker .*: ticker must match"):
        import_files([good, bad], home)
    assert file_hashes(tmp_path) == before and not home.exists()
    capsys.readouterr()
    assert main(["--home", str(home), "data", "import", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ticker must match" in err and "bad.csv" in err
    assert file_hashes(tmp_path) == before and not home.exists()


def test_folders_that_are_not_tickers_are_never_listed_or_read(tmp_path, caplog):
    from data.sources.csv import import_files

    home = tmp_path / "home"
    import_files([_bars_csv(tmp_path / "b.csv", ["SPY"])], home)
    interval = home / "data" / "bars" / "interval=1m"
    source = interval / "ticker=SPY" / "2024-01.parquet"
    for name in ("ticker=spy", "ticker=A B", "ticker=..", "ticker="):
        (interval / name).mkdir()
        (interval / name / "2024-01.parquet").write_bytes(source.read_bytes())
    with caplog.at_level("WARNING", logger="data.store"):
        assert BarStore(home).tickers("1m") == ["SPY"]
    assert sum("not a valid ticker folder" in r.getMessage() for r in caplog.records) == 4
    assert list(BarStore(home).read("1m")) == ["SPY"]
