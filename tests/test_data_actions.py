"""Raw bars + corporate actions, adjusted on load (data.actions): a split or dividend that lands
between two fetches leaves the stored history on one basis. Against the local Alpaca stand-in."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from data.actions import ActionStore, adjust_raw
from data.errors import DataError
from data.loader import load_market
from data.sources.stream import fetch_to_store
from data.store import BarStore
from tests.alpaca_fake import FakeAlpaca, minute_bars, point_at

EX_DATE = "2024-02-01"  # first session of February: the second fetch's month


def _truth() -> pd.DataFrame:
    """Continuous bars of AAA (Jan-Feb 2024) on today's basis: what any adjusted history must equal."""
    return minute_bars(["AAA"], "2024-01-02", "2024-03-01", missing=0.1, seed=3)


def _raw(split: float = 1.0) -> pd.DataFrame:
    """What the exchange printed: before the ex-date, ``split`` times today's-basis prices and
    1/split the shares."""
    bars = _truth()
    local = pd.DatetimeIndex(bars["timestamp"]).tz_convert("America/New_York").tz_localize(None).normalize()
    before = local < pd.Timestamp(EX_DATE)
    for col in ("open", "high", "low", "close"):
        bars.loc[before, col] = bars.loc[before, col] * split
    bars.loc[before, "volume"] = bars.loc[before, "volume"] / split
    return bars


@pytest.fixture
def serve(monkeypatch):
    def start(bars: pd.DataFrame, actions: dict) -> FakeAlpaca:
        server = FakeAlpaca(bars=bars, page_size=100_000, corporate_actions=actions)
        server.start()
        point_at(server, monkeypatch, trading=False)
        return server

    servers: list[FakeAlpaca] = []
    yield lambda bars, actions: servers.append(start(bars, actions)) or servers[-1]
    for server in servers:
        server.stop()


def _closes(home) -> pd.DataFrame:
    frame = BarStore(home).read("1m", ["AAA"])["AAA"]
    return frame.loc[~frame["filled"]].reset_index(drop=True)


SPLIT = {"forward_splits": [{"symbol": "AAA", "new_rate": 4, "old_rate": 1, "ex_date": EX_DATE}]}


def test_split_between_two_fetches_leaves_no_fake_drop(serve, tmp_path):
    serve(_raw(split=4.0), SPLIT)
    home = tmp_path / "home"
    # Nightly update 1, before the split: January only; the API knows no split yet.
    fetch_to_store(home, "alpaca", ["AAA"], "2024-01-02", "2024-01-31")
    before = _closes(home)
    assert ActionStore(home).read("1m", "AAA").empty  # table present (bars raw), no action yet
    np.testing.assert_allclose(before["close"], _raw(4.0)["close"].iloc[: len(before)])
    # Nightly update 2, after it: February brings the split, and January is restated on load.
    fetch_to_store(home, "alpaca", ["AAA"], "2024-02-01", "2024-02-29")
    after = _closes(home)
    truth = _truth()
    assert len(after) == len(truth)
    np.testing.assert_allclose(after["close"], truth["close"], rtol=1e-12)
    np.testing.assert_allclose(after["volume"], truth["volume"], rtol=1e-12)
    steps = np.diff(np.log(after["close"].to_numpy()))
    assert np.abs(steps).max() < 0.05  # no -75% bar at the ex-date (the raw series has one)
    raw_steps = np.diff(np.log(_raw(4.0)["close"].to_numpy()))
    assert raw_steps.min() < np.log(0.3)
    # The env sees the same: the loaded market's close has no jump either.
    market = load_market(source="stored", home=home, tickers=["AAA"], min_coverage=0.0).full
    rets = np.diff(np.log(market.close[:, 0].double().numpy()))
    assert np.abs(rets).max() < 0.05


def test_same_result_whichever_order_the_chunks_were_fetched(serve, tmp_path):
    serve(_raw(split=4.0), SPLIT)
    forward, backward = tmp_path / "forward", tmp_path / "backward"
    fetch_to_store(forward, "alpaca", ["AAA"], "2024-01-02", "2024-01-31")
    fetch_to_store(forward, "alpaca", ["AAA"], "2024-02-01", "2024-02-29")
    fetch_to_store(backward, "alpaca", ["AAA"], "2024-02-01", "2024-02-29")
    fetch_to_store(backward, "alpaca", ["AAA"], "2024-01-02", "2024-01-31")
    pd.testing.assert_frame_equal(_closes(forward), _closes(backward))
    one_go = tmp_path / "one_go"
    fetch_to_store(one_go, "alpaca", ["AAA"], "2024-01-02", "2024-02-29")
    pd.testing.assert_frame_equal(_closes(forward), _closes(one_go))


