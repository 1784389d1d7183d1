"""Parity: replaying the backtest's bars through paper trading gives the same target weights at the
same timestamps as ``backtests.engine.run_backtest`` with the torch policy.

The backtest runs the champion over the valid+test sessions and records, at every decision, the
observation it saw and the action it took. For a sample of those decisions the paper cycle replays
the raw bars up to the decision bar (with the book the backtest held then: cash and shares are read
back from the observation, which is scale-free) and must decide on the same bar with the same
weights: raw bars -> the shared feature code -> observation -> onnxruntime.
"""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
import torch
from alpaca_fake import FakeAlpaca, point_at
from test_paper_support import DECISION_INTERVAL, SimBroker, make_run

from app.bundle import load_bundle
from app.cli import main
from app.export import export_bundle
from app.paper.cycle import run_cycle
from app.paper.journal import Journal, read_journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits
from backtests.engine import run_backtest
from envs.trading import EnvParams

NO_LIMITS = RiskLimits(max_order_notional=1e12, daily_loss_limit=None)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    home = tmp_path_factory.mktemp("parity-home")
    run = make_run(home)
    bundle = load_bundle(export_bundle(run.run_dir, exporter="torchscript"))
    splits = run.splits
    # valid + test sessions: the feature lookback (one session) is fully inside the history before them
    market = splits.full.slice(splits.train.num_steps, splits.full.num_steps)
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def recording_policy(obs: torch.Tensor) -> torch.Tensor:
        action = run.policy.act(obs, deterministic=True)
        seen.append((obs[0].numpy().copy(), action[0].numpy().copy()))
        return action

    params = EnvParams(decision_interval=DECISION_INTERVAL, broker="flat", cost_rate=0.002, slippage_bps=1.0)
    result = run_backtest(market, params, {"champion": recording_policy}, baselines=("cash",))
    decision_bars = np.arange(len(seen)) * DECISION_INTERVAL
    timestamps = pd.DatetimeIndex(market.timestamps[decision_bars], tz="UTC")
    return home, run, bundle, market, result, seen, timestamps


def _book(obs: np.ndarray, closes: np.ndarray, num_assets: int, num_features: int, value: float = 1e6):
    """Cash and shares that reproduce the observation's cash fraction and position weights."""
    weights = obs[2:].reshape(num_assets, 2 + num_features)[:, 0].astype(np.float64)
    return float(obs[0]) * value, weights * value / closes


def test_backtest_and_paper_dry_run_agree(replay, tmp_path):
    home, run, bundle, market, result, seen, timestamps = replay
    assert len(seen) == result.equity.shape[0] > 20
    bars = run.bars
    moved = 0
    for k in range(0, len(seen), 5):
        obs, action = seen[k]
        ts = timestamps[k]
        closes = bars[bars.timestamp == ts].set_index("ticker").loc[list(bundle.tickers), "close"].to_numpy()
        cash, shares = _book(obs, closes, bundle.num_assets, bundle.num_features)
        moved += int(np.any(shares > 0))
        now = (ts + pd.Timedelta(minutes=1)).to_pydatetime()
        broker = SimBroker(
            bars[bars.timestamp <= ts + timedelta(minutes=1)],
            now,
            cash,
            dict(zip(bundle.tickers, shares, strict=True)),
        )
        with Journal(tmp_path / f"j{k}.sqlite") as journal:
            out = run_cycle(bundle, broker, journal, PaperOptions(limits=NO_LIMITS, dry_run=True))
        assert out.decision_ts == ts, f"decision {k}: paper decided on {out.decision_ts}, backtest on {ts}"
        got = np.array([out.target_weights[t] for t in bundle.tickers])
        np.testing.assert_allclose(got, action, atol=2e-5, err_msg=f"decision {k} at {ts}")
        assert not broker.submitted
    assert moved >= 2  # the comparison covered books with positions, not only all-cash ones


def test_cli_dry_run_replay_matches_backtest(replay, monkeypatch, capsys):
    """The same through `podracer paper --dry-run --once` against the local fake Alpaca (HTTP)."""
    home, run, bundle, market, result, seen, timestamps = replay
    k = 3
    obs, action = seen[k]
    ts = timestamps[k]
    bars = run.bars
    at = bars[bars.timestamp == ts].set_index("ticker")["close"]
    closes = at.loc[list(bundle.tickers)].to_numpy()
    cash, shares = _book(obs, closes, bundle.num_assets, bundle.num_features)
    now = (ts + pd.Timedelta(minutes=1)).to_pydatetime()
    positions = {t: float(q) for t, q in zip(bundle.tickers, shares, strict=True) if q > 0}
    with FakeAlpaca(
        prices={t: float(p) for t, p in at.items()}, cash=cash, positions=positions, now=now, bars=bars
    ) as fake:
        point_at(fake, monkeypatch)
        cli_home = home / "cli"
        rc = main(
            [
                "--home",
                str(cli_home),
                "paper",
                "--bundle",
                str(bundle.path),
                "--dry-run",
                "--once",
                "--max-order-notional",
                "1e12",
            ]
        )
        assert rc == 0, capsys.readouterr().err
        assert fake.requests.count(("POST", "/v2/orders")) == 0
    decisions = read_journal(cli_home)["decisions"]
    assert len(decisions) == 1
    assert decisions["decision_ts"].iloc[0] == ts
    got = np.array(json.loads(decisions["target_weights"].iloc[0]))
    np.testing.assert_allclose(got, action, atol=2e-5)
