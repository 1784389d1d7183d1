"""yfinance bars stored raw + corporate actions (data.sources.yfinance), and `data import` beside them.

A monkeypatched Yahoo (no network) serves what Yahoo serves on a given day: ``Close`` split-adjusted
for every split it knows by then (volume too), ``auto_adjust`` adding its dividends, and
``Ticker.splits`` / ``Ticker.dividends`` with past dividends stated per today's share."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from app.cli import main
from data.actions import ActionStore
from data.errors import DataError
from data.sources.csv import import_files
from data.sources.retry import FetchRetryPolicy
from data.sources.stream import fetch_to_store
from data.store import BarStore
from tests.alpaca_fake import minute_bars

FIELDS = ["open", "high", "low", "close"]


def _days(bars: pd.DataFrame) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(bars["timestamp"]).tz_convert("America/New_York").tz_localize(None).normalize()


class FakeYahoo:
    """Raw prints of AAA plus its actions (ex_date, kind, value: split ratio or raw cash); answers as
    Yahoo would on ``self.today`` (actions with an ex-date after it are not known yet)."""

    def __init__(self, raw: pd.DataFrame, actions: list[tuple[str, str, float]]) -> None:
        self.raw = raw
        self.actions = [(pd.Timestamp(ex), kind, value) for ex, kind, value in actions]
        self.today = pd.Timestamp("2024-01-01")
        self.splits_reply = None  # replaces Ticker.splits when set (malformed replies)
        self.downloads: list[dict] = []

    def known(self, kind: str) -> list[tuple[pd.Timestamp, float]]:
        return [(ex, v) for ex, k, v in self.actions if k == kind and ex <= self.today]

    def adjusted(self, bars: pd.DataFrame, dividends: bool) -> pd.DataFrame:
        """``bars`` adjusted on today's basis (Yahoo's ``Close``, or ``Adj Close`` with dividends)."""
        out = bars.copy()
        days = _days(out)
        for ex, ratio in self.known("split"):
            before = np.asarray(days < ex)
            out.loc[before, FIELDS] = out.loc[before, FIELDS] / ratio
            out.loc[before, "volume"] = out.loc[before, "volume"] * ratio
        if dividends:
            all_days = _days(self.raw)
            for ex, cash in self.known("dividend"):
                prev_close = self.raw["close"].to_numpy()[np.asarray(all_days < ex)][
                    -1
                ]  # raw, the day before
                before = np.asarray(days < ex)
                out.loc[before, FIELDS] = out.loc[before, FIELDS] * (1 - cash / prev_close)
        return out

    def download(self, tickers, start=None, end=None, interval="1m", auto_adjust=True, **_kwargs):
        self.downloads.append({"start": start, "end": end, "auto_adjust": auto_adjust})
        days = _days(self.raw)
        bars = self.raw.loc[np.asarray((days >= pd.Timestamp(start)) & (days < pd.Timestamp(end)))]
        bars = self.adjusted(bars, dividends=auto_adjust)
        index = pd.DatetimeIndex(bars["timestamp"]).tz_convert("America/New_York").rename("Datetime")
        columns = pd.MultiIndex.from_product(
            [list(tickers), ["Open", "High", "Low", "Close", "Adj Close", "Volume"]],
            names=["Ticker", "Price"],
        )
        values = bars[["open", "high", "low", "close", "close", "volume"]].to_numpy()
        return pd.DataFrame(values, index=index, columns=columns)

    def ticker(self, symbol: str):
        yahoo = self

        class Ticker:
            @property
            def splits(self):
                if yahoo.splits_reply is not None:
                    return yahoo.splits_reply
                known = yahoo.known("split")
                index = pd.DatetimeIndex([ex for ex, _ in known]).tz_localize("America/New_York")
                return pd.Series([r for _, r in known], index=index, dtype=float, name="Stock Splits")

            @property
            def dividends(self):
                known = yahoo.known("dividend")
                later = [np.prod([r for ex, r in yahoo.known("split") if ex > d] or [1.0]) for d, _ in known]
                index = pd.DatetimeIndex([d for d, _ in known]).tz_localize("America/New_York")
                cash = [c / f for (_, c), f in zip(known, later, strict=True)]  # per today's share
                return pd.Series(cash, index=index, dtype=float, name="Dividends")

        return Ticker()


def _raw_prints(actions: list[tuple[str, str, float]]) -> pd.DataFrame:
    """What the exchange printed: continuous on the latest basis, so before each split ``ratio`` x
    the prices and 1/ratio the shares."""
    bars = minute_bars(["AAA"], "2024-01-22", "2024-02-10", missing=0.1, seed=5)
    days = _days(bars)
    for ex, kind, ratio in actions:
        if kind == "split":
            before = np.asarray(days < pd.Timestamp(ex))
            bars.loc[before, FIELDS] = bars.loc[before, FIELDS] * ratio
            bars.loc[before, "volume"] = bars.loc[before, "volume"] / ratio
    return bars


@pytest.fixture
def yahoo(monkeypatch):
    import yfinance

    def start(actions: list[tuple[str, str, float]]) -> FakeYahoo:
        fake = FakeYahoo(_raw_prints(actions), actions)
        monkeypatch.setattr(yfinance, "download", fake.download)
        monkeypatch.setattr(yfinance, "Ticker", fake.ticker)
        return fake

    return start


def _fetch(home, fake: FakeYahoo, start: str, end: str, today: str, **kwargs):
    fake.today = pd.Timestamp(today)
    return fetch_to_store(
        home, "yfinance", ["AAA"], start, end, "1m", today=date.fromisoformat(today), **kwargs
    )


def _read(home) -> pd.DataFrame:
    frame = BarStore(home).read("1m", ["AAA"])["AAA"]
    return frame.loc[~frame["filled"]].reset_index(drop=True)


SPLIT = [("2024-02-05", "split", 4.0)]


def test_split_between_two_yfinance_fetches_leaves_no_fake_jump(yahoo, tmp_path):
    fake = yahoo(SPLIT)
    home = tmp_path / "nightly"
    _fetch(home, fake, "2024-01-22", "2024-02-02", today="2024-02-03")  # before the split: Yahoo knows none
    assert ActionStore(home).read("1m", "AAA").empty  # table present: the bars are raw
    # Nightly update after the split: Yahoo now serves the older bars divided by 4.
    _fetch(home, fake, "2024-02-05", "2024-02-09", today="2024-02-10")
    # One fetch of the whole window after the split (Yahoo's view that day, in one go).
    one_go = tmp_path / "one_go"
    _fetch(one_go, fake, "2024-01-22", "2024-02-09", today="2024-02-10")
    got = _read(home)
    pd.testing.assert_frame_equal(got, _read(one_go))
    expected = fake.adjusted(fake.raw, dividends=True).reset_index(drop=True)
    assert len(got) == len(expected)
    np.testing.assert_allclose(got[FIELDS + ["volume"]], expected[FIELDS + ["volume"]], rtol=1e-12)
    assert np.abs(np.diff(np.log(got["close"].to_numpy()))).max() < 0.05  # no -75% bar
    assert np.diff(np.log(fake.raw["close"].to_numpy())).min() < np.log(0.3)  # the prints have one
    # On disk the bars are raw whichever day they arrived (un-split with what Yahoo knew then).
    january = pq.read_table(BarStore(one_go).ticker_dir("1m", "AAA") / "2024-01.parquet").to_pandas()
    first = january.loc[~january["filled"], "close"].to_numpy()
    np.testing.assert_allclose(first, fake.raw["close"].to_numpy()[: len(first)], rtol=1e-12)
    assert all(not d["auto_adjust"] for d in fake.downloads)


def test_dividend_before_a_later_split_on_one_basis(yahoo, tmp_path):
    fake = yahoo([("2024-01-29", "dividend", 1.0), ("2024-02-05", "split", 2.0)])
    home = tmp_path / "home"
    _fetch(home, fake, "2024-01-22", "2024-01-31", today="2024-02-01")
    after_first = ActionStore(home).read("1m", "AAA")
    assert list(after_first["kind"]) == ["dividend"] and after_first["cash"].iloc[0] == 1.0
    np.testing.assert_allclose(  # dividend-adjusted on load already (Yahoo's Adj Close that day)
        _read(home)["close"], fake.adjusted(fake.raw, dividends=True)["close"].iloc[: len(_read(home))]
    )
    # After the split Yahoo states the dividend as 0.50 per today's share: stored back as 1.00 raw.
    _fetch(home, fake, "2024-02-01", "2024-02-09", today="2024-02-10")
    actions = ActionStore(home).read("1m", "AAA")
    assert list(actions["kind"]) == ["dividend", "split"]
    assert actions["cash"].iloc[0] == pytest.approx(1.0, rel=1e-12)
    got = _read(home)
    expected = fake.adjusted(fake.raw, dividends=True).reset_index(drop=True)
    np.testing.assert_allclose(got[FIELDS + ["volume"]], expected[FIELDS + ["volume"]], rtol=1e-12)
    # Yahoo's dividend factor: 1 - 1.00 / the last raw close before the ex-date, on every earlier bar.
    before = np.asarray(_days(got) < pd.Timestamp("2024-01-29"))
    prev = fake.raw["close"].to_numpy()[before][-1]
    ratio = got["close"].to_numpy()[before] / (fake.raw["close"].to_numpy()[before] / 2.0)
    np.testing.assert_allclose(ratio, 1 - 1.0 / prev, rtol=1e-12)


def test_nightly_yfinance_updates_around_a_split(yahoo, tmp_path):
    """`podracer retrain`'s update step (nightly.update = "yfinance") takes the same streaming fetch."""
    from app.nightly.steps import incremental_update

    fake = yahoo(SPLIT)
    home = tmp_path / "home"
    for today in ("2024-02-03", "2024-02-10"):
        fake.today = pd.Timestamp(today)
        incremental_update(
            home, source="yfinance", tickers=["AAA"], interval="1m", initial_days=12,
            today=date.fromisoformat(today),
        )  # fmt: skip
    got = _read(home)
    expected = fake.adjusted(fake.raw, dividends=True).reset_index(drop=True)
    np.testing.assert_allclose(got["close"], expected["close"], rtol=1e-12)
    assert np.abs(np.diff(np.log(got["close"].to_numpy()))).max() < 0.05


