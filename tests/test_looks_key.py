"""What makes a look: the result it saw (costs, execution, decision interval, seed and bars change it),
a ledger that can be missed (a deleted ledger reads "looks unknown"), and in-sample views that count
as looks without setting the out-of-sample hurdle."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.cli import main
from app.evaluation import result_digest
from backtests import looks
from backtests.metrics_model import MetricsDocument


@pytest.fixture()
def trained_home(tmp_path):
    """A home with stored synthetic bars and a run (config, untrained champion, run.json)."""
    from agents.networks import NetworkConfig
    from agents.policy import Policy, PolicyMeta
    from app.config import Config, write_config
    from data.loader import load_market

    home = tmp_path / "home"
    cfg = Config().with_updates(data={"num_tickers": 3, "num_sessions": 6}, env={"decision_interval": 30})
    run = home / "runs" / "r1"
    run.mkdir(parents=True)
    write_config(cfg, run / "config.toml")
    market = load_market(cfg.data, home=home, store_synthetic=True).full
    Policy(
        NetworkConfig(market.num_assets, market.num_features),
        PolicyMeta(tickers=market.tickers, feature_names=market.feature_names, action_mode="weights"),
    ).save(run / "champion")
    (run / "run.json").write_text(json.dumps({"pods_tried": 3}))
    return home


def _backtest(home, *args):
    assert main(["--home", str(home), "backtest", "r1", "--json", *args]) == 0


def test_the_digest_follows_the_returns():
    r = np.array([0.01, -0.02, 0.0])
    assert result_digest(r) == result_digest(r.copy()) == result_digest(r + 1e-14)
    assert result_digest(r) != result_digest(r * 1.001)
    assert result_digest(np.array([-0.0])) == result_digest(np.array([0.0]))


def test_editing_the_costs_and_backtesting_again_is_a_new_look(trained_home, capsys):
    _backtest(trained_home)
    _backtest(trained_home)  # the same result again: the same look
    assert len(looks.read_looks(looks.ledger_path(trained_home))) == 1
    config = trained_home / "runs" / "r1" / "config.toml"
    text = config.read_text()
    assert "slippage_bps = 1.0" in text
    config.write_text(text.replace("slippage_bps = 1.0", "slippage_bps = 3.0"))
    _backtest(trained_home)
    rows = looks.read_looks(looks.ledger_path(trained_home))
    assert len(rows) == 2 and rows[0].policy != rows[1].policy
    capsys.readouterr()


def test_a_deleted_ledger_reads_looks_unknown(trained_home, capsys):
    _backtest(trained_home)
    capsys.readouterr()
    doc = MetricsDocument.read(trained_home / "runs" / "r1" / "backtest" / "metrics.json")
    assert doc.oos_test.look.ledger  # the report names the ledger its look was counted in
    assert "looks unknown" not in (looks.restated(doc, trained_home).verdict or "")
    looks.ledger_path(trained_home).unlink()
    restated = looks.restated(doc, trained_home)
    assert restated.oos_test.looks_unknown is True
    assert "looks unknown" in restated.verdict


def test_a_view_of_the_whole_span_counts_without_setting_the_hurdle(trained_home, capsys):
    _backtest(trained_home, "--window", "full")
    capsys.readouterr()
    (row,) = looks.read_looks(looks.ledger_path(trained_home))
    assert row.sharpe is None and row.num_sessions > 0
