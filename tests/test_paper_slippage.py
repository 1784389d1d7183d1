"""Paper trading's check of the execution model (app.paper.slippage): each order journals the fill
price the model predicts; `podracer status` and the Paper page compare it with the broker's fills."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from app.paper.fill_model import ExecutionCosts, execution_costs, fill_inputs, impact_scales, model_price
from app.paper.journal import Journal, journal_path, read_journal
from app.paper.journal_schema import SCHEMA_VERSION, statements
from app.paper.observation import fetch_start
from app.paper.slippage import slippage_report
from data.align import align_panel, align_ticker
from data.calendar import bars_per_session


def test_impact_scale_and_model_price_by_hand():
    # daily bars (one bar a session): daily_vol = sqrt(mean(r**2)), adv = mean(volume)
    close = np.array([[100.0], [110.0], [99.0]])
    volume = np.array([[1000.0], [3000.0], [2000.0]])
    scale = impact_scales(close, volume, np.arange(3))
    r = np.log([1.0, 1.1, 0.9])
    assert scale[0] == pytest.approx(math.sqrt(np.mean(r**2)) / math.sqrt(2000.0), rel=1e-5)
    costs = ExecutionCosts(slippage_bps=1.0, spread_bps=2.0, impact_coef=0.5)
    frac = 3e-4 + 0.5 * scale[0] * math.sqrt(400.0)
    assert model_price(costs, 50.0, "buy", 400.0, scale[0]) == pytest.approx(50.0 * (1 + frac), rel=1e-6)
    assert model_price(costs, 50.0, "sell", 400.0, scale[0]) == pytest.approx(50.0 * (1 - frac), rel=1e-6)
    assert impact_scales(close, np.zeros_like(volume), np.arange(3))[0] == 0.0  # no volume: no impact


def test_a_fill_at_a_known_price_gives_realized_and_predicted_bps(env):
    from test_paper import cycle

    fake, bundle, decision = env["fake"], env["bundle"], env["decision"]
    fake.slippage_bps = 7.0  # every fill 7 bp worse than the decision bar's close
    assert cycle(env).status == "traded"
    orders = read_journal(env["home"])["orders"]
    filled = orders[orders["filled_qty"] > 0]
    assert len(filled) > 0 and filled["model_price"].notna().all()
    # The model's inputs by hand: the fetched bars up to the decision bar, on the bundle's grid.
    now = decision + pd.Timedelta(minutes=1)
    start = pd.Timestamp(
        fetch_start(now.to_pydatetime(), bundle.interval, int(bundle.feature_spec["lookback"]))
    )
    bars = env["run"].bars
    bars = bars[(bars["timestamp"] >= start) & (bars["timestamp"] <= decision)]
    frames = {t: align_ticker(bars[bars.ticker == t].reset_index(drop=True), bundle.interval).frame
              for t in bundle.tickers}  # fmt: skip
    panel = align_panel(frames, bundle.interval, min_coverage=0.0)
    row = int(np.flatnonzero(pd.DatetimeIndex(panel.grid.timestamps, tz="UTC") <= decision)[-1])
    costs = execution_costs(bundle.manifest)
    sid = panel.grid.session_id[: row + 1]
    inputs = fill_inputs(
        costs,
        {name: getattr(panel, name)[: row + 1] for name in ("close", "high", "low", "volume")},
        sid,
        int(sid[-1]),  # the fill bar: the next minute of the same session
        bars_per_session(bundle.interval),
    )
    scales = dict(zip(panel.tickers, inputs.impact, strict=True))
    halves = dict(zip(panel.tickers, inputs.half * 1e4, strict=True))
    half_bps = costs.slippage_bps + costs.spread_bps  # the floor of the estimated half-spread
    for o in filled.itertuples():
        sign = 1.0 if o.side == "buy" else -1.0
        realized = sign * (o.filled_avg_price / o.est_price - 1) * 1e4
        predicted = sign * (o.model_price / o.est_price - 1) * 1e4
        assert realized == pytest.approx(7.0, abs=0.01)
        by_hand = halves[o.ticker] + costs.impact_coef * scales[o.ticker] * math.sqrt(o.qty) * 1e4
        assert predicted == pytest.approx(by_hand, rel=1e-4) and predicted > half_bps
    report = slippage_report(orders)
    assert report["bundle_id"].tolist() == [bundle.bundle_id]
    assert int(report["fills"].iloc[0]) == len(filled)
    assert report["realized_bps"].iloc[0] == pytest.approx(7.0, abs=0.01)
    per_ticker = slippage_report(orders, by_ticker=True)
    assert set(per_ticker["ticker"]) == set(filled["ticker"])


def _priced_journal(home):
    """Two filled orders of bundle b1: a buy 5 bp over the close (model 2 bp), a sell 3 bp under (model 4)."""
    with Journal.for_home(home) as journal:
        ts = "2024-01-03T15:00:00+00:00"
        journal.start_session(
            "2024-01-03", bundle_id="b1", bundle_path=None, run_id="run-7", source="champion"
        )
        for cid, ticker, side, fill, model in (
            ("pr-1", "AAA", "buy", 100.05, 100.02),
            ("pr-2", "BBB", "sell", 49.985, 49.98),
        ):
            journal.order(
                client_order_id=cid, decision_ts=ts, bundle_id="b1", ticker=ticker, side=side, qty=10.0,
                est_price=100.0 if ticker == "AAA" else 50.0, status="filled", filled_qty=10.0,
                filled_avg_price=fill, model_price=model,
            )  # fmt: skip


def test_status_shows_the_slippage_line(tmp_path, capsys):
    home = tmp_path / "home"
    _priced_journal(home)
    main(["--home", str(home), "status"])
    out = capsys.readouterr().out
    assert "slippage      champion b1 (run-7): realized 4.0 bp vs model 3.0 bp over 2 fills" in out


def test_paper_page_shows_slippage_per_ticker(tmp_path, monkeypatch):
    from test_dashboard_app import _app, _no_exception, _open, _texts

    home = tmp_path / "home"
    _priced_journal(home)
    at = _open(_app(home, monkeypatch), "paper")
    _no_exception(at)
    assert "Slippage vs the execution model" in _texts(at.subheader)
    assert any("realized 4.0 bp vs model 3.0 bp over 2 fills" in t for t in _texts(at.caption))
    table = next(df.value for df in at.dataframe if "realized_bps" in df.value.columns)
    assert table["ticker"].tolist() == ["AAA", "BBB"]
    assert table["realized_bps"].tolist() == pytest.approx([5.0, 3.0])
    assert table["model_bps"].tolist() == pytest.approx([2.0, 4.0])


def test_a_journal_without_model_prices_loads_and_migrates(tmp_path):
    path = journal_path(tmp_path)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as old:  # a version 3 journal: orders without model_price
        for statement in statements():
            old.execute(statement.replace(",\n    model_price REAL", ""))
        old.execute(
            "INSERT INTO orders (client_order_id, recorded_at, decision_ts, bundle_id, ticker, side, qty, "
            "est_price, status, filled_qty, filled_avg_price) VALUES ('pr-1', '2024-01-03T15:00:01+00:00', "
            "'2024-01-03T15:00:00+00:00', 'b1', 'AAA', 'buy', 1.0, 10.0, 'filled', 1.0, 10.01)"
        )
        old.execute("PRAGMA user_version = 3")
        assert "model_price" not in {r[1] for r in old.execute("PRAGMA table_info(orders)")}
    before = read_journal(tmp_path)  # read-only: the column reads as missing
    assert before["orders"]["model_price"].isna().all() and slippage_report(before["orders"]).empty
    with Journal.for_home(tmp_path) as journal:
        journal.event("start", "after the upgrade")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    after = read_journal(tmp_path)["orders"]
    assert after["client_order_id"].tolist() == ["pr-1"] and after["model_price"].isna().all()
    assert slippage_report(after).empty  # an unpriced fill is left out, not counted as 0
