"""Paper trading against the simulator (app.paper.sim_replay, app.paper.sim_record): a month of paper
sessions on the local fake broker's realistic mode (fills at the next bar's open plus a planted
half-spread, after a delay, partly), then the replay: it must recover the planted figures."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from alpaca_fake import FakeAlpaca, point_at
from test_paper_support import make_run

from app.bundle import load_bundle
from app.export import export_bundle
from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy
from app.paper.cycle import run_cycle
from app.paper.journal import Journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits
from app.paper.sim_record import read_record, record_path, summary
from app.paper.sim_replay import reconcile_sessions
from data.synthetic import SyntheticSpec, generate, to_frame
from envs.fee_schedule import rates_on_date
from envs.params import EnvParams

FAST = BrokerRetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01, timeout=5.0)
PLANTED_SPREAD_BPS = 4.0  # the fake fills every order this far past the fill bar's open
FILL_RATIO = 0.75  # and fills this share of it
FILL_DELAY_S = 0.02  # this long after the order arrives
HISTORY = 22  # sessions of bars before the month: the execution model's 20-session windows
MONTH = 21  # paper sessions

# A month of cycles, each fetching 22 sessions of minute bars over HTTP: about 20 s of CPU.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """A month of one-cycle paper sessions of a two-ticker bundle on the realistic fake."""
    root = tmp_path_factory.mktemp("sim-month")
    bundle = load_bundle(export_bundle(make_run(root, num_tickers=2).run_dir, exporter="torchscript"))
    spec = SyntheticSpec(num_tickers=2, num_sessions=HISTORY + MONTH, seed=11, start="2024-02-01")
    bars = to_frame(generate(spec))
    days = sorted(
        pd.DatetimeIndex(bars["timestamp"]).tz_convert("America/New_York").strftime("%Y-%m-%d").unique()
    )
    # The fake charges the rates in force on the month's sessions (the schedule's, all one row there).
    sec_fee_rate, taf_per_share, taf_max = rates_on_date(EnvParams(), days[HISTORY])
    fake = FakeAlpaca(
        cash=100_000.0,
        bars=bars,
        fill_mode="realistic",
        spread_bps=PLANTED_SPREAD_BPS,
        fill_ratio=FILL_RATIO,
        fill_delay=FILL_DELAY_S,
        sec_fee_rate=sec_fee_rate,
        taf_per_share=taf_per_share,
        taf_max=taf_max,
    )
    monkeypatch = pytest.MonkeyPatch()
    home = root / "home"
    options = PaperOptions(
        limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None), fill_timeout=0.05, fill_poll=0.01
    )
    with fake:
        point_at(fake, monkeypatch)
        started = time.monotonic()
        statuses = []
        with Journal.for_home(home) as journal:
            for day in days[HISTORY:]:
                fake.set_time(pd.Timestamp(f"{day} 15:00", tz="UTC"))
                broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
                statuses.append(run_cycle(bundle, broker, journal, options).status)
            fake.set_time(pd.Timestamp(f"{days[-1]} 21:30", tz="UTC"))  # after the last close
            record = reconcile_sessions(
                home, journal, AlpacaBroker(retry=FAST, sleep=lambda s: None), bound_bps=10.0
            )
        yield SimpleNamespace(
            home=home, record=record, fake=fake, statuses=statuses, seconds=time.monotonic() - started
        )
    monkeypatch.undo()


def test_the_reconciliation_recovers_the_planted_slippage_and_tracks_daily_pnl(month):
    assert month.statuses.count("traded") == MONTH, month.statuses
    figures = summary(month.record)
    assert figures["sessions"] == MONTH
    assert figures["fills"] >= MONTH  # at least an order a day filled
    # The broker's fills against bar t+1's open: the planted half-spread, within 0.5 bp.
    assert figures["slippage_bps"] == pytest.approx(PLANTED_SPREAD_BPS, abs=0.5)
    assert figures["slippage_p10_bps"] == pytest.approx(PLANTED_SPREAD_BPS, abs=0.5)
    assert figures["slippage_p90_bps"] == pytest.approx(PLANTED_SPREAD_BPS, abs=0.5)
    # The partial fills: the broker filled FILL_RATIO of what the model fills (no volume cap here).
    assert figures["fill_ratio"] == pytest.approx(FILL_RATIO, abs=0.01)
    # The fees the fake took are Alpaca's, which the model charges too: no gap beyond cent rounding.
    assert month.fake.fees_charged > 0
    assert figures["fees_charged"] == pytest.approx(month.fake.fees_charged, abs=0.01 * MONTH)
    assert abs(figures["fee_gap"]) <= 0.01 * MONTH
    assert figures["pnl_correlation"] >= 0.95


def test_the_record_is_written_next_to_the_journal_and_reads_back(month):
    assert record_path(month.home).parent == month.home / "paper"
    again = read_record(month.home)
    assert again is not None and again.model_dump() == month.record.model_dump()


def test_the_model_side_is_the_envs_fill_at_the_next_open(month):
    """Every order filled: the model's price is the fill bar's open moved by a cost at least the
    env's fixed floor (slippage + half-spread), on the order's side."""
    floor = (EnvParams().slippage_bps + EnvParams().spread_bps) * 1e-4
    for o in month.record.orders:
        assert o.fill_open is not None and o.model_price is not None
        sign = 1.0 if o.side == "buy" else -1.0
        assert sign * (o.model_price / o.fill_open - 1.0) >= floor - 1e-9
        assert o.filled_qty == pytest.approx(FILL_RATIO * o.qty, rel=1e-6)
        assert o.model_qty == pytest.approx(o.qty)
    assert np.isfinite([d.paper_pnl for d in month.record.days]).all()
