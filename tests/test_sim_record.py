"""The paper-vs-simulator record's arithmetic (app.paper.sim_record, app.paper.sim_replay's ledger),
on figures worked out by hand, and `podracer reconcile` / `podracer status` reading it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from alpaca_fake import minute_bars

from app.cli import main
from app.paper.journal import Journal
from app.paper.sim_record import (
    DayCheck,
    OrderCheck,
    SimRecord,
    day_frame,
    gap_problem,
    merged,
    order_frame,
    read_record,
    record_path,
    summary,
)
from app.paper.sim_replay import reconcile_sessions
from envs.params import EnvParams


def _order(
    session: str, side: str, fill: float | None, model: float, filled: float = 10.0, **kw
) -> OrderCheck:
    return OrderCheck(
        session=session,
        decision_ts=f"{session}T15:00:00+00:00",
        client_order_id=f"pr-{session}-{side}",
        ticker="AAA",
        side=side,
        qty=10.0,
        filled_qty=filled,
        fill_price=fill,
        fill_open=100.0,
        model_qty=10.0,
        model_price=model,
        **kw,
    )


def _day(session: str, paper: float, sim: float, charged: float = 0.3, model: float = 0.25) -> DayCheck:
    return DayCheck(
        session=session, bundle_id="b1", orders=2, start_equity=1000.0, paper_pnl=paper, sim_pnl=sim,
        fees_charged=charged, fees_model=model, fees_sim=model,
    )  # fmt: skip


def _record(bound: float = 10.0) -> SimRecord:
    orders = [
        _order("2024-01-03", "buy", 100.05, 100.02),  # 5 bp paid, the model 2 bp: gap 3 bp
        _order("2024-01-03", "sell", 99.97, 99.96),  # 3 bp, the model 4 bp: gap -1 bp
        _order("2024-01-04", "buy", 100.07, 100.02, filled=5.0),  # half filled, 7 bp vs 2 bp
        _order("2024-01-04", "sell", None, 99.96, filled=0.0),  # nothing filled: no slippage
    ]
    days = [_day("2024-01-03", 10.0, 12.0), _day("2024-01-04", -5.0, -4.0), _day("2024-01-05", 3.0, 3.5)]
    return SimRecord(written_at="2024-01-05T22:00:00+00:00", bound_bps=bound, orders=orders, days=days)


def test_order_figures_by_hand():
    frame = order_frame(_record())
    assert frame["slippage_bps"].tolist()[:3] == pytest.approx([5.0, 3.0, 7.0])
    assert np.isnan(frame["slippage_bps"].iloc[3])
    assert frame["model_bps"].tolist() == pytest.approx([2.0, 4.0, 2.0, 4.0])
    assert frame["gap_bps"].tolist()[:3] == pytest.approx([3.0, -1.0, 5.0])
    assert frame["fill_ratio"].tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0])


def test_summary_by_hand():
    s = summary(_record())
    assert (s["sessions"], s["orders"], s["fills"]) == (3, 4, 3)
    assert s["slippage_bps"] == pytest.approx(5.0)  # (5 + 3 + 7) / 3
    assert s["slippage_median_bps"] == pytest.approx(5.0)
    assert s["model_bps"] == pytest.approx(3.0)  # (2 + 4 + 2 + 4) / 4
    assert s["gap_bps"] == pytest.approx(7.0 / 3.0)
    assert s["fill_ratio"] == pytest.approx(25.0 / 40.0)  # shares filled over the model's, same open
    assert s["over_cap"] == 0
    capped = _record().model_copy(update={"orders": [_order("2024-01-03", "buy", 100.05, 100.02, cap=8.0)]})
    assert summary(capped)["over_cap"] == 1  # 10 shares filled where the model's cap allowed 8
    assert s["fee_gap"] == pytest.approx(3 * 0.05)
    assert (s["paper_pnl"], s["sim_pnl"]) == (pytest.approx(8.0), pytest.approx(11.5))
    paper, sim = [10.0, -5.0, 3.0], [12.0, -4.0, 3.5]
    assert s["pnl_correlation"] == pytest.approx(float(np.corrcoef(paper, sim)[0, 1]))


def test_equity_curves_by_hand():
    days = day_frame(_record())
    assert days["paper_equity"].tolist() == pytest.approx([1010.0, 995.0, 1003.0])
    # the paper equity less the execution gap summed so far: -2, then +(-1), then +(-0.5)
    assert days["sim_equity"].tolist() == pytest.approx([1012.0, 998.0, 1006.5])
    assert days["fee_gap"].tolist() == pytest.approx([0.05] * 3)


def test_the_gap_bound():
    # The newest sessions' gaps: 3, -1, 5 bp -> 7/3 bp.
    assert gap_problem(_record(bound=10.0)) is None
    message = gap_problem(_record(bound=2.0))
    assert message is not None and "+2.3 bp" in message and "over the last 3 fills" in message
    assert gap_problem(None) is None


def test_a_replayed_session_replaces_its_old_rows():
    old = _record()
    new = SimRecord(
        written_at="2024-01-06T22:00:00+00:00",
        bound_bps=10.0,
        orders=[_order("2024-01-05", "buy", 100.01, 100.02)],
        days=[_day("2024-01-05", 4.0, 4.0), _day("2024-01-08", 1.0, 1.0)],
    )
    both = merged(old, new)
    assert [d.session for d in both.days] == ["2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08"]
    assert both.days[2].paper_pnl == 4.0 and len(both.orders) == 5


class _Bars:
    """A broker that only serves bars (the replay asks for nothing else)."""

    def __init__(self, bars: pd.DataFrame) -> None:
        self.bars = bars

    def latest_bars(self, tickers, start, end, interval="1m"):  # noqa: ANN001
        b = self.bars
        return b[b.ticker.isin(list(tickers)) & (b.timestamp <= pd.Timestamp(end))].reset_index(drop=True)


DECISION = pd.Timestamp("2024-01-04 15:00", tz="UTC")


def _one_session(journal: Journal) -> None:
    """Session 2024-01-04: the broker's book before (10 AAA, $10,000) and after a buy of 5 at $101
    that cost $0.25 of fees."""
    journal.start_session("2024-01-04", bundle_id="b1", bundle_path=None, run_id=None, source="bundle")
    journal.decision(
        decision_ts=DECISION.isoformat(), bundle_id="b1", dry_run=False, equity=11_000.0, cash=10_000.0,
        tickers=["AAA"], current_weights=[0.1], target_weights=[0.15], policy_weights=[0.15], skipped=[],
        session="2024-01-04", account_equity=11_000.0, holdings={"AAA": (10.0, 100.0)}, prices=[100.0],
    )  # fmt: skip
    journal.order(
        client_order_id="pr-1", decision_ts=DECISION.isoformat(), bundle_id="b1", ticker="AAA", side="buy",
        qty=5.0, est_price=100.0, status="filled", broker_order_id="o-1", filled_qty=5.0,
        filled_avg_price=101.0,
    )  # fmt: skip
    journal.pnl(
        decision_ts=DECISION.isoformat(), equity=0.0, cash=10_000.0 - 505.0 - 0.25, last_equity=None,
        bundle_id="b1", holdings={"AAA": (15.0, 101.0)},
    )  # fmt: skip


BARS = minute_bars(["AAA"], "2024-01-03 14:30", "2024-01-04 21:00", missing=0.0, seed=3)


def test_the_days_ledger_by_hand(tmp_path):
    """One session: the paper book ends as the broker's, the simulated one takes the model's fill
    instead of the broker's; both marked at the closes."""
    bars, decision = BARS, DECISION
    with Journal.for_home(tmp_path) as journal:
        _one_session(journal)
        record = reconcile_sessions(tmp_path, journal, _Bars(bars), bound_bps=10.0)
    (o,) = record.orders
    (d,) = record.days
    at = bars.set_index("timestamp")
    fill_open = float(at.loc[decision + pd.Timedelta(minutes=1), "open"])
    prev_close = float(at.loc[pd.Timestamp("2024-01-03 20:59", tz="UTC"), "close"])
    last_close = float(at.loc[pd.Timestamp("2024-01-04 20:59", tz="UTC"), "close"])
    assert o.fill_open == pytest.approx(fill_open)
    assert o.model_qty == 5.0 and o.model_price > fill_open * (1 + EnvParams().slippage_bps * 1e-4)
    start = 10_000.0 + 10 * prev_close
    assert d.start_equity == pytest.approx(start)
    assert d.paper_pnl == pytest.approx(10_000.0 - 505.25 + 15 * last_close - start)
    assert d.sim_pnl == pytest.approx(10_000.0 - 5 * o.model_price + 15 * last_close - start)
    assert d.fees_charged == pytest.approx(0.25) and d.fees_model == 0.0  # Alpaca charges no fee on a buy
    assert read_record(tmp_path) == record and record_path(tmp_path).is_file()


