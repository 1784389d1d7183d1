"""`podracer backtest`: a run's champion + baselines, baselines on stored data, one-line errors."""

from __future__ import annotations

import json
import shutil

import pytest

from app import context
from app.cli import main
from backtests.metrics_model import METRIC_KEYS


@pytest.fixture(scope="module")
def run_home(tmp_path_factory):
    """A home with stored synthetic bars and a run (config, untrained champion, run.json)."""
    from agents.networks import NetworkConfig
    from agents.policy import Policy, PolicyMeta
    from app.config import Config, write_config
    from data.loader import load_market

    home = tmp_path_factory.mktemp("home")
    cfg = Config().with_updates(data={"num_tickers": 4, "num_sessions": 6}, env={"decision_interval": 30})
    run = home / "runs" / "r1"
    run.mkdir(parents=True)
    write_config(cfg, run / "config.toml")
    market = load_market(cfg.data, home=home, store_synthetic=True).full
    config = NetworkConfig(market.num_assets, market.num_features)
    Policy(config, PolicyMeta(tickers=market.tickers, feature_names=market.feature_names)).save(
        run / "champion"
    )
    (run / "run.json").write_text(json.dumps({"pods_tried": 20, "trial_sharpes": [0.4, 1.1, -0.5, 2.0]}))
    return home


def _run(home, *args):
    return main(["--home", str(home), "backtest", *args])


def test_run_backtest_json_has_every_metric_and_writes_the_report(run_home, capsys):
    assert _run(run_home, "r1", "--json") == 0
    doc = json.loads(capsys.readouterr().out)  # stdout is exactly one JSON document
    assert (doc["window"], doc["annualization"], doc["period"]) == ("test", 252, "daily")
    assert doc["start"] <= doc["end"] and doc["num_trials"] == 20
    assert list(doc["strategies"]) == [
        "champion",
        "buy_and_hold",
        "cash",
        "equal_weight",
        "linear",
        "boosted",
    ]
    # the champion's excess over the linear and the boosted baselines
    assert {"linear", "boosted"} <= set(doc["oos_test"]["excess"])
    # the capacity curve replays both rankers beside buy-and-hold and equal weight at every size
    assert all({"linear", "boosted"} <= set(row["baselines"]) for row in doc["capacity"])
    for row in doc["strategies"].values():
        assert set(row) == set(METRIC_KEYS)  # every metric, and no other key
    # The out-of-sample test of the champion on 1 held-out session: a verdict that says why it is
    # not measurable; the look is in the ledger.
    assert doc["oos_test"]["strategy"] == "champion" and doc["oos_test"]["looks"] == 1
    assert doc["verdict_outcome"] == "not measurable" and "at least 40" in doc["verdict"]
    assert doc["significance_level"] == 0.05 and doc["selection"]["num_trials"] == 0
    out = run_home / "runs" / "r1" / "backtest"
    for name in (
        "metrics.json",
        "equity.parquet",
        "positions.parquet",
        "trades.parquet",
        "daily_returns.parquet",
        "tearsheet.png",
    ):
        assert (out / name).is_file(), name
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["strategies"] == doc["strategies"]


def test_run_backtest_table_on_the_valid_window(run_home, capsys, monkeypatch):
    # A terminal wide enough for seven columns unwrapped (captured output is 80 columns by default).
    monkeypatch.setattr(context.console, "width", 160)
    assert _run(run_home, "r1", "--window", "valid", "--no-tearsheet") == 0
    out = capsys.readouterr().out
    for label in ("Sharpe", "Sortino", "Max drawdown", "Calmar", "Turnover", "Costs", "PSR", "buy_and_hold"):
        assert label in out
    assert "valid window" in out and "252/yr" in out
    # The validation window is where the run selected: no out-of-sample test there, and no look.
    assert "edge not measurable: the valid window is not held out" in " ".join(out.split())


