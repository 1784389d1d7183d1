"""Helpers shared by the export and paper tests (no tests here): a tiny trained-looking run and bars.

``make_run`` writes ``<home>/runs/<run>/`` the way the tournament does (champion policy, config.toml,
run.json with windows and the feature spec) around a small synthetic market, so export and paper
trading run on exactly the data path training uses. ``SimBroker`` is an in-memory ``Broker`` for the
parity test, where HTTP would only add time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from app.config import Config, write_config
from app.paper.broker import Asset, BrokerAccount, Clock, Order, OrderRequest, Position
from data.atomic import atomic_write_json

NUM_TICKERS = 3
NUM_SESSIONS = 5
DECISION_INTERVAL = 15


@dataclass
class RunFixture:
    run_dir: Path
    splits: Any  # data.loader.MarketSplits
    bars: pd.DataFrame  # the raw bars (bar schema) the market was built from
    policy: Any  # agents.policy.Policy


def make_run(
    home: Path,
    run_id: str = "run-test",
    seed: int = 0,
    num_tickers: int = NUM_TICKERS,
    *,
    num_sessions: int = NUM_SESSIONS,
    feature_set: str = "small",
) -> RunFixture:
    """A run directory with a champion policy (random init, made decisive) on a synthetic market of
    ``num_tickers`` tickers (SYN000, SYN001, ...) with ``feature_set``'s features."""
    from agents.networks import NetworkConfig
    from agents.policy import Policy, PolicyMeta
    from data.loader import build_market
    from data.synthetic import SyntheticSpec, generate, to_frame

    panel = generate(SyntheticSpec(num_tickers=num_tickers, num_sessions=num_sessions, seed=seed))
    splits = build_market(panel, train_frac=0.6, valid_frac=0.2, source="synthetic", feature_set=feature_set)
    market = splits.full
    torch.manual_seed(seed)
    policy = Policy(
        NetworkConfig(num_assets=market.num_assets, num_features=market.num_features, embed=8, hidden=16),
        PolicyMeta(tickers=market.tickers, feature_names=market.feature_names),
    )
    with torch.no_grad():
        # Sharper logits than the tiny init gives, so target weights differ clearly between bars.
        for p in policy.net.parameters():
            p.mul_(3.0)
        obs = torch.randn(512, policy.obs_dim)
        policy.obs_norm.update(obs * 0.5 + 0.1)
    run_dir = home / "runs" / run_id
    policy.save(run_dir / "champion")
    config = Config().with_updates(
        data={
            "num_tickers": num_tickers,
            "num_sessions": num_sessions,
            "seed": seed,
            "features": feature_set,
        },
        # No volume cap: the tests' book reaches its targets in one cycle on the synthetic market's
        # thin minute volumes (the cap's paper side: tests/test_paper_fill_parity.py).
        env={"decision_interval": DECISION_INTERVAL, "max_participation": 0.0},
    )
    write_config(config, run_dir / "config.toml")
    windows = {k: list(v) for k, v in splits.windows().items()}
    atomic_write_json(
        run_dir / "run.json",
        {
            "run_id": run_id,
            "windows": windows,
            "tickers": list(market.tickers),
            "feature_spec": market.feature_spec,
            "champion": {"pod_id": "pod-0007"},
        },
    )
    return RunFixture(run_dir=run_dir, splits=splits, bars=to_frame(panel), policy=policy)


class SimBroker:
    """In-memory ``Broker``: fixed clock, cash, positions and bars; records submitted orders."""

    def __init__(
        self, bars: pd.DataFrame, now: datetime, cash: float, qty: dict[str, float], is_open: bool = True
    ):
        self.bars = bars
        self.now = now
        self.cash = cash
        self.qty = dict(qty)
        self.is_open = is_open
        self.submitted: list[OrderRequest] = []

    def _price(self, ticker: str) -> float:
        rows = self.bars[(self.bars.ticker == ticker) & (self.bars.timestamp < pd.Timestamp(self.now))]
        return float(rows["close"].iloc[-1]) if len(rows) else 0.0

    def account(self) -> BrokerAccount:
        equity = self.cash + sum(q * self._price(t) for t, q in self.qty.items())
        return BrokerAccount(equity=equity, cash=self.cash, last_equity=equity, buying_power=self.cash)

    def positions(self) -> dict[str, Position]:
        return {
            t: Position(t, q, q * self._price(t), self._price(t)) for t, q in self.qty.items() if abs(q) > 0
        }

    def clock(self) -> Clock:
        return Clock(self.now, self.is_open, self.now + timedelta(days=1), self.now + timedelta(hours=1))

    def latest_bars(self, tickers, start, end, interval="1m") -> pd.DataFrame:  # noqa: ANN001
        b = self.bars
        keep = (
            b.ticker.isin(list(tickers))
            & (b.timestamp >= pd.Timestamp(start))
            & (b.timestamp <= pd.Timestamp(end))
        )
        return b[keep].reset_index(drop=True)

    def submit(self, order: OrderRequest) -> Order:
        self.submitted.append(order)
        return Order(
            "sim", order.client_order_id, order.symbol, order.side, order.qty, order.qty, None, "filled"
        )

    def cancel(self, order_id: str) -> None:
        pass

    def asset(self, symbol: str) -> Asset | None:
        return Asset(symbol, active=True, tradable=True)

    def order_by_client_id(self, client_order_id: str) -> Order | None:
        return None

    def begin_cycle(self) -> None:
        pass