def test_reconcile_prints_the_record_and_status_reports_the_gap(tmp_path, capsys, monkeypatch):
    from rich.console import Console

    from app import context

    monkeypatch.setattr(context, "console", Console(width=160))  # the tables on one line each
    home = tmp_path / "home"
    with Journal.for_home(home) as journal:
        journal.event("start", "a journal")
    _record(bound=2.0).write(record_path(home))
    assert main(["--home", str(home), "reconcile", "--no-books", "--no-replay"]) == 0
    out = capsys.readouterr().out
    assert "paper vs simulator, per session" in out and "2024-01-04" in out
    assert "+$10.00" in out and "+$12.00" in out  # the first day's paper and simulated P&L
    assert "problem: paper fills +2.3 bp from the execution model" in out
    assert main(["--home", str(home), "status", "--json"]) == 1
    state = json.loads(capsys.readouterr().out)
    assert any(p.startswith("paper fills +2.3 bp") for p in state["problems"])
    _record(bound=10.0).write(record_path(home))
    main(["--home", str(home), "status", "--json"])
    assert not any("paper fills" in p for p in json.loads(capsys.readouterr().out)["problems"])


def test_the_paper_loop_replays_each_session_after_the_close(tmp_path):
    """A closed cycle after a traded session runs the replay (``on_close``): the record gains the
    session and the journal says so; without bars the failure is a warning event, the loop goes on."""
    from datetime import UTC, datetime
    from functools import partial
    from types import SimpleNamespace

    from test_paper_support import SimBroker

    from app.paper.champion import FixedBundle
    from app.paper.cycle import run_paper
    from app.paper.journal import read_journal
    from app.paper.options import PaperOptions
    from app.workflows.paper import replay_after_close

    source = FixedBundle(SimpleNamespace(bundle_id="b1", interval="1m", decision_interval=15))
    after_close = datetime(2024, 1, 4, 22, 0, tzinfo=UTC)
    for home, bars in ((tmp_path / "none", BARS.iloc[:0]), (tmp_path / "bars", BARS)):
        broker = SimBroker(bars, after_close, cash=10_000.0, qty={}, is_open=False)
        with Journal.for_home(home) as journal:
            _one_session(journal)
            hook = partial(replay_after_close, home, journal, broker, 10.0)
            results = run_paper(source, broker, journal, PaperOptions(), max_cycles=1, on_close=hook)
        assert [r.status for r in results] == ["closed"]
        events = read_journal(home)["events"]
        said = events.loc[events["kind"] == "sim_reconcile", ["level", "message"]].to_numpy().tolist()
        if bars.empty:
            assert read_record(home) is None
            assert (
                len(said) == 1 and said[0][0] == "warning" and "replay in the simulator failed" in said[0][1]
            )
        else:
            assert [d.session for d in read_record(home).days] == ["2024-01-04"]
            assert len(said) == 1 and said[0][1].startswith("2024-01-04: paper P&L")
