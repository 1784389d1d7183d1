"""The main job end to end: a shortened `podracer demo` (test preset) and every artifact it leaves."""

from __future__ import annotations

import json
import sqlite3

import pandas as pd
import pytest

from app.cli import main
from app.workflows.demo import build_config
from data.errors import ConfigError


@pytest.mark.slow
def test_demo_test_preset_end_to_end(home, capsys):
    rc = main(["--home", str(home), "demo", "--preset", "test", "--run", "ci", "--workers", "0", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    run_dir = home / "runs" / "ci"
    assert summary["run_id"] == "ci"
    assert summary["pods_tried"] >= 2

    # data stage: synthetic bars in the store
    assert any((home / "data" / "bars").rglob("*.parquet"))

    # tournament: leaderboard with the champion on it, champion checkpoint, resolved config + seeds
    with sqlite3.connect(run_dir / "leaderboard.sqlite") as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    assert tables
    assert (run_dir / "champion" / "policy.safetensors").stat().st_size > 0
    spec = json.loads((run_dir / "champion" / "spec.json").read_text())
    assert spec
    config_text = (run_dir / "config.toml").read_text()
    assert "seed" in config_text
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["pods_tried"] == summary["pods_tried"]

    # backtest: metrics.json (headline metrics for champion and buy-and-hold), equity, tear sheet
    metrics = json.loads((run_dir / "backtest" / "metrics.json").read_text())
    assert metrics["window"] == "test" and metrics["annualization"] == 252
    for name in ("champion", "buy_and_hold"):
        row = metrics["strategies"][name]
        for key in (
            "sharpe_ratio",
            "max_drawdown",
            "calmar_ratio",
            "annual_return",
            "probabilistic_sharpe_ratio",
        ):
            assert key in row
    assert summary["metrics"]["champion"]["sharpe_ratio"] == pytest.approx(
        metrics["strategies"]["champion"]["sharpe_ratio"]
    )
    # every pod tried kept its validation returns; the PBO is over all of them (>= 2 pods)
    scored = [
        r[0]
        for r in sqlite3.connect(run_dir / "leaderboard.sqlite").execute(
            "select pod_id from pods where score is not null"
        )
    ]
    # the trials: every scored pod plus the ensemble of the top pods (scored like a pod, one more look),
    # plus a fine-tuned champion's start when the refit scored it on the validation window
    start_looked = run_json["refit"].get("start_t") is not None
    assert len(scored) + 1 + start_looked == metrics["num_trials"] >= 3
    assert all((run_dir / "pods" / p / "valid_returns.parquet").is_file() for p in scored)
    assert (run_dir / "ensemble" / "valid_returns.parquet").is_file()
    assert (run_dir / "champion_start" / "valid_returns.parquet").is_file() == start_looked
    assert metrics["pbo"] is not None and 0.0 <= metrics["pbo"] <= 1.0 and metrics["pbo_logits"]
    # trials with no Sharpe at all are left out of the PBO
    assert 2 <= metrics["pbo_num_trials"] <= metrics["num_trials"]
    assert "equal_weight" in metrics["strategies"] and metrics["broker"] == "alpaca"
    # 5 held-out sessions: the verdict says the test needs more; the selection diagnostics are there
    assert summary["verdict"] == metrics["verdict"] and metrics["verdict_outcome"] == "not measurable"
    assert "at least 40" in metrics["verdict"] and metrics["oos_test"]["looks"] == 1
    selection = metrics["selection"]
    assert selection["num_trials"] == metrics["num_trials"] and selection["spa_p_value"] is not None
    assert 1 <= selection["effective_trials"] <= metrics["num_trials"]
    assert metrics["verdict_diagnostics"].startswith("selection on the validation window: SPA p ")
    # the test window comes after the validation window the tournament saw
    assert metrics["start"] > run_json["windows"]["valid"][1]
    equity = pd.read_parquet(run_dir / "backtest" / "equity.parquet")
    assert {"champion", "buy_and_hold"} <= set(equity.columns)
    assert len(equity) > 10
    assert equity["champion"].iloc[0] == pytest.approx(1e6, rel=0.01)
    # The capacity curve: the champion at >= 4 account sizes, its estimate, and no dust trades.
    assert len(metrics["capacity"]) >= 4 and "estimated_capacity" in metrics
    assert [row["capital"] for row in metrics["capacity"]] == sorted(
        row["capital"] for row in metrics["capacity"]
    )
    trades = pd.read_parquet(run_dir / "backtest" / "trades.parquet")
    champion = trades[trades["strategy"] == "champion"]
    assert (champion["notional"].abs() >= 1.0).all()
    png = (run_dir / "backtest" / "tearsheet.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_rejects_bad_flags(home, capsys):
    assert main(["--home", str(home), "demo", "--data", "nasdaq-live"]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["--home", str(home), "demo", "--preset", "huge"]) == 2


def test_default_preset_plants_a_real_factors_ic_and_the_flag_overrides_it():
    cpu = {"cores": 2, "device": "cpu", "gpu": None}
    kw = {"config_path": None, "data_source": "synthetic", "seed": None, "minutes": None, "workers": None}
    config, extra = build_config("default", signal=None, machine=cpu, **kw)
    assert config.data.target_ic == 0.05 and config.data.shape == "minute_momentum"
    assert config.data.features == "library"
    assert config.data.num_sessions == 243 and extra["budget_minutes"] == 6.0
    # split 72 / 45 / 126 as MarketData.split_sessions rounds: a half-year test window
    n = config.data.num_sessions
    n_train, n_valid = round(n * config.data.train_frac), round(n * config.data.valid_frac)
    assert (n_train, n_valid, n - n_train - n_valid) == (72, 45, 126)
    control = build_config("default", signal=0.0, machine=cpu, **kw)[0].data  # (--signal 0: the control)
    assert control.signal == 0.0 and control.target_ic is None
    assert build_config("test", signal=None, machine=cpu, **kw)[0].data.signal == 1.0


def test_target_ic_flag_plants_a_daily_rank_ic_and_a_signal_replaces_it(tmp_path):
    cpu = {"cores": 2, "device": "cpu", "gpu": None}
    kw = {"data_source": "synthetic", "seed": None, "minutes": None, "workers": None, "machine": cpu}
    config, _ = build_config("default", config_path=None, signal=None, target_ic=0.03, **kw)
    assert config.data.target_ic == 0.03
    # a file that plants an IC: --signal replaces it (the control of a file's market), --target-ic too
    path = tmp_path / "ic.toml"
    path.write_text("[data]\nnum_sessions = 243\ntarget_ic = 0.05\n")
    assert build_config("default", config_path=path, signal=None, **kw)[0].data.target_ic == 0.05
    control = build_config("default", config_path=path, signal=0.0, **kw)[0].data
    assert control.target_ic is None and control.signal == 0.0
    assert (
        build_config("default", config_path=path, signal=None, target_ic=0.0, **kw)[0].data.target_ic == 0.0
    )
    with pytest.raises(ConfigError, match="--signal and --target-ic"):
        build_config("default", config_path=None, signal=0.42, target_ic=0.05, **kw)


def test_demo_target_ic_flag_out_of_range_exits_2(home, capsys):
    assert main(["--home", str(home), "demo", "--target-ic", "0.5"]) == 2
    assert "--target-ic" in capsys.readouterr().err


def test_demo_refuses_the_shipped_real_sample_in_one_line(home, capsys):
    """Six sessions cannot fill a validation window of 10: one line naming the numbers, exit 2."""
    assert main(["--home", str(home), "demo", "--data", "real-sample", "--json"]) == 2
    err = capsys.readouterr().err
    assert "validation window has 1 session(s) (6 in all x valid_frac 0.185)" in err
    assert "at least 52 sessions" in err and "Traceback" not in err
