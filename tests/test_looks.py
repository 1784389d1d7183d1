"""The looks ledger (``backtests.looks``): a second run on an overlapping window of the same market is
one more look; a re-backtest of the same run is not, and keeps its verdict's count; another synthetic
seed is another market; the market identity the workflow builds."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest

from app.config import DataConfig
from app.evaluation import EXCHANGE_BARS, market_identity
from backtests import looks
from backtests.looks import LedgerError, Look, LookRow, read_looks, record_look

MARKET = "synthetic seed=0 signal=0.5 tickers=10 sessions=60 start=2024-01-02 interval=1m"


def _look(run: str, start: str, end: str, sharpe: float | None = 0.2, market: str = MARKET) -> Look:
    return Look(run, "champion", market, start, end, 20, sharpe)


def test_a_second_run_on_an_overlapping_window_is_a_second_look(tmp_path):
    path = looks.ledger_path(tmp_path)
    first = record_look(path, _look("r1", "2024-03-01", "2024-03-29", 0.1))
    assert (first.new, first.looks, first.earlier_sharpes) == (True, 1, ())
    # Shifted by a week (growing data): overlapping, so r1's look counts against r2.
    second = record_look(path, _look("r2", "2024-03-08", "2024-04-05", 0.3))
    assert (second.new, second.looks, second.earlier_sharpes) == (True, 2, (0.1,))
    # Sharing a single day is overlapping too; an undefined Sharpe is a look all the same.
    third = record_look(path, _look("r3", "2024-04-05", "2024-05-03", None))
    assert third.looks == 2 and third.earlier_sharpes == (0.3,)
    fourth = record_look(path, _look("r4", "2024-03-20", "2024-04-10", 0.0))
    assert fourth.earlier_sharpes == (0.1, 0.3, None)


def test_a_re_backtest_of_the_same_run_is_not_a_new_look(tmp_path):
    path = looks.ledger_path(tmp_path)
    record_look(path, _look("r1", "2024-03-01", "2024-03-29", 0.1))
    second = record_look(path, _look("r2", "2024-03-01", "2024-03-29", 0.3))
    record_look(path, _look("r3", "2024-03-01", "2024-03-29", 0.5))
    again = record_look(path, _look("r2", "2024-03-01", "2024-03-29", 0.3))
    # The row stays, and the count is the looks before r2's first look: r3 came after it.
    assert (again.new, again.look_id, again.earlier_sharpes) == (False, second.look_id, (0.1,))
    assert len(read_looks(path)) == 3
    # Another strategy of the same run is its own look.
    assert record_look(path, Look("r2", "incumbent", MARKET, "2024-03-01", "2024-03-29", 20, 0.0)).new


def test_another_market_or_a_window_apart_is_not_counted(tmp_path):
    path = looks.ledger_path(tmp_path)
    record_look(path, _look("r1", "2024-03-01", "2024-03-29", 0.1))
    other_seed = MARKET.replace("seed=0", "seed=1")  # the same dates, not a single common price
    assert record_look(path, _look("r2", "2024-03-01", "2024-03-29", market=other_seed)).looks == 1
    assert record_look(path, _look("r3", "2024-04-01", "2024-04-26")).looks == 1  # after r1's window
    rows = read_looks(path)
    assert [r.run_id for r in rows] == ["r1", "r2", "r3"] and all(isinstance(r, LookRow) for r in rows)
    assert [r.id for r in rows] == sorted(r.id for r in rows) and rows[0].created_at
    assert (rows[0].strategy, rows[0].start, rows[0].end, rows[0].num_sessions) == (
        "champion", "2024-03-01", "2024-03-29", 20,
    )  # fmt: skip


def test_a_broken_ledger_is_a_one_line_error(tmp_path):
    assert read_looks(tmp_path / "none.sqlite") == [] and not (tmp_path / "none.sqlite").exists()
    bad = tmp_path / "looks.sqlite"
    bad.write_bytes(b"not a database at all" * 10)
    with pytest.raises(LedgerError, match="cannot open the looks ledger"):
        record_look(bad, _look("r1", "2024-03-01", "2024-03-29"))
    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(LedgerError, match="schema 99"):
        record_look(newer, _look("r1", "2024-03-01", "2024-03-29"))
    with pytest.raises(LedgerError, match="schema 99"):
        read_looks(newer)


def test_a_malformed_row_is_a_one_line_error(tmp_path):
    path = tmp_path / "looks.sqlite"
    record_look(path, _look("r1", "2024-03-01", "2024-03-29"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE looks SET num_sessions = 'many'")
    with pytest.raises(LedgerError, match=r"row 0.num_sessions: input should be a valid integer") as info:
        read_looks(path)
    assert "\n" not in str(info.value)


def test_the_market_identity():
    synth = DataConfig(source="synthetic", seed=0, signal=0.5, num_tickers=3, num_sessions=60)
    assert market_identity(synth) == "synthetic seed=0 signal=0.5"
    assert market_identity(synth.model_copy(update={"seed": 1})) != market_identity(synth)
    assert market_identity(synth.model_copy(update={"signal": 0.0})) != market_identity(synth)
    # The interval, the ticker count and the span are no part of it: the overlap rule reads the
    # windows and the ticker sets.
    assert market_identity(synth.model_copy(update={"interval": "5m", "num_tickers": 4})) == market_identity(
        synth
    )
    # Exchange bars: the same market whichever source holds them (the store or the shipped sample);
    # the seed means nothing; the dates and tickers of the windows decide the overlap.
    stored = SimpleNamespace(source="stored", interval="1m", seed=0)
    assert market_identity(stored) == market_identity(SimpleNamespace(source="stored", interval="5m", seed=9))
    assert market_identity(stored) == market_identity(
        SimpleNamespace(source="real-sample", interval="1m", seed=0)
    )
    assert market_identity(stored) != market_identity(synth)


def _tickers(run, tickers, start="2024-03-01", end="2024-03-29", policy=""):
    return Look(run, "champion", EXCHANGE_BARS, start, end, 20, 0.1, policy=policy, tickers=tuple(tickers))


def test_one_more_ticker_or_another_interval_is_the_same_market(tmp_path):
    path = looks.ledger_path(tmp_path)
    record_look(path, _tickers("r1", ["AAPL", "MSFT"]))
    # One ticker more (same bars otherwise): the same market, a second look.
    assert record_look(path, _tickers("r2", ["AAPL", "MSFT", "NVDA"])).looks == 2
    # Disjoint tickers on the same dates: different prices, not counted.
    assert record_look(path, _tickers("r3", ["XOM", "CVX"])).looks == 1


def test_the_looks_counted_now_include_later_looks(tmp_path):
    path = looks.ledger_path(tmp_path)
    first = record_look(path, _look("r1", "2024-03-01", "2024-03-29", 0.1))
    assert first.now.count == 1 and first.now.first == 1
    for i in range(2, 6):
        record_look(path, _look(f"r{i}", "2024-03-04", "2024-03-29", 0.1 * i))
    now = looks.looks_now(path, _look("r1", "2024-03-01", "2024-03-29"))
    assert (now.now.count, now.now.first) == (5, 1) and now.now.sharpes[0] == 0.1
    again = record_look(path, _look("r1", "2024-03-01", "2024-03-29", 0.1))  # a re-backtest
    assert not again.new and again.looks == 1 and again.now.count == 5
    assert looks.looks_now(path, _look("r9", "2024-03-01", "2024-03-29")) is None  # never recorded
    assert looks.looks_now(tmp_path / "none.sqlite", _look("r1", "2024-03-01", "2024-03-29")) is None


def test_a_new_policy_under_a_reused_run_name_is_a_new_look(tmp_path):
    path = looks.ledger_path(tmp_path)
    record_look(path, _tickers("r1", ["AAPL"], policy="aaaa"))
    assert record_look(path, _tickers("r1", ["AAPL"], policy="aaaa")).looks == 1  # the same weights
    assert record_look(path, _tickers("r1", ["AAPL"], policy="bbbb")).looks == 2  # new weights, same name


def test_a_schema_1_ledger_is_migrated_with_its_looks_counted(tmp_path):
    path = looks.ledger_path(tmp_path)
    conn = sqlite3.connect(path)
    conn.executescript(
        """CREATE TABLE looks (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, strategy TEXT
        NOT NULL, market TEXT NOT NULL, start TEXT NOT NULL, "end" TEXT NOT NULL, num_sessions INTEGER NOT
        NULL, sharpe REAL, created_at TEXT NOT NULL, UNIQUE (run_id, strategy, market, start, "end"));
        INSERT INTO looks VALUES (1, 'old', 'champion', 'stored', '2024-03-01', '2024-03-29', 20, 0.3, 'x');
        PRAGMA user_version = 1;"""
    )
    conn.close()
    count = record_look(path, _tickers("new", ["AAPL"]))
    assert count.looks == 2 and count.earlier_sharpes == (0.3,)  # an old row overlaps every ticker set
    assert [r.policy for r in read_looks(path)] == ["", ""]


def test_a_schema_3_ledger_counts_stored_and_sample_bars_as_one_market(tmp_path):
    """Before markets were identified by their data, the store's bars and the shipped sample's were
    two markets; migrated, their looks count against each other and against new ones."""
    path = looks.ledger_path(tmp_path)
    record_look(path, _tickers("warm-up", ["ZZZ"], start="2020-01-01", end="2020-01-31"))  # a schema-4 file
    conn = sqlite3.connect(path)
    conn.executescript(
        """DELETE FROM looks;
        INSERT INTO looks (run_id, strategy, policy, market, tickers, start, "end", num_sessions, sharpe,
            created_at) VALUES
            ('a', 'champion', '', 'stored', 'AAPL', '2024-03-01', '2024-03-29', 20, 0.3, 'x'),
            ('b', 'champion', '', 'real-sample', 'AAPL', '2024-03-04', '2024-03-22', 15, 0.1, 'x');
        PRAGMA user_version = 3;"""
    )
    conn.close()
    count = record_look(path, _tickers("new", ["AAPL"]))
    assert count.looks == 3 and sorted(count.earlier_sharpes) == [0.1, 0.3]
    assert {r.market for r in read_looks(path)} == {EXCHANGE_BARS}