def test_baseline_on_stored_data(run_home, capsys):
    assert _run(run_home, "--baseline", "buy-and-hold", "--window", "full", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["strategies"]) == ["buy_and_hold"]
    assert doc["benchmark"] == "buy_and_hold" and doc["num_days"] == 6
    # Bought as fast as the volume cap lets it (a few decisions on this small market), then held.
    assert 0.9 < doc["strategies"]["buy_and_hold"]["exposure"] < 1.0 + 1e-3


def test_ranker_baselines_on_stored_data(run_home, capsys):
    args = ("--baseline", "buy-and-hold", "--baseline", "linear", "--baseline", "boosted", "--window", "test")
    assert _run(run_home, *args, "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["strategies"]) == ["buy_and_hold", "linear", "boosted"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "no run 'nope'"),
        ([], "give a RUN id"),
        (["r1", "--window", "train"], "--window 'train'"),
        (["--baseline", "momentum"], "--baseline 'momentum'"),
        (["r1", "--baseline", "cash"], "--baseline is for backtests without a run"),
        (["r1", "--device", "nonsense"], "not a torch device"),
    ],
)
def test_usage_errors_are_one_line(run_home, capsys, args, message):
    assert _run(run_home, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_or_corrupt_artifacts_are_one_line_errors(run_home, tmp_path, capsys):
    broken = run_home / "runs" / "broken"
    shutil.copytree(run_home / "runs" / "r1", broken, ignore=shutil.ignore_patterns("backtest"))
    (broken / "run.json").write_text("{not json")
    assert _run(run_home, "broken", "--json") == 2
    assert "run.json is corrupt: not valid JSON" in capsys.readouterr().err

    (broken / "run.json").write_text("{}")
    (broken / "champion" / "spec.json").write_text("{}")
    assert _run(run_home, "broken") == 2
    err = capsys.readouterr().err
    assert "spec.json" in err and "Traceback" not in err

    shutil.rmtree(broken / "champion")
    assert _run(run_home, "broken") == 2
    assert "no champion policy" in capsys.readouterr().err

    empty_home = tmp_path / "empty"
    empty_home.mkdir()
    assert main(["--home", str(empty_home), "backtest", "--baseline", "buy-and-hold"]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_baseline_report_written_with_out(run_home, tmp_path, capsys):
    out = tmp_path / "bh"
    assert (
        _run(
            run_home, "--baseline", "buy-and-hold", "--baseline", "cash", "--out", str(out), "--no-tearsheet"
        )
        == 0
    )
    assert "Baselines on the stored data" in capsys.readouterr().out
    saved = json.loads((out / "backtest" / "metrics.json").read_text())
    assert set(saved["strategies"]) == {"buy_and_hold", "cash"} and saved["tearsheet"] is None
    assert (out / "backtest" / "equity.parquet").is_file()


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"schema_version": 99, "pods_tried": 20}, "schema version 99 is newer than this podracer reads"),
        ({"pods_tried": "twenty"}, "pods_tried: input should be a valid integer"),
    ],
)
def test_a_run_record_of_a_newer_schema_or_malformed_is_refused_in_one_line(
    run_home, capsys, record, message
):
    other = run_home / "runs" / "other"
    shutil.copytree(
        run_home / "runs" / "r1", other, ignore=shutil.ignore_patterns("backtest"), dirs_exist_ok=True
    )
    (other / "run.json").write_text(json.dumps(record))
    assert _run(run_home, "other", "--json", "--no-tearsheet") == 2
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())  # rich wraps long lines
    assert str(other / "run.json") in err and message in err and "Traceback" not in err
    assert captured.out == ""


