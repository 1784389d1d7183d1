"""What makes a look: the result it saw (costs, execution, decision interval, seed and bars change it),
a ledger that can be missed (a deleted ledger reads "looks unknown"; a run backtested again after
its ledger was deleted, or from another home, reads at least the count it was judged under), and
in-sample views that count as looks without setting the out-of-sample hurdle."""

from __future__ import annotations

import json
import shutil

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


def _backtest(home, *args, run="r1"):
    assert main(["--home", str(home), "backtest", run, "--json", *args]) == 0


def _report(home, run="r1"):
    return MetricsDocument.read(home / "runs" / run / "backtest" / "metrics.json")


def _judged_after_two_looks(home, capsys):
    """r1 backtested again after a second run looked at its window: judged under 2 looks."""
    shutil.copytree(home / "runs" / "r1", home / "runs" / "r2")  # the same champion, another run
    for run in ("r1", "r2", "r1"):
        _backtest(home, "--no-tearsheet", run=run)
    capsys.readouterr()
    doc = _report(home)
    assert (doc.oos_test.looks, doc.oos_test.looks_first, doc.oos_test.looks_unknown) == (2, 1, None)
    return doc


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


def test_backtesting_again_after_deleting_the_ledger_reads_at_least_the_earlier_count(trained_home, capsys):
    earlier = _judged_after_two_looks(trained_home, capsys)
    looks.ledger_path(trained_home).unlink()
    assert main(["--home", str(trained_home), "backtest", "r1", "--no-tearsheet"]) == 0
    table = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    again = _report(trained_home)
    # Not a fresh "1 look": the count the run remembers, a lower bound now that its ledger is gone.
    assert again.oos_test.looks >= earlier.oos_test.looks and again.oos_test.looks_unknown is True
    assert "looks unknown (at least 2: a looks ledger that counted them is gone)" in again.verdict
    assert again.verdict in table and "1 look counted" not in table
    assert len(looks.read_looks(looks.ledger_path(trained_home))) == 1  # the new ledger's first look
    # Read back with the new ledger (the dashboard's reading), the bound stands; and judged once more,
    # it stays a bound.
    read = looks.restated(again, trained_home)
    assert (read.oos_test.looks, read.oos_test.looks_unknown, read.verdict) == (2, True, again.verdict)
    _backtest(trained_home, "--no-tearsheet")
    capsys.readouterr()
    assert (_report(trained_home).oos_test.looks, _report(trained_home).oos_test.looks_unknown) == (2, True)


def test_a_run_backtested_from_another_home_reads_at_least_its_count(trained_home, tmp_path, capsys):
    _judged_after_two_looks(trained_home, capsys)
    other = tmp_path / "other"
    shutil.copytree(trained_home / "runs" / "r1", other / "runs" / "r1")  # without the ledger
    _backtest(other, "--no-tearsheet")
    capsys.readouterr()
    there = _report(other)
    assert there.oos_test.looks >= 2 and there.oos_test.looks_unknown is True
    assert "looks unknown (at least 2" in there.verdict
    assert [r.run_id for r in looks.read_looks(looks.ledger_path(other))] == ["r1"]


def test_a_run_judged_before_it_remembered_its_looks_reads_its_last_report(trained_home, capsys):
    _judged_after_two_looks(trained_home, capsys)
    (trained_home / "runs" / "r1" / "looks.json").unlink()  # a report written before looks.json
    looks.ledger_path(trained_home).unlink()
    _backtest(trained_home, "--no-tearsheet")
    capsys.readouterr()
    doc = _report(trained_home)
    assert (doc.oos_test.looks, doc.oos_test.looks_unknown) == (2, True)


def test_a_malformed_memory_is_a_one_line_error(trained_home, capsys):
    memory = trained_home / "runs" / "r1" / "looks.json"
    memory.write_text('{"windows": "none"}')
    assert main(["--home", str(trained_home), "backtest", "r1", "--no-tearsheet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "looks.json: windows: input should be a valid list" in err and "Traceback" not in err
    assert looks.read_looks(looks.ledger_path(trained_home)) == []  # nothing was recorded