@pytest.mark.parametrize(
    "reply, message",
    [
        (pd.Series([0.0], index=pd.DatetimeIndex(["2024-02-05"])), r"AAA splits: corporate action row 1"),
        (pd.Series(["x"], index=pd.DatetimeIndex(["2024-02-05"])), r"AAA splits: corporate action row 1"),
        (pd.Series([4.0], index=["not a date"]), r"AAA: malformed splits reply \(dates unreadable\)"),
        ({"2024-02-05": 4.0}, r"AAA: malformed splits reply \(dict, not a series\)"),
    ],
)
def test_malformed_actions_reply_is_a_one_line_error_and_stores_nothing(yahoo, tmp_path, reply, message):
    fake = yahoo(SPLIT)
    fake.splits_reply = reply
    with pytest.raises(DataError, match=f"^yfinance: {message}") as info:
        _fetch(tmp_path, fake, "2024-02-05", "2024-02-09", today="2024-02-10")
    assert "\n" not in str(info.value)
    assert not BarStore(tmp_path).tickers("1m") and ActionStore(tmp_path).read("1m", "AAA") is None


def test_no_actions_reply_is_retried_then_names_the_chunk(yahoo, tmp_path, monkeypatch):
    import yfinance

    fake = yahoo(SPLIT)

    class Silent:  # yfinance hides a failed request and answers None
        splits = dividends = None

    monkeypatch.setattr(yfinance, "Ticker", lambda _symbol: Silent())
    waits: list[float] = []
    policy = FetchRetryPolicy(sleep=waits.append)
    with pytest.raises(DataError, match=r"no corporate-actions reply .*rerun the same command") as info:
        _fetch(tmp_path, fake, "2024-02-05", "2024-02-09", today="2024-02-10", policy=policy)
    assert "\n" not in str(info.value) and len(waits) == policy.attempts - 1
    assert not BarStore(tmp_path).tickers("1m")


