"""backtests.report: the <run>/backtest/ files and their schemas (a contract with the dashboard)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import long_positive_first_feature

from backtests import engine, report, selection
from backtests import metrics as m
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.metrics_model import METRIC_KEYS, MetricsDocument
from data.calendar import session_dates
from data.toy import toy_market
from envs.execution import asset_fees
from envs.fees import rates_on
from envs.trading import EnvParams

# Long the assets whose first feature is positive: trades every decision, deterministic.
MOMENTUM = long_positive_first_feature(num_assets=4, num_features=8)


@pytest.fixture(scope="module")
def result():
    market = toy_market(num_steps=390 * 4, num_assets=4, num_features=8, seed=2)
    return engine.run_backtest(market, EnvParams(decision_interval=30), {"champion": MOMENTUM})


def test_write_report_files_and_schemas(tmp_path, result, capsys):
    doc = report.write_report(
        tmp_path, result, window="test", num_trials=12, annualization=TRADING_DAYS_PER_YEAR
    )
    out = tmp_path / "backtest"
    assert capsys.readouterr().out == ""  # pyfolio's HTML printing is swallowed
    names = list(result.names)
    assert names == ["champion", "buy_and_hold", "cash", "equal_weight"]

    saved = json.loads((out / "metrics.json").read_text())
    for key in ("window", "start", "end", "annualization", "period", "benchmark", "num_trials", "strategies"):
        assert key in saved
    assert (saved["window"], saved["annualization"], saved["period"]) == ("test", 252, "daily")
    assert (saved["start"], saved["end"]) == ("2024-01-02", "2024-01-05")
    assert saved["benchmark"] == "buy_and_hold" and saved["num_trials"] == 12
    assert saved["tearsheet"] in ("pyfolio", "fallback")
    assert set(saved["strategies"]) == set(names)
    for row in saved["strategies"].values():
        assert set(row) == set(METRIC_KEYS)
        assert all(v is None or isinstance(v, float) for v in row.values())
    # Cash: no Sharpe ratio (null, not NaN), zero return and costs.
    assert saved["strategies"]["cash"]["sharpe_ratio"] is None
    assert saved["strategies"]["cash"]["cum_returns_final"] == 0.0
    assert doc.strategies["champion"].sharpe_ratio == saved["strategies"]["champion"]["sharpe_ratio"]
    # What was written reads back as the document returned (the model round-trips).
    assert MetricsDocument.read(out / "metrics.json") == doc and saved["schema_version"] == 1
    assert not doc.model_extra  # every key the report writes is a field of the model

    equity = pd.read_parquet(out / "equity.parquet")
    assert list(equity.columns) == ["timestamp", *names]
    assert str(equity["timestamp"].dt.tz) == "UTC"
    assert len(equity) == result.num_steps + 1
    assert equity[names].iloc[0].tolist() == [1e6] * 4
    np.testing.assert_allclose(equity[names].to_numpy()[1:], result.equity.numpy())

    daily = pd.read_parquet(out / "daily_returns.parquet")
    assert list(daily.columns) == ["date", *names] and len(daily) == 4
    np.testing.assert_allclose(daily[names].to_numpy(), result.daily_returns()[1].numpy())

    positions = pd.read_parquet(out / "positions.parquet")
    assert list(positions.columns) == ["timestamp", "strategy", "ticker", "weight"]
    assert set(positions["strategy"]) == {"champion", "buy_and_hold", "equal_weight"}  # cash holds nothing
    last = positions[
        (positions["strategy"] == "buy_and_hold") & (positions["timestamp"] == positions["timestamp"].max())
    ]
    assert last["weight"].sum() == pytest.approx(1.0, abs=1e-4)

    trades = pd.read_parquet(out / "trades.parquet")
    assert list(trades.columns) == [
        "timestamp", "strategy", "ticker", "notional", "cost",
        "shares", "fill_price", "spread_cost", "impact_cost", "fill_volume", "participation",
    ]  # fmt: skip
    # Every row is a fill a reader can audit: at least the minimum order, shares x price = notional,
    # its share of the fill bar's volume within the cap, the execution costs inside the total cost.
    params = EnvParams(decision_interval=30)
    assert (trades["notional"].abs() >= params.min_order_notional).all()
    np.testing.assert_allclose(trades["shares"] * trades["fill_price"], trades["notional"], rtol=1e-5)
    np.testing.assert_allclose(trades["participation"], trades["shares"].abs() / trades["fill_volume"])
    assert (trades["participation"] <= params.max_participation * (1 + 1e-6)).all()
    # (The toy market's first bars have no volatility history yet: no impact there.)
    assert (trades["spread_cost"] > 0).all() and (trades["impact_cost"] >= 0).all()
    assert (trades["impact_cost"] > 0).mean() > 0.9
    traded = torch.as_tensor(trades["shares"].to_numpy().copy(), dtype=torch.float64)
    # The broker's fees at the rates of each fill's session date (envs.fees), one order per row.
    days = session_dates(trades["timestamp"]).values.astype("datetime64[D]")
    rates = torch.as_tensor(rates_on(params, days))
    price = torch.as_tensor(trades["fill_price"].to_numpy().copy())
    commission = asset_fees(params, traded[:, None], price[:, None], rates).squeeze(1).numpy()
    np.testing.assert_allclose(
        trades["cost"], commission + trades["spread_cost"] + trades["impact_cost"], rtol=1e-4
    )
    bh = trades[trades["strategy"] == "buy_and_hold"]
    assert len(bh) == 4 and bh["timestamp"].nunique() == 1  # one buy per asset, at bar 1's open
    assert bh["cost"].sum() == pytest.approx(result.costs[:, 1].sum().item(), rel=1e-5)
    assert trades["cost"].sum() == pytest.approx(result.costs.sum().item(), rel=1e-5)
    assert (out / "tearsheet.png").stat().st_size > 1000


def test_every_strategy_has_its_psr_and_the_selected_one_its_out_of_sample_test(result):
    metrics = report.compute_metrics(result, annualization=TRADING_DAYS_PER_YEAR)
    champion = metrics["champion"]
    _, daily = result.daily_returns()
    assert champion["probabilistic_sharpe_ratio"] == pytest.approx(
        selection.probabilistic_sharpe_ratio(daily[:, 0]).item()
    )
    assert "deflated_sharpe_ratio" not in champion
    # The headline Sharpe is the daily one with 252 periods a year.
    assert champion["sharpe_ratio"] == pytest.approx(m.sharpe_ratio(daily[:, 0], annualization=252).item())
    doc = report.metrics_document(
        result,
        window="test",
        earlier_looks=[0.1, -0.2],
        seed=5,
        market="m",
        annualization=TRADING_DAYS_PER_YEAR,
    )
    oos = doc.oos_test
    assert (oos.strategy, oos.looks, oos.seed, oos.market) == ("champion", 3, 5, "m")
    assert set(oos.excess) == {"buy_and_hold", "equal_weight"} and oos.benchmark == "buy_and_hold"
    excess = daily[:, 0] - daily[:, result.names.index("buy_and_hold")]
    assert oos.excess["buy_and_hold"].mean_per_day == pytest.approx(excess.mean().item())
    assert doc.verdict_outcome == "not measurable"  # 4 sessions


def test_large_runs_are_summarized_per_session(tmp_path, result):
    positions, pos_freq = report.positions_frame(result, max_rows=10)
    trades, trade_freq = report.trades_frame(result, max_rows=10)
    assert (pos_freq, trade_freq) == ("session", "session")
    assert positions["timestamp"].nunique() == 4
    assert trades["cost"].sum() == pytest.approx(result.costs.sum().item(), rel=1e-5)
    full, _ = report.trades_frame(result)
    np.testing.assert_allclose(
        trades.groupby("strategy", observed=True)["notional"].sum(),
        full.groupby("strategy", observed=True)["notional"].sum(),
        rtol=1e-6,
    )


def test_one_day_window_falls_back_to_a_simple_figure(tmp_path, caplog):
    market = toy_market(num_steps=390, num_assets=4, num_features=8, seed=3)
    res = engine.run_backtest(market, EnvParams(decision_interval=30), {"champion": MOMENTUM})
    with caplog.at_level("INFO", logger="backtests.report"):
        doc = report.write_report(tmp_path, res, window="valid", annualization=TRADING_DAYS_PER_YEAR)
    assert doc.tearsheet == "fallback"
    assert "simple equity/drawdown figure" in caplog.text
    assert (tmp_path / "backtest" / "tearsheet.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "backtest" / "metrics.json").read_text())
    assert saved["strategies"]["champion"]["annual_volatility"] is None  # one daily return
    assert math.isfinite(saved["strategies"]["champion"]["cum_returns_final"])
    assert not list((tmp_path / "backtest").glob(".*tmp"))  # atomic writes leave no temp files
    assert torch.is_tensor(res.equity)
