"""Calendar grid, alignment policy, universe membership and split/dividend adjustment."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from data.align import align_panel, align_ticker, resample_panel
from data.calendar import (
    MINUTES_PER_SESSION,
    TZ,
    bars_per_session,
    exchange_date,
    exchange_dates,
    exchange_midnight,
    infer_interval,
    session_date,
    session_dates,
    session_grid,
    sessions_in_range,
)
from data.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures" / "data"
AAPL_DAILY = FIXTURES / "lean_aapl_daily_2014_06.csv"  # real Lean bars across the 2014 7:1 split
AAPL_FACTORS = FIXTURES / "lean_aapl_factors.csv"


def _bars(stamps: list[str], ticker: str = "X", price: float = 10.0) -> pd.DataFrame:
    ts = pd.to_datetime(stamps, utc=True)
    n = len(ts)
    prices = price + np.arange(n, dtype=float)
    return pd.DataFrame(
        {
            "timestamp": ts,
            "ticker": ticker,
            "open": prices,
            "high": prices,
            "low": prices,
            "close": prices,
            "volume": np.full(n, 7.0),
        }
    )


@pytest.mark.parametrize(
    ("interval", "full_day", "early_close"),
    [("1m", 390, 210), ("5m", 78, 42), ("15m", 26, 14), ("30m", 13, 7), ("1h", 7, 4), ("1d", 1, 1)],
)
def test_grid_sizes_include_early_closes(interval, full_day, early_close):
    sessions = sessions_in_range("2024-11-27", "2024-11-29")  # Thanksgiving closed, 11-29 closes 13:00
    grid = session_grid(sessions, interval)
    assert np.bincount(grid.session_id).tolist() == [full_day, early_close]
    assert grid.time_of_day.max() == pytest.approx(1.0) and grid.time_of_day.min() > 0


def test_forward_fill_within_session_only_after_the_first_bar():
    # 2024-01-03: bars at 09:31 and 09:34 New York; 09:30 (before the first bar) is not invented.
    frame = _bars(["2024-01-03T14:31:00Z", "2024-01-03T14:34:00Z"]).copy()
    aligned = align_ticker(frame, "1m")
    out = aligned.frame
    assert out.timestamp.iloc[0] == pd.Timestamp("2024-01-03T14:31:00Z")
    assert len(out) == 389 and aligned.gaps_filled == 387
    gap = out.iloc[1]
    assert gap.filled and gap.volume == 0 and gap.open == gap.close == 10.0  # the previous close
    assert out.iloc[3].close == 11.0 and not out.iloc[3].filled
    assert (out.iloc[4:].close == 11.0).all()  # until the session's close, never into the next one


def test_panel_carries_previous_session_close_and_trims_the_start():
    a = align_ticker(_bars(["2024-01-02T14:30:00Z", "2024-01-03T14:30:00Z"], "A"), "1m").frame
    b = align_ticker(_bars(["2024-01-02T14:32:00Z", "2024-01-03T14:35:00Z"], "B", 50.0), "1m").frame
    panel = align_panel({"A": a, "B": b}, "1m")
    # The panel starts where B first trades (no back-fill of B's 09:30/09:31).
    assert panel.grid.timestamps[0] == np.datetime64("2024-01-02T14:32:00", "ns")
    j = panel.tickers.index("B")
    day2 = np.flatnonzero(panel.grid.timestamps == np.datetime64("2024-01-03T14:30:00", "ns"))[0]
    # B's first 5 bars of day 2 carry day 1's close with volume 0.
    assert (panel.close[day2 : day2 + 5, j] == 50.0).all() and (panel.volume[day2 : day2 + 5, j] == 0).all()
    assert panel.close[day2 + 5, j] == 51.0
    assert panel.gaps_filled["B"] == 387 + 5 + 384  # within day 1 + carried into day 2 + within day 2


def test_low_coverage_tickers_are_dropped_or_error(caplog):
    days = ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
    a = align_ticker(_bars([f"{d}T14:30:00Z" for d in days], "A"), "1m").frame
    b = align_ticker(_bars(["2024-01-05T14:30:00Z"], "B"), "1m").frame
    panel = align_panel({"A": a, "B": b}, "1m", min_coverage=0.5)
    assert panel.tickers == ("A",)
    assert "dropping B" in caplog.text
    with pytest.raises(DataError, match="no ticker has bars"):
        align_panel({"A": a, "B": b}, "1m", min_coverage=1.01)


def test_infer_interval():
    assert infer_interval(pd.date_range("2024-01-02 14:30", periods=10, freq="5min", tz="UTC")) == "5m"
    assert infer_interval(pd.date_range("2024-01-02", periods=10, freq="B", tz="UTC")) == "1d"
    with pytest.raises(DataError, match="7 minutes"):
        infer_interval(pd.date_range("2024-01-02 14:30", periods=10, freq="7min", tz="UTC"))


def test_universe_membership_as_of_a_date():
    from data.universe import members

    assert "AAL" in members("2015-06-01") and "AAL" not in members(
        "2020-05-01"
    )  # joined 2014-12-22, left 2020-04-20
    assert "AAL" not in members("2020-04-20")  # the opt-out date is the first day out
    assert "ABNB" not in members("2021-12-17") and "ABNB" in members("2021-12-20")
    assert 95 <= len(members("2024-01-02")) <= 110
    with pytest.raises(DataError, match="earlier"):
        members("1999-01-01")
    with pytest.raises(DataError, match="not a date"):
        members("someday")


def test_aapl_2014_split_is_adjusted_away(tmp_path):
    from data.adjust import adjust_bars, read_factor_file
    from data.sources.csv import import_files, read_csv
    from data.store import BarStore

    factors = read_factor_file(AAPL_FACTORS)
    daily = read_csv(AAPL_DAILY)
    aapl = daily[
        (daily.ticker == "AAPL") & (daily.timestamp >= "2014-06-02") & (daily.timestamp <= "2014-06-13")
    ]
    raw_close = aapl.set_index(aapl.timestamp.dt.strftime("%Y-%m-%d"))["close"]
    assert raw_close["2014-06-09"] / raw_close["2014-06-06"] < 0.16  # the raw 7:1 jump
    adjusted = adjust_bars(aapl, factors).set_index(aapl.timestamp.dt.strftime("%Y-%m-%d"))
    ratio = adjusted.close["2014-06-09"] / adjusted.close["2014-06-06"]
    assert ratio == pytest.approx(93.70 * 7 / 645.57, rel=2e-3)  # the real move, no jump
    # 2014-06-06 uses the 2014-06-06 row (0.9011818 x 0.0357143); volume scaled by the split factor
    assert adjusted.close["2014-06-06"] == pytest.approx(645.57 * 0.9011818 * 0.0357143, rel=1e-9)
    assert adjusted.volume["2014-06-06"] == pytest.approx(aapl.volume.iloc[4] / 0.0357143, rel=1e-9)
    # The CLI path: import the daily file with --adjust.
    import_files([AAPL_DAILY], tmp_path / "home", adjust=AAPL_FACTORS)
    stored = BarStore(tmp_path / "home").read("1d", ["AAPL"])["AAPL"]
    closes = stored.close.to_numpy()
    assert len(stored) == 10 and np.abs(np.diff(np.log(closes))).max() < 0.05


def test_bad_factor_file_is_one_line(tmp_path):
    from data.adjust import read_factor_file

    path = tmp_path / "f.csv"
    path.write_text(
        "date,ticker,price_factor,split_factor\n2014-01-01,AAPL,0.9,0.25\n2014-02-01,AAPL,-1,0.25\n"
    )
    with pytest.raises(DataError, match="row 2, ticker AAPL"):
        read_factor_file(path)
    path.write_text("date,ticker,price_factor\n")
    with pytest.raises(DataError, match="missing column"):
        read_factor_file(path)


def test_factor_file_tickers_follow_the_ticker_rule(tmp_path):
    from data.adjust import read_factor_file
    from data.schema import normalize_ticker

    path = tmp_path / "f.csv"
    path.write_text("date,ticker,price_factor,split_factor\n2014-01-01,brk/b,0.9,0.25\n2014-02-01,aapl,1,1\n")
    assert read_factor_file(path)["ticker"].tolist() == ["AAPL", "BRK.B"]  # matches the stored bars
    path.write_text("date,ticker,price_factor,split_factor\n2014-01-01,AAPL,0.9,0.25\n2014-02-01,../x,1,1\n")
    with pytest.raises(DataError, match=r"row 2: ticker \.\./X: ticker must match"):
        read_factor_file(path)
    # The shipped universe history obeys the rule as written (it names store folders and queries).
    from data.universe import membership_table

    symbols = membership_table()["symbol"].tolist()
    assert symbols and all(normalize_ticker(s) == s for s in symbols)


def test_panel_marks_real_bars_and_judges_coverage_on_the_leading_sessions():
    a = align_ticker(_bars(["2024-01-02T14:30:00Z", "2024-01-03T14:30:00Z"], "A"), "1m").frame
    b = align_ticker(_bars(["2024-01-02T14:32:00Z", "2024-01-03T14:35:00Z"], "B", 50.0), "1m").frame
    panel = align_panel({"A": a, "B": b}, "1m")
    j = panel.tickers.index("B")
    day2 = np.flatnonzero(panel.grid.timestamps == np.datetime64("2024-01-03T14:30:00", "ns"))[0]
    # Real: B's first bar (day 1, start of the panel) and its 09:35 bar of day 2; every other bar of
    # B is carried or forward-filled. A: its two source bars only.
    assert panel.real[:, j].sum() == 2 and panel.real[0, j] and panel.real[day2 + 5, j]
    assert not panel.real[day2 : day2 + 5, j].any()
    assert panel.real[:, panel.tickers.index("A")].sum() == 1  # (its day-1 bar is before B's first)
    # Resampled: a 5-minute bar is real when its first minute is (its open is a price that traded).
    five = resample_panel(panel, "5m")
    day2_5m = np.flatnonzero(five.grid.timestamps == np.datetime64("2024-01-03T14:30:00", "ns"))[0]
    assert not five.real[day2_5m, j] and five.real[day2_5m + 1, j]
    # Coverage judged on the first half of the sessions only: C (day 2 only) is dropped then.
    late = align_ticker(_bars(["2024-01-03T14:30:00Z"], "C"), "1m").frame
    assert align_panel({"A": a, "C": late}, "1m", min_coverage=0.5, coverage_frac=0.5).tickers == ("A",)
    assert align_panel({"A": a, "C": late}, "1m", min_coverage=0.5).tickers == ("A", "C")


# --- session dates and hours: data.calendar is their one home ----------------------------------------


def test_exchange_dates_read_each_moment_in_new_york_time_across_dst():
    # 03:59 UTC is the previous evening in New York (EST in January, EDT in July); naive input is UTC.
    stamps = ["2024-01-03 03:59", "2024-01-03 05:00", "2024-07-03 03:59", "2024-07-03 04:00"]
    expected = pd.to_datetime(["2024-01-02", "2024-01-03", "2024-07-02", "2024-07-03"])
    assert (exchange_dates(pd.to_datetime(stamps, utc=True)) == expected).all()
    assert (exchange_dates(pd.to_datetime(stamps).values) == expected).all()
    assert exchange_date(pd.Timestamp("2024-01-03 03:59", tz="UTC")) == pd.Timestamp("2024-01-02")


def test_session_dates_keep_the_date_of_date_only_daily_bars():
    intraday = pd.to_datetime(["2024-01-08 14:30", "2024-01-08 20:59"], utc=True)
    assert (session_dates(intraday) == pd.Timestamp("2024-01-08")).all()
    stored_by_date = pd.to_datetime(["2024-01-08", "2024-01-09"], utc=True)  # midnight UTC
    assert list(session_dates(stored_by_date)) == list(pd.to_datetime(["2024-01-08", "2024-01-09"]))
    alpaca_daily = pd.Timestamp("2024-01-08 05:00", tz="UTC")  # midnight New York
    assert session_date(alpaca_daily) == pd.Timestamp("2024-01-08")
    assert session_date(pd.Timestamp("2024-01-08", tz="UTC")) == pd.Timestamp("2024-01-08")
    assert exchange_midnight("2024-01-08") == alpaca_daily
    assert exchange_midnight("2024-07-08") == pd.Timestamp("2024-07-08 04:00", tz="UTC")
    assert len(session_dates(pd.DatetimeIndex([], tz="UTC"))) == 0


@pytest.mark.parametrize(("interval", "bars"), [("1m", 390), ("5m", 78), ("15m", 26), ("1h", 7), ("1d", 1)])
def test_bars_per_full_session(interval, bars):
    assert bars_per_session(interval) == bars
    assert (
        session_grid(sessions_in_range("2024-01-08", "2024-01-08"), interval).session_id == 0
    ).sum() == bars
    assert MINUTES_PER_SESSION == 390


def test_the_exchange_time_zone_is_spelled_only_in_the_calendar():
    """Session dates and hours come from data.calendar: no other module names the exchange's zone."""
    root = Path(__file__).resolve().parents[1]
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for package in ("app", "data", "envs", "agents", "backtests")
        for path in sorted((root / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == TZ
    ]
    assert [where.split(":")[0] for where in found] == ["data/calendar.py"], found
