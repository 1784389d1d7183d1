"""Paper cycles on the env's decision grid, anchored at each session's open."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest
from alpaca_fake import FakeAlpaca

from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy
from app.paper.cycle import next_wait, run_paper
from app.paper.journal import Journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits
from app.paper.schedule import BAR_SETTLE_S, next_decision_time, session_decision_times

FAST = BrokerRetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01, timeout=0.5)
SETTLE = pd.Timedelta(seconds=BAR_SETTLE_S)


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text, tz="UTC")


def test_a_full_session_has_26_decisions_from_its_first_bar():
    due = session_decision_times(pd.Timestamp("2024-01-03"), "1m", 15)
    assert len(due) == 26  # bars 0, 15, ..., 375 of 390
    assert due[0] == utc("2024-01-03 14:31") + SETTLE  # the 09:30 bar has completed
    assert due[-1] == utc("2024-01-03 20:46") + SETTLE  # bar 375, 15:45 ET
    assert (pd.Series(due).diff().dropna() == pd.Timedelta(minutes=15)).all()


def test_an_early_close_has_14_and_five_minute_bars_their_own_grid():
    assert len(session_decision_times(pd.Timestamp("2024-11-29"), "1m", 15)) == 14  # 210 bars
    due = session_decision_times(pd.Timestamp("2024-01-03"), "5m", 3)
    assert len(due) == 26 and due[0] == utc("2024-01-03 14:35") + SETTLE
    assert due[1] == utc("2024-01-03 14:50") + SETTLE


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        ("2024-01-03 12:00", "2024-01-03 14:31"),  # before the open: the session's first decision
        ("2024-01-03 14:31:10", "2024-01-03 14:46"),  # exactly at a due time: the next one
        ("2024-01-03 15:07", "2024-01-03 15:16"),  # mid-session: back on the grid
        ("2024-01-03 20:50", "2024-01-04 14:31"),  # after the last decision: tomorrow's first
        ("2024-01-05 22:00", "2024-01-08 14:31"),  # Friday evening: Monday's first
        ("2024-12-24 19:00", "2024-12-26 14:31"),  # early close, then the Christmas holiday
    ],
)
def test_next_decision_time(now, expected):
    assert next_decision_time(utc(now), "1m", 15) == utc(expected) + SETTLE


def test_a_daily_bundle_has_no_grid():
    assert next_decision_time(utc("2024-01-03 12:00"), "1d", 1) is None


class _Bundle:
    interval, decision_interval = "1m", 15


def test_next_wait_reads_the_brokers_clock():
    with FakeAlpaca(prices={"AAA": 10.0}, cash=1e5) as fake:
        from alpaca_fake import point_at

        with pytest.MonkeyPatch.context() as mp:
            point_at(fake, mp)
            broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
            fake.set_time(utc("2024-01-03 15:07"))
            assert next_wait(_Bundle(), broker, closed=False, fallback=900.0) == pytest.approx(
                9 * 60 + BAR_SETTLE_S
            )
            fake.set_time(utc("2024-01-03 14:00"))  # closed: until the first decision, at least a minute
            assert next_wait(_Bundle(), broker, closed=True, fallback=900.0) == pytest.approx(
                31 * 60 + BAR_SETTLE_S
            )
            fake.set_time(utc("2024-01-05 22:00"))  # a weekend away: look again within the hour
            assert next_wait(_Bundle(), broker, closed=True, fallback=900.0) == 3600.0
            assert next_wait(None, broker, closed=True, fallback=900.0) == 3600.0


def test_a_loop_started_before_the_open_decides_at_the_first_bar(env):
    """Started twenty minutes before the last session's open, the loop waits for the open's first
    bar and then decides on bars 0 and 15 of the session, as the backtest did."""
    fake = env["fake"]
    session = env["decision"].tz_convert("America/New_York").tz_localize(None).normalize()
    (open_ts,) = session_decision_times(session, "1m", 1, settle=0)[:1] - pd.Timedelta(minutes=1)
    fake.set_time(open_ts - pd.Timedelta(minutes=20))

    def sleep(seconds: float) -> None:
        fake.set_time(pd.Timestamp(fake.now) + timedelta(seconds=seconds))

    options = PaperOptions(
        limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None), fill_timeout=0.5, fill_poll=0.01
    )
    with Journal.for_home(env["home"]) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        results = run_paper(env["bundle"], broker, journal, options, sleep=sleep, max_cycles=3)
    assert [r.status for r in results] == ["closed", "traded", "traded"]
    assert [r.decision_ts for r in results[1:]] == [open_ts, open_ts + pd.Timedelta(minutes=15)]