def test_dividend_adjusts_by_its_factor(serve, tmp_path):
    raw = _raw(split=1.0)
    cash = 0.75
    serve(raw, {"cash_dividends": [{"symbol": "AAA", "rate": cash, "ex_date": EX_DATE}]})
    home = tmp_path / "home"
    fetch_to_store(home, "alpaca", ["AAA"], "2024-01-02", "2024-01-31")
    np.testing.assert_allclose(_closes(home)["close"], raw["close"].iloc[: len(_closes(home))])
    fetch_to_store(home, "alpaca", ["AAA"], "2024-02-01", "2024-02-29")
    got = _closes(home)
    local = pd.DatetimeIndex(raw["timestamp"]).tz_convert("America/New_York").tz_localize(None).normalize()
    before = np.asarray(local < pd.Timestamp(EX_DATE))
    prev_close = raw["close"].to_numpy()[before][-1]  # the last real close before the ex-date
    factor = 1.0 - cash / prev_close
    np.testing.assert_allclose(got["close"].to_numpy()[before], raw["close"].to_numpy()[before] * factor)
    np.testing.assert_allclose(got["close"].to_numpy()[~before], raw["close"].to_numpy()[~before])
    np.testing.assert_allclose(got["volume"], raw["volume"])  # a dividend leaves shares alone
    # A window that ends before the ex-date is on the same basis (its factor read from the files).
    january = BarStore(home).read("1m", ["AAA"], start="2024-01-02", end="2024-01-31")["AAA"]
    january = january.loc[~january["filled"]]
    np.testing.assert_allclose(january["close"], got["close"].to_numpy()[before])


def test_adjust_raw_matches_a_row_by_row_reference():
    bars = _raw(split=1.0).iloc[::50].reset_index(drop=True)
    actions = pd.DataFrame(
        {
            "ex_date": pd.to_datetime(["2024-01-16", "2024-02-01", "2024-02-20"]),
            "kind": ["split", "dividend", "split"],
            "ratio": [2.0, 1.0, 0.5],
            "cash": [0.0, 1.25, 0.0],
        }
    )
    close_at = 100.0
    got = adjust_raw(bars, actions, lambda _ex: close_at)
    days = pd.DatetimeIndex(bars["timestamp"]).tz_convert("America/New_York").tz_localize(None).normalize()
    for i in range(len(bars)):
        price, shares = 1.0, 1.0
        for ex, kind, ratio, cash in actions.itertuples(index=False):
            if days[i] < ex:
                if kind == "split":
                    price, shares = price / ratio, shares * ratio
                else:
                    price *= 1 - cash / close_at
        assert got["close"].iloc[i] == pytest.approx(bars["close"].iloc[i] * price, rel=1e-12)
        assert got["volume"].iloc[i] == pytest.approx(bars["volume"].iloc[i] * shares, rel=1e-12)


def test_store_without_actions_loads_as_stored_and_refuses_raw_bars_beside_it(serve, tmp_path, caplog):
    # An older podracer's store: adjusted bars, no actions table.
    home = tmp_path / "old"
    adjusted = _truth()
    BarStore(home).write(adjusted, "1m", source="alpaca")
    with caplog.at_level(logging.INFO, logger="data.store"):
        got = _closes(home)
    np.testing.assert_allclose(got["close"], adjusted["close"])
    assert sum("read as stored" in r.message for r in caplog.records) == 1
    serve(_raw(split=4.0), SPLIT)
    with pytest.raises(DataError, match=r"AAA without corporate actions.*move .* aside"):
        fetch_to_store(home, "alpaca", ["AAA"], "2024-02-01", "2024-02-29")
    np.testing.assert_allclose(_closes(home)["close"], adjusted["close"])  # nothing written


def test_bad_action_rows_are_one_line_errors(tmp_path):
    bad = pd.DataFrame({"ex_date": ["2024-02-01"], "kind": ["split"], "ratio": [0.0], "cash": [0.0]})
    with pytest.raises(DataError, match="row 1"):
        ActionStore(tmp_path).merge("1m", "AAA", bad)
    with pytest.raises(DataError):
        ActionStore(tmp_path).path("1m", "../../x")


def test_adjusted_source_refused_beside_raw_bars(serve, tmp_path):
    serve(_raw(split=4.0), SPLIT)
    home = tmp_path / "home"
    fetch_to_store(home, "alpaca", ["AAA"], "2024-02-01", "2024-02-29")

    def never(*_args):  # the refusal comes before any request
        raise AssertionError("requested")

    with pytest.raises(DataError, match="raw bars with corporate actions for AAA"):
        fetch_to_store(
            home, "yfinance", ["AAA"], "2024-02-26", "2024-02-29", fetcher=never,
            today=pd.Timestamp("2024-03-01").date(),
        )  # fmt: skip


def test_nightly_update_streams_raw_bars_and_actions(serve, tmp_path):
    """`podracer retrain`'s update step (app.nightly.steps.incremental_update) takes the same
    streaming fetch: two nightly updates around the split leave the history on one basis."""
    from datetime import date

    from app.nightly.steps import incremental_update

    serve(_raw(split=4.0), SPLIT)
    home = tmp_path / "home"
    first = incremental_update(
        home, source="alpaca", tickers=["AAA"], interval="1m", initial_days=40, today=date(2024, 1, 31)
    )
    assert first["rows_fetched"] > 0 and ActionStore(home).read("1m", "AAA").empty
    incremental_update(
        home, source="alpaca", tickers=["AAA"], interval="1m", initial_days=40, today=date(2024, 2, 29)
    )
    after = _closes(home)
    np.testing.assert_allclose(after["close"], _truth()["close"], rtol=1e-12)
    assert np.abs(np.diff(np.log(after["close"].to_numpy()))).max() < 0.05