# --- `data import` beside raw bars, and a fetch beside imported bars ---------------------------------
def _csv(path, bars: pd.DataFrame):
    out = bars.copy()
    out["timestamp"] = pd.DatetimeIndex(out["timestamp"]).strftime("%Y-%m-%dT%H:%M:%SZ")
    out.to_csv(path, index=False)
    return path


def _parquet_bytes(home) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted((home / "data").rglob("*.parquet"))}


def test_import_beside_fetched_raw_bars_needs_raw(yahoo, tmp_path, capsys):
    fake = yahoo(SPLIT)
    home = tmp_path / "home"
    _fetch(home, fake, "2024-02-05", "2024-02-09", today="2024-02-10")
    january = fake.raw.loc[np.asarray(_days(fake.raw) < pd.Timestamp("2024-02-01"))]
    path = _csv(tmp_path / "jan.csv", january)  # raw prints of the weeks before the split
    before = _parquet_bytes(home)
    rc = main(["--home", str(home), "data", "import", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "raw bars with corporate actions for AAA" in err and "--raw" in err
    assert "\n" not in err and _parquet_bytes(home) == before
    # Told they are raw: accepted, and adjusted on load with the stored split (no fake jump).
    assert main(["--home", str(home), "data", "import", "--raw", str(path)]) == 0
    got = _read(home)
    assert np.abs(np.diff(np.log(got["close"].to_numpy()))).max() < 0.05
    np.testing.assert_allclose(
        got["close"].iloc[: len(january)], january["close"].to_numpy() / 4.0, rtol=1e-12
    )
    with pytest.raises(DataError, match="--raw and --adjust"):
        import_files([path], home, raw=True, adjust=tmp_path / "factors.csv")


def test_fetch_beside_imported_bars_is_refused_unless_imported_raw(yahoo, tmp_path):
    fake = yahoo(SPLIT)
    january = fake.raw.loc[np.asarray(_days(fake.raw) < pd.Timestamp("2024-02-01"))]
    path = _csv(tmp_path / "jan.csv", january)
    imported = tmp_path / "imported"
    import_files([path], imported)  # adjustment unknown: read as stored, no actions table
    before = _parquet_bytes(imported)
    with pytest.raises(DataError, match=r"holds AAA without corporate actions .*import --raw") as info:
        _fetch(imported, fake, "2024-02-05", "2024-02-09", today="2024-02-10")
    assert "\n" not in str(info.value) and _parquet_bytes(imported) == before and not fake.downloads
    # --raw beside those bars would mix bases too.
    with pytest.raises(DataError, match=r"holds AAA without corporate actions"):
        import_files([path], imported, raw=True)
    # Imported as raw into a fresh store: marked raw, and the fetch's split adjusts it on load.
    raw_home = tmp_path / "raw"
    import_files([path], raw_home, raw=True)
    assert ActionStore(raw_home).read("1m", "AAA").empty
    _fetch(raw_home, fake, "2024-02-05", "2024-02-09", today="2024-02-10")
    got = _read(raw_home)
    expected = fake.adjusted(fake.raw, dividends=True)
    expected = expected.loc[
        np.asarray(_days(expected) < pd.Timestamp("2024-02-01"))
        | np.asarray(_days(expected) >= pd.Timestamp("2024-02-05"))
    ].reset_index(drop=True)
    np.testing.assert_allclose(got["close"], expected["close"], rtol=1e-12)
