# ruff: noqa: F811 - the fixtures imported from test_paper are requested by name
"""The books: the journal's fill-implied positions against the broker's, and one paper loop per
Alpaca account (tests/alpaca_fake.py plays the broker)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from alpaca_fake import FakeAlpaca
from test_paper import FAST, cycle

from app.cli import main
from app.paper.alpaca_broker import AlpacaBroker
from app.paper.books import (
    BookDiff,
    check_books,
    compare,
    read_record,
    record_path,
)
from app.paper.journal import Journal, read_journal
from app.workflows.paper import account_lock
from data.errors import ArtifactError


def test_compare_is_per_symbol_beyond_the_tolerance():
    implied = {"AAA": 10.0, "BBB": 5.0, "CCC": 1.0}
    broker = {"AAA": 10.00005, "BBB": 2.5, "DDD": 3.0}
    diffs = compare(implied, broker, tolerance=1e-4)
    assert diffs == [BookDiff("BBB", 2.5, 5.0), BookDiff("CCC", 0.0, 1.0), BookDiff("DDD", 3.0, 0.0)]
    assert compare(implied, dict(implied), 0.0) == []


def _kinds(home) -> list[str]:
    return read_journal(home)["events"]["kind"].tolist()


def test_outside_trade_halts_alerts_and_clears_when_reversed(env):
    fake, home = env["fake"], env["home"]
    first = cycle(env)
    assert first.status == "traded"
    assert read_record(home).matched  # the first check adopted the (empty) opening book
    held = max(fake.positions, key=lambda s: fake.positions[s] * fake.prices[s])
    before = fake.positions[held]
    fake.outside_trade(held, 0.5)  # someone sells half a position outside podracer
    posts = fake.order_posts
    fake.now += timedelta(minutes=15)
    second = cycle(env)
    assert second.status == "unreconciled" and any(held in m for m in second.messages)
    assert fake.order_posts == posts  # no new order went out
    record = read_record(home)
    assert not record.matched
    assert record.diffs == [[held, pytest.approx(before / 2), pytest.approx(before)]]
    orders = read_journal(home)["orders"]
    assert set(orders[orders["decision_ts"] == orders["decision_ts"].max()]["status"]) == {"blocked"}
    # still halted next cycle, and the difference is journaled once, not every cycle
    fake.now += timedelta(minutes=15)
    assert cycle(env).status == "unreconciled"
    assert _kinds(home).count("books_mismatch") == 1
    # the outside trade reversed: the books match again, the alert clears, trading resumes
    fake.outside_trade(held, 1.0, side="buy")
    fake.positions[held] = before  # (the buy-back's exact quantity)
    fake.now += timedelta(minutes=15)
    third = cycle(env)
    assert third.status == "traded"
    assert read_record(home).matched and _kinds(home).count("books_clear") == 1


def test_outside_open_order_is_a_mismatch(env):
    fake, home = env["fake"], env["home"]
    cycle(env)
    ticker = env["bundle"].tickers[0]
    order = fake.outside_trade(ticker, 0.5, side="buy")
    # (outside_trade fills at once: undo the fill, so that only an open outside order differs)
    fake.positions[ticker] -= order.filled_qty
    order.filled_qty, order.status = 0.0, "accepted"
    fake.fill_mode = "accept"  # and it stays open when looked up
    with Journal.for_home(home) as journal:
        record = check_books(AlpacaBroker(retry=FAST, sleep=lambda s: None), journal, when="reconcile")
    assert not record.matched and record.outside_orders == [order.client_order_id]


def test_reconcile_command_shows_and_accepts_the_broker_book(env, capsys):
    fake, home = env["fake"], env["home"]
    cycle(env)
    held = max(fake.positions, key=lambda s: fake.positions[s])
    fake.outside_trade(held, 0.5)
    assert main(["--home", str(home), "reconcile"]) == 1
    out = capsys.readouterr().out
    assert "mismatch" in out and held in out
    assert main(["--home", str(home), "reconcile", "--accept"]) == 0
    assert read_record(home).matched and "books_accepted" in _kinds(home)
    fake.now += timedelta(minutes=15)
    assert cycle(env).status == "traded"  # trading resumes from the accepted book
    assert main(["--home", str(home), "reconcile"]) == 0


def test_reconcile_without_a_journal_is_one_line(tmp_path, capsys):
    assert main(["--home", str(tmp_path), "reconcile"]) == 2
    assert "no paper journal" in capsys.readouterr().err


def test_record_is_written_atomically_and_read_back(env):
    cycle(env)
    raw = json.loads(record_path(env["home"]).read_text())
    assert raw["status"] == "matched" and raw["when"] == "after_cycle"
    record_path(env["home"]).write_text("{not json")
    with pytest.raises(Exception, match="unreadable"):
        read_record(env["home"])


def test_record_on_the_document_base_reads_older_files_and_refuses_newer(tmp_path):
    path = record_path(tmp_path)
    path.parent.mkdir(parents=True)
    old = {"status": "mismatch", "checked_at": "2024-01-04T15:00:00+00:00", "since": "2024-01-04T15:00:00+00:00",
           "when": "cycle_start", "tolerance": 1e-4, "diffs": [["AAA", 5.0, 10.0]], "message": "AAA differs"}  # fmt: skip
    path.write_text(json.dumps(old))  # written before the file carried a schema version
    record = read_record(tmp_path)
    assert record.status == "mismatch" and record.diffs == [["AAA", 5.0, 10.0]] and not record.matched
    record.write(path)
    assert json.loads(path.read_text())["schema_version"] == 1
    path.write_text(json.dumps({**old, "schema_version": 2}))
    with pytest.raises(ArtifactError, match="reconcile.json is unreadable .*newer") as err:
        read_record(tmp_path)
    assert "\n" not in str(err.value)
    path.write_text(json.dumps({**old, "status": "maybe"}))
    with pytest.raises(ArtifactError, match="status"):
        read_record(tmp_path)


def test_second_home_on_one_account_exits_75_naming_the_holder(env, tmp_path, capsys):
    """Two homes, one Alpaca account: the second paper loop exits 75 and names the first."""
    first_home = tmp_path / "first"
    lock = account_lock(FakeAlpaca().account_id, first_home)
    argv = ["--home", str(env["home"]), "paper", "--bundle", str(env["bundle_dir"]), "--once"]
    with lock:
        assert main(argv) == 75
        err = capsys.readouterr().err
        assert "already traded by podracer paper --home" in err and str(first_home) in err
        assert not env["fake"].orders
    # another account's keys (another account id) are not blocked by it
    env["fake"].account_id = "99999999-0000-0000-0000-000000000000"
    with lock:
        assert main(argv) == 0
    assert env["fake"].orders