def test_test_window_must_lie_after_what_the_run_saw(run_home, capsys):
    # Bars imported after the run (older history) shift the session split: the rebuilt "test" window
    # would then cover the run's validation sessions. The backtest refuses instead of scoring them.
    from app.config import load_config
    from data.loader import load_market

    windows = load_market(load_config(run_home / "runs" / "r1" / "config.toml").data, home=run_home).windows()
    shifted = run_home / "runs" / "shifted"
    shutil.copytree(run_home / "runs" / "r1", shifted, ignore=shutil.ignore_patterns("backtest"))
    recorded = {k: list(v) for k, v in windows.items()}
    (shifted / "run.json").write_text(json.dumps({"windows": recorded}))
    assert _run(run_home, "shifted", "--json", "--no-tearsheet") == 0  # the same data: fine
    capsys.readouterr()

    recorded["valid"] = [recorded["valid"][0], recorded["test"][1]]  # selected on today's test sessions
    (shifted / "run.json").write_text(json.dumps({"windows": recorded}))
    assert _run(run_home, "shifted", "--json", "--no-tearsheet") == 2
    err = capsys.readouterr().err
    assert "was selected on data up to" in err and "Traceback" not in err
    assert _run(run_home, "shifted", "--window", "valid", "--json", "--no-tearsheet") == 0
    capsys.readouterr()


def test_cli_json_and_dashboard_show_one_verdict_and_a_re_backtest_is_not_a_new_look(run_home, capsys):
    from app.dashboard.verdict_box import verdict_box
    from backtests.looks import ledger_path, read_looks
    from backtests.metrics_model import MetricsDocument

    assert _run(run_home, "r1", "--json", "--no-tearsheet") == 0
    doc = json.loads(capsys.readouterr().out)
    assert _run(run_home, "r1", "--no-tearsheet") == 0
    table = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    saved = json.loads((run_home / "runs" / "r1" / "backtest" / "metrics.json").read_text())
    box = verdict_box(MetricsDocument.parse(saved))
    assert box.text == doc["verdict"] == saved["verdict"] and box.diagnostics == doc["verdict_diagnostics"]
    assert doc["verdict"] in table and doc["verdict_diagnostics"] in table
    # Backtested more than once (the other tests, on either window): one look at the test window,
    # first judged alone; a full-window view of it, if another test made one, counts now.
    rows = [r for r in read_looks(ledger_path(run_home)) if r.run_id == "r1" and r.start == doc["start"]]
    assert len(rows) == 1 and rows[0].strategy == "champion" and doc["oos_test"]["looks_first"] == 1


def test_the_looks_are_counted_when_the_verdict_is_read(run_home, tmp_path, capsys):
    # Two runs backtested on one window: run 1's verdict, read again, counts both. Its full-window
    # view shows the same held-out sessions, so it is a look too: a third run's backtest counts four.
    home = tmp_path / "home"  # a fresh home: no ledger, and no run remembers a look (looks.json)
    shutil.copytree(run_home, home, ignore=shutil.ignore_patterns("looks.sqlite*", "looks.json", "backtest"))
    for run in ("r2", "r3"):
        shutil.copytree(home / "runs" / "r1", home / "runs" / run)

    def looks_of(*args):
        assert _run(home, *args, "--json", "--no-tearsheet") == 0
        return json.loads(capsys.readouterr().out)

    assert looks_of("r1")["oos_test"]["looks"] == 1
    assert looks_of("r2")["oos_test"]["looks"] == 2
    again = looks_of("r1")
    assert (again["oos_test"]["looks"], again["oos_test"]["looks_first"]) == (2, 1)
    assert "2 looks counted now (1 when first judged)" in again["verdict"]
    stored = json.loads((home / "runs" / "r1" / "backtest" / "metrics.json").read_text())
    assert stored["oos_test"]["looks"] == 2  # the file says what the command said
    full = looks_of("r1", "--window", "full")
    assert full["oos_test"]["look"]["start"] < again["start"]  # the full window holds the test window
    third = looks_of("r3")
    assert third["oos_test"]["looks"] >= 4 and third["oos_test"]["looks_first"] == 4
    # The table says it too.
    assert _run(home, "r1", "--no-tearsheet") == 0
    assert "4 looks counted now (1 when first judged)" in " ".join(capsys.readouterr().out.split())
