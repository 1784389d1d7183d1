"""``paper --champion`` after the nightly demotes its champion: the registry names none, and the
account is handed back once, to the benchmark (``[gate] before_champion = "benchmark"``) or to cash.

Against the local Alpaca stand-in: champion A trades a session; a retrain demotes it (the registry's
demotion row, the pointer removed); the next session's first cycle rebalances A's book to the
benchmark's equal weights (or sells it whole), later cycles and a restarted loop trade nothing more,
and the books reconcile.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from test_paper_benchmark import assert_books_reconcile, source_with, unpromoted  # noqa: F401
from test_paper_champion import SESSIONS, bundles, events, promote, trade_session  # noqa: F401

from app.champion import ChampionDemotion
from app.nightly.registry import DecisionRecord, current_champion, record_decision
from app.paper.benchmark import is_benchmark, is_cash
from app.paper.journal import read_journal


def demote(home, run_id: str) -> None:
    """What a retrain's record step writes when the shadow book demotes the champion."""
    now = datetime.now(UTC).isoformat()
    record_decision(
        home,
        DecisionRecord(started_at=now, decided_at=now, verdict="rejected", reason="edge gone", step="decide"),
        demotion=ChampionDemotion(run_id=run_id, reason="edge gone", demoted_at=now, session=SESSIONS[0]),
    )
    assert current_champion(home) is None


def _champion_then_demoted(m, benchmark):
    """A trades a session, then is demoted; returns the loop's source (A's bundle still in hand)."""
    promote(m.home, "run-a", m.a)
    source = source_with(m, benchmark)
    (first,) = trade_session(m, source, SESSIONS[0], cycles=1)
    assert first.bundle_id == m.id_a and first.submitted and m.fake.positions
    demote(m.home, "run-a")
    return source


def test_a_demoted_champion_hands_the_account_to_the_benchmark_once(unpromoted):  # noqa: F811
    m = unpromoted
    _champion_then_demoted(m, m.bench)
    source = source_with(m, m.bench)  # a restarted loop: A's bundle named by the journal only
    take, hold = trade_session(m, source, SESSIONS[1], cycles=2)
    assert is_benchmark(take.bundle_id) and take.status == "traded" and take.submitted
    assert "demoted: rebalancing to the benchmark" in take.messages[0]
    equity = m.fake.equity()
    for ticker in m.bench.tickers:  # the benchmark's equal weights, from A's book
        held = m.fake.positions.get(ticker, 0.0) * m.fake.prices[ticker] / equity
        assert held == pytest.approx(1 / len(m.bench.tickers), abs=0.02)
    assert hold.status == "benchmark" and not hold.submitted
    (demoted,) = events(m.home, "champion_demoted").itertuples()
    assert demoted.bundle_id == m.id_a and "run-a" in demoted.message and "benchmark takes" in demoted.message
    # A restarted loop on the next session: the hand-back is done, nothing more is ordered.
    orders = len(m.fake.orders)
    (again,) = trade_session(m, source_with(m, m.bench), SESSIONS[2], cycles=1)
    assert again.status == "benchmark" and len(m.fake.orders) == orders
    assert len(events(m.home, "champion_demoted")) == 1
    assert set(read_journal(m.home)["orders"]["bundle_id"]) == {m.id_a, m.bench.bundle_id}
    assert_books_reconcile(m)


def test_a_demoted_champion_goes_to_cash_when_the_setting_says_cash(unpromoted):  # noqa: F811
    m = unpromoted
    source = _champion_then_demoted(m, None)  # the same loop: A's bundle in hand
    sell, wait = trade_session(m, source, SESSIONS[1], cycles=2)
    assert is_cash(sell.bundle_id) and sell.submitted and {o.side for o in sell.submitted} == {"sell"}
    assert not any(abs(q) > 1e-9 for q in m.fake.positions.values())  # flat
    assert wait.status == "no_champion" and not wait.submitted
    assert len(events(m.home, "champion_demoted")) == 1
    assert_books_reconcile(m)
