"""Dashboard logic without Streamlit: artifact readers, views, downsampling, the CLI command."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from dashboard_fixture import make_run, write_backtest, write_real_backtest

from app.dashboard import artifacts, cards, charts, downsample, formatting, pods, series, tables
from app.dashboard import launch as cmd
from app.dashboard.verdict_box import VerdictBox, verdict_box
from backtests.metrics_model import MetricsDocument
from backtests.verdict import EdgeVerdict, verdict_fields

# --------------------------------------------------------------------------- artifacts


def test_read_backtest_artifacts_round_trip(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    written = write_backtest(run_dir, days=5, num_assets=3)
    metrics = artifacts.read_metrics(run_dir)
    assert {name: row.model_dump(exclude_unset=True) for name, row in metrics.strategies.items()} == written[
        "strategies"
    ]
    equity = artifacts.read_equity(run_dir)
    assert list(equity.columns) == ["champion", "buy_and_hold", "cash", "equal_weight"]
    assert str(equity.index.tz) == "UTC" and equity.index.is_monotonic_increasing
    assert len(equity) == 5 * 390
    daily = artifacts.read_daily_returns(run_dir)
    assert len(daily) == 5 and daily.index.tz is None
    # Daily returns compound to the cumulative return of metrics.json.
    cum = float((1 + daily["champion"]).prod() - 1)
    assert cum == pytest.approx(metrics.strategies["champion"].cum_returns_final, rel=1e-9)
    positions = artifacts.read_positions(run_dir)
    assert set(positions["strategy"]) == {"champion", "buy_and_hold", "cash"}
    trades = artifacts.read_trades(run_dir)
    assert (trades["cost"] >= 0).all() and trades["timestamp"].is_monotonic_increasing


def test_reads_what_the_real_report_writes(tmp_path):
    run_dir = tmp_path / "runs" / "real"
    written = write_real_backtest(run_dir, days=3, num_assets=3)
    metrics = artifacts.read_metrics(run_dir)
    assert cards.champion_name(metrics) == "champion" and cards.benchmark_name(metrics) == "buy_and_hold"
    for spec in cards.CARD_METRICS:
        assert metrics.strategies["champion"].get(spec.key) == written["strategies"]["champion"][spec.key]
    positions = artifacts.read_positions(run_dir)
    # The report stores labels as categoricals; the dashboard works on plain strings.
    assert not isinstance(positions["strategy"].dtype, pd.CategoricalDtype)
    assert not isinstance(positions["ticker"].dtype, pd.CategoricalDtype)
    wide = series.weights_wide(positions, "champion")
    assert wide.shape[1] == 3 and (wide.sum(axis=1) <= 1 + 1e-6).all()
    trades = artifacts.read_trades(run_dir)
    assert set(series.cost_summary(trades).index) <= {"champion", "buy_and_hold", "equal_weight"}
    daily = artifacts.read_daily_returns(run_dir)
    cum = float((1 + daily["champion"]).prod() - 1)
    assert cum == pytest.approx(metrics.strategies["champion"].cum_returns_final, rel=1e-6, abs=1e-9)
    equity = artifacts.read_equity(run_dir)
    assert equity["champion"].iloc[-1] / equity["champion"].iloc[0] - 1 == pytest.approx(
        cum, rel=1e-6, abs=1e-9
    )


def test_missing_backtest_says_which_command(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    with pytest.raises(artifacts.ArtifactMissing, match=r"no backtest yet: run `podracer backtest r1`"):
        artifacts.read_metrics(run_dir)
    with pytest.raises(artifacts.ArtifactMissing, match="podracer backtest r1"):
        artifacts.read_equity(run_dir)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"strategies": {"champion": {"sharpe_ratio": 1.0}', "metrics.json is corrupt"),
        ("[1, 2]", "expected a JSON object, found list"),
        ("{}", "strategies: field required"),
        (
            '{"strategies": {"champion": {"sharpe_ratio": "high"}}}',
            r"strategies.champion.sharpe_ratio: input should be a valid number, got 'high'",
        ),
        ('{"strategies": {"champion": 3}}', "strategies.champion: input should be a valid dictionary"),
        ('{"schema_version": 7, "strategies": {}}', "schema version 7 is newer than this podracer reads"),
        ("\xff\xfe", "metrics.json"),
    ],
)
def test_corrupt_metrics_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "backtest" / "metrics.json"
    path.parent.mkdir()
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(artifacts.ArtifactCorrupt, match=message) as info:
        artifacts.read_metrics(tmp_path)
    assert "\n" not in str(info.value)


def test_null_and_nan_metrics_read_as_none(tmp_path):
    path = tmp_path / "backtest" / "metrics.json"
    path.parent.mkdir()
    path.write_text('{"strategies": {"cash": {"sharpe_ratio": null, "calmar_ratio": NaN, "note": "x"}}}')
    values = artifacts.read_metrics(tmp_path).strategies["cash"]
    assert values.model_dump(exclude_unset=True) == {"sharpe_ratio": None, "calmar_ratio": None, "note": "x"}


def test_corrupt_parquet_and_missing_columns(tmp_path):
    folder = tmp_path / "backtest"
    folder.mkdir()
    (folder / "equity.parquet").write_bytes(b"PAR1 torn")
    with pytest.raises(artifacts.ArtifactCorrupt, match="equity.parquet is corrupt"):
        artifacts.read_equity(tmp_path)
    pd.DataFrame({"timestamp": [1], "strategy": ["a"]}).to_parquet(folder / "trades.parquet")
    with pytest.raises(artifacts.ArtifactCorrupt, match="missing column"):
        artifacts.read_trades(tmp_path)


def test_list_runs_newest_first_and_run_path_guard(tmp_path):
    for i, name in enumerate(["old", "new", "mid"]):
        path = tmp_path / "runs" / name
        path.mkdir(parents=True)
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + {"old": 0, "new": 2, "mid": 1}[name] * 10**9))
    (tmp_path / "runs" / ".hidden").mkdir()
    assert artifacts.list_runs(tmp_path) == ["new", "mid", "old"]
    assert artifacts.list_runs(tmp_path / "nowhere") == []
    assert artifacts.run_path(tmp_path, "mid") == tmp_path / "runs" / "mid"
    for bad in ("../etc", "", "a/b", "missing"):
        with pytest.raises(artifacts.ArtifactMissing):
            artifacts.run_path(tmp_path, bad)


def test_curves_and_missing_stores(tmp_path):
    run_dir = make_run(tmp_path, "r1", backtest=False)
    curves = artifacts.read_curves(run_dir)
    assert list(curves) == ["pod-000", "pod-001"]
    assert curves["pod-000"]["env_steps"].is_monotonic_increasing
    assert series.curve_metrics(curves) == ["eval/score", "charts/episodic_return", "losses/value_loss"]
    assert series.curve_x_axes(curves) == ["env_steps"]
    with_lineage = {p: f.assign(lineage_env_steps=f["env_steps"] + 1000) for p, f in curves.items()}
    assert "lineage_env_steps" not in series.curve_metrics(with_lineage)
    assert series.curve_x_axes(with_lineage) == ["env_steps", "lineage_env_steps"]
    fig = charts.learning_curves_figure(with_lineage, "eval/score", x="lineage_env_steps")
    assert fig.data[0].x[0] == curves["pod-000"]["env_steps"].iloc[0] + 1000
    with pytest.raises(artifacts.ArtifactMissing, match="no tournament in run 'r1'"):
        artifacts.read_tournament(run_dir)
    with pytest.raises(artifacts.ArtifactMissing, match="no nightly retrain yet: run `podracer retrain"):
        artifacts.read_nightly(tmp_path)
    with pytest.raises(artifacts.ArtifactMissing, match="no paper trading yet"):
        artifacts.read_paper(tmp_path)
    with pytest.raises(artifacts.ArtifactMissing, match="no training curves"):
        artifacts.read_curves(tmp_path / "runs")


def test_read_tournament_through_the_real_leaderboard(tmp_path):
    from agents.tournament.leaderboard import Leaderboard

    run_dir = tmp_path / "runs" / "t1"
    with Leaderboard(run_dir, size=2) as board:
        for seq, (pod, parent, score) in enumerate([("p0", None, 0.5), ("p1", "p0", 1.5), ("p2", "p1", 0.1)]):
            board.start_pod(
                pod,
                seq=seq,
                parent_id=parent,
                generation=seq,
                algo="ppo",
                hparams={"lr": 3e-4},
                seed=seq,
                checkpoint=f"pods/{pod}",
            )
            board.record_score(
                pod, score=score, metrics={"sharpe_ratio": score}, round_steps=10, env_steps=10
            )
        board.start_pod(
            "p3", seq=3, parent_id=None, generation=0, algo="ppo", hparams={}, seed=3, checkpoint="x"
        )
        board.record_failure("p3", "NaN loss")
    data = artifacts.read_tournament(run_dir)
    assert list(data.leaderboard["pod_id"]) == ["p1", "p0"]
    assert pods.status_counts(data.pods)["failed"] == 1
    assert pods.status_counts(data.pods)["tried"] == 4
    history = pods.score_history(data.events)
    assert list(history["score"]) == [0.5, 1.5, 0.1]
    assert str(history["time"].dt.tz) == "UTC"
    chain = pods.lineage(data.pods, "p2")
    assert list(chain["pod_id"]) == ["p2", "p1", "p0"]
    table = tables.tidy_table(data.pods, ("created",))
    assert table["hparams"].iloc[0] == "lr: 0.0003"  # readable text, not a JSON string
    assert str(table["created"].dt.tz) == "UTC"
    wide = pods.pod_table(data.leaderboard)
    assert list(wide.frame["pod"]) == ["p1", "p0"]
    assert list(wide.frame["Sharpe"]) == [1.5, 0.5] and list(wide.frame["lr"]) == [3e-4, 3e-4]
    assert wide.formats["Sharpe"] == "%.2f" and "hparams" not in wide.frame.columns


# --------------------------------------------------------------------------- views


METRICS_JSON = {
    "benchmark": "buy_and_hold",
    "strategies": {
        "champion": {
            "cum_returns_final": 0.1234,
            "annual_return": 0.05,
            "annual_volatility": 0.2,
            "sharpe_ratio": 1.2345,
            "sortino_ratio": 2.0,
            "max_drawdown": -0.25,
            "calmar_ratio": 0.2,
            "probabilistic_sharpe_ratio": 0.951,
        },
        "buy_and_hold": {
            "cum_returns_final": 0.1,
            "annual_return": 0.04,
            "annual_volatility": 0.25,
            "sharpe_ratio": 1.0,
            "sortino_ratio": None,
            "max_drawdown": -0.3,
            "calmar_ratio": 0.1333,
            "probabilistic_sharpe_ratio": 0.5,
        },
    },
}
#: The document as the dashboard reads it: its model.
METRICS = MetricsDocument.parse(METRICS_JSON)


def _m(raw: dict) -> MetricsDocument:
    """A metrics.json document (its JSON) as the dashboard reads it."""
    return MetricsDocument.parse(raw)


def test_format_metric():
    assert formatting.format_metric(0.003, "prob") == "0.003"  # a DSR of 0.003 is not 0.00
    assert formatting.format_metric(1.9e-31, "prob") == "<0.001"
    assert formatting.format_metric(0.1234, "pct") == "12.34%"
    assert formatting.format_metric(-0.25, "pct") == "-25.00%"
    assert formatting.format_metric(1.2345, "ratio") == "1.23"
    assert formatting.format_metric(1234.5, "money") == "$1,234.50"
    assert formatting.format_metric(None, "ratio") == "n/a"
    assert formatting.format_metric(float("nan"), "pct") == "n/a"


def test_metric_cards_values_and_deltas():
    shown = cards.metric_cards(METRICS, "champion", versus="buy_and_hold")
    assert [c.label for c in shown] == [
        "Cum. return",
        "Ann. return",
        "Volatility",
        "Sharpe",
        "Sortino",
        "Max drawdown",
        "Calmar",
        "PSR",
    ]
    by_key = {c.key: c for c in shown}
    assert by_key["sharpe_ratio"].value == "1.23"
    assert by_key["sharpe_ratio"].delta == "+0.23"
    assert by_key["max_drawdown"].value == "-25.00%"
    assert by_key["max_drawdown"].delta == "+5.00 pp"  # a shallower drawdown is better: normal colour
    assert by_key["max_drawdown"].delta_color == "normal"
    assert by_key["annual_volatility"].delta_color == "inverse"
    assert by_key["sortino_ratio"].delta is None  # benchmark's Sortino is null
    assert by_key["probabilistic_sharpe_ratio"].value == "0.95"
    # The tooltip has the exact values of both strategies.
    assert (
        "Champion: 1.2345." in by_key["sharpe_ratio"].help and "Buy & hold: 1." in by_key["sharpe_ratio"].help
    )
    assert cards.champion_name(METRICS) == "champion"
    assert cards.benchmark_name(METRICS) == "buy_and_hold"
    assert cards.champion_name(_m({"strategies": {"buy_and_hold": {}, "cash": {}, "pod-7": {}}})) == "pod-7"
    assert cards.champion_name(_m({"strategies": {"buy_and_hold": {}}})) is None


def test_comparison_table():
    table = cards.comparison_table(METRICS)
    assert list(table.index) == ["Champion", "Buy & hold"]
    assert table.loc["Buy & hold", "Sortino"] == "n/a"
    assert table.loc["Champion", "Calmar"] == "0.20"
    text = tables.markdown_table(table).splitlines()
    assert text[0].startswith("| strategy | Cum. return |") and text[1].startswith("|---|---|")
    assert text[2].startswith("| Champion | 12.34% |") and len(text) == 4


def test_ranker_baselines_are_rows_and_never_the_champion():
    doc = MetricsDocument.model_validate(
        {
            "benchmark": "buy_and_hold",
            "strategies": {
                "buy_and_hold": {"sharpe_ratio": 1.0},
                "linear": {"sharpe_ratio": 2.0},
                "boosted": {"sharpe_ratio": 3.0},
                "pod-7": {"sharpe_ratio": 4.0},
            },
        }
    )
    assert cards.champion_name(doc) == "pod-7"  # a baseline is never taken for the champion
    rows = list(cards.comparison_table(doc).index)
    assert rows == ["Buy & hold", "Linear (ridge)", "Boosted (LightGBM)", "pod-7"]


def test_drawdown_and_monthly_returns():
    equity = pd.Series([100.0, 120.0, 90.0, 130.0, 65.0])
    assert series.drawdown(equity).tolist() == pytest.approx([0.0, 0.0, -0.25, 0.0, -0.5])
    dates = pd.to_datetime(["2024-01-02", "2024-01-03", "2024-02-01", "2025-03-03"])
    daily = pd.Series([0.1, 0.1, -0.5, 0.02], index=dates)
    table = series.monthly_returns(daily)
    assert list(table.index) == [2024, 2025]
    assert table.loc[2024, "Jan"] == pytest.approx(0.21)
    assert table.loc[2024, "Feb"] == pytest.approx(-0.5)
    assert table.loc[2025, "Mar"] == pytest.approx(0.02)
    assert np.isnan(table.loc[2025, "Jan"])
    assert series.monthly_returns(pd.Series(dtype=float)).empty
    days = pd.to_datetime(["2024-01-01", "2024-01-05", "2024-01-09"])  # Mon, Fri, next Tue
    table = series.daily_returns_table(pd.Series([0.01, -0.02, 0.03], index=days))
    assert list(table.index) == ["2024-01-01", "2024-01-08"]
    assert table.loc["2024-01-01", "Fri"] == pytest.approx(-0.02)
    assert table.loc["2024-01-08", "Tue"] == pytest.approx(0.03)
    assert np.isnan(table.loc["2024-01-08", "Mon"])


def test_weights_wide_keeps_last_row_per_bucket():
    stamps = pd.date_range("2024-01-02 14:30", periods=10, freq="min", tz="UTC")
    positions = pd.DataFrame(
        {
            "timestamp": np.repeat(stamps, 2),
            "strategy": "champion",
            "ticker": ["A", "B"] * 10,
            "weight": np.ravel([[i / 10, 0.5] for i in range(10)]),
        }
    )
    wide = series.weights_wide(positions, "champion", max_points=3)
    assert len(wide) == 3
    assert wide.index[-1] == stamps[-1]  # the final holding is always shown
    assert list(wide.columns) == ["B", "A"]  # largest average weight first
    assert wide["A"].iloc[-1] == pytest.approx(0.9)
    assert series.weights_wide(positions, "nobody").empty


def test_trades_and_costs():
    trades = pd.DataFrame(
        {
            "timestamp": pd.date_range("2024-01-02", periods=3, freq="D", tz="UTC"),
            "strategy": ["champion", "champion", "buy_and_hold"],
            "ticker": ["A", "B", "A"],
            "notional": [1000.0, -500.0, 2000.0],
            "cost": [1.0, 0.5, 2.0],
        }
    )
    table = series.trades_table(trades, "champion")
    assert list(table["side"]) == ["sell", "buy"]  # newest first
    summary = series.cost_summary(trades)
    assert summary.loc["champion", "costs"] == pytest.approx(1.5)
    assert summary.loc["champion", "cost bp"] == pytest.approx(1.5 / 1500 * 1e4)
    assert series.costs_by_ticker(trades, "champion").index[0] == "A"


def test_lineage_stops_on_cycles_and_unknown_pods():
    tried = pd.DataFrame({"pod_id": ["a", "b", "c"], "parent_id": ["c", "a", "b"]})
    assert list(pods.lineage(tried, "c")["pod_id"]) == ["c", "b", "a"]
    assert pods.lineage(tried, "zzz").empty


# --------------------------------------------------------------------------- downsampling and charts


def test_lttb_keeps_endpoints_and_spikes():
    rng = np.random.default_rng(0)
    y = rng.normal(size=10_000)
    y[5_000] = 50.0
    idx = downsample.lttb_indices(np.arange(len(y)), y, 500)
    assert len(idx) == 500 and idx[0] == 0 and idx[-1] == len(y) - 1
    assert np.all(np.diff(idx) > 0)
    assert 5_000 in idx
    assert np.array_equal(downsample.lttb_indices(np.arange(10), y[:10], 50), np.arange(10))


def test_minmax_keeps_extremes():
    y = np.sin(np.linspace(0, 20, 9_999))
    y[1234] = -3.0
    idx = downsample.minmax_indices(y, 200)
    assert 1234 in idx and idx[0] == 0 and idx[-1] == len(y) - 1
    assert len(idx) <= 202
    assert y[idx].max() == y.max()


def test_figures_are_downsampled(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    write_backtest(run_dir, days=20)
    equity = artifacts.read_equity(run_dir)
    fig = charts.equity_figure(equity, max_points=500)
    assert [t.name for t in fig.data] == ["Champion", "Buy & hold", "Cash", "Equal weight"]
    assert all(len(t.x) == 500 for t in fig.data)
    under = charts.underwater_figure(series.drawdown(equity), max_points=500)
    assert min(under.data[0].y) == pytest.approx(series.drawdown(equity)["champion"].min())
    heat = charts.monthly_heatmap(series.monthly_returns(artifacts.read_daily_returns(run_dir)["champion"]))
    assert heat.data[0].type == "heatmap"


# --------------------------------------------------------------------------- the command


def test_streamlit_command_and_env(tmp_path):
    argv = cmd.streamlit_command("127.0.0.1", 8123)
    assert argv[1:3] == ["-m", "app.dashboard.serve"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert flags["--server.headless"] == "true"
    assert flags["--server.address"] == "127.0.0.1"
    assert flags["--server.port"] == "8123"
    assert flags["--browser.gatherUsageStats"] == "false"
    assert cmd.APP_PATH.is_file()
    from app.dashboard import serve

    assert serve.APP_PATH == cmd.APP_PATH
    env = cmd.streamlit_env(tmp_path, "r1")
    assert env["PODRACER_HOME"] == str(tmp_path) and env["PODRACER_DASHBOARD_RUN"] == "r1"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host, loopback):
    assert cmd.is_loopback(host) is loopback


def _fake_exec(monkeypatch):
    calls = []

    def fake_execve(path, argv, env):
        calls.append((argv, env))
        raise SystemExit(0)

    monkeypatch.setattr(cmd.os, "execve", fake_execve)
    monkeypatch.setattr(cmd, "port_in_use", lambda host, port: False)
    return calls


def test_cli_starts_streamlit_with_home_and_run(tmp_path, monkeypatch, capsys):
    from app.cli import main

    make_run(tmp_path, "r1", backtest=False)
    calls = _fake_exec(monkeypatch)
    with pytest.raises(SystemExit):
        main(["dashboard", "--home", str(tmp_path), "--run", "r1", "--port", "8555"])
    argv, env = calls[0]
    assert "8555" in argv and "127.0.0.1" in argv
    assert env["PODRACER_HOME"] == str(tmp_path.resolve()) and env["PODRACER_DASHBOARD_RUN"] == "r1"
    assert "warning" not in capsys.readouterr().err


def test_cli_warns_on_non_loopback_host(tmp_path, monkeypatch, capsys):
    from app.cli import main

    calls = _fake_exec(monkeypatch)
    with pytest.raises(SystemExit):
        main(["dashboard", "--home", str(tmp_path), "--host", "0.0.0.0"])
    assert calls and "0.0.0.0" in calls[0][0]
    err = capsys.readouterr().err
    assert "warning" in err and "0.0.0.0" in err


def test_cli_errors_are_one_line(tmp_path, monkeypatch, capsys):
    from app.cli import main

    _fake_exec(monkeypatch)
    assert main(["dashboard", "--home", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["dashboard", "--home", str(tmp_path), "--run", "ghost"]) == 2
    assert "no run 'ghost'" in capsys.readouterr().err
    monkeypatch.setattr(cmd, "port_in_use", lambda host, port: True)
    assert main(["dashboard", "--home", str(tmp_path)]) == 2
    assert "already in use" in capsys.readouterr().err


def test_port_in_use_detects_a_listener():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert cmd.port_in_use("127.0.0.1", port)
    assert not cmd.port_in_use("127.0.0.1", port)


def test_fixture_metrics_json_is_valid_json(tmp_path):
    run_dir = make_run(tmp_path, "r2", days=3)
    data = json.loads((run_dir / "backtest" / "metrics.json").read_text())
    assert set(data["strategies"]) == {"champion", "buy_and_hold", "cash", "equal_weight"}
    # The champion-trust keys, and annual figures withheld under 63 sessions.
    assert data["num_sessions"] == 3 and data["annualized_min_sessions"] == 63
    assert 0 <= data["pbo"] <= 1 and len(data["pbo_logits"]) == data["pbo_num_splits"]
    assert data["strategies"]["champion"]["annual_return"] is None
    old = json.loads(
        (make_run(tmp_path, "r3", days=3, schema="old") / "backtest" / "metrics.json").read_text()
    )
    assert "pbo" not in old and "num_sessions" not in old and "equal_weight" not in old["strategies"]
    assert old["strategies"]["champion"]["annual_return"] is not None


# --------------------------------------------------------------------------- cards that fit


@pytest.mark.parametrize(
    ("value", "kind", "shown", "delta"),
    [
        (35252.88, "pct", "3.5M%", "+3.5M pp"),  # the default demo's annual return, 3,525,288%
        (7726312.5, "ratio", "7.7M", "+7.7M"),  # its Calmar
        (512.83, "ratio", "512.83", "+512.83"),
        (1234.5, "ratio", "1.2k", "+1.2k"),
        (-0.0603, "pct", "-6.03%", "-6.03 pp"),
        (123456.0, "ratio", "123k", "+123k"),
        (-2.5e9, "pct", "-250B%", "-250B pp"),
        (4e18, "ratio", "4.0e+18", "+4.0e+18"),
    ],
)
def test_compact_formats_fit_a_card(value, kind, shown, delta):
    assert formatting.format_metric(value, kind) == shown
    assert formatting.format_delta(value, kind) == delta
    assert len(shown) <= 8 and len(delta) <= 9


def test_format_full_keeps_every_digit():
    assert formatting.format_full(35252.88, "pct") == "3,525,288.00%"
    assert formatting.format_full(7726312.5, "ratio") == "7,726,312.50"
    assert formatting.format_full(1.2345, "ratio") == "1.2345"
    assert formatting.format_full(None, "pct") == "n/a"


def _new_schema(sessions: int, **extra) -> dict:
    doc = json.loads(json.dumps(METRICS_JSON))
    doc.update(num_sessions=sessions, annualized_min_sessions=63, num_trials=44, **extra)
    if sessions < 63:
        for values in doc["strategies"].values():
            values.update(annual_return=None, calmar_ratio=None)
    return doc


def test_short_window_cards_say_why():
    doc = _new_schema(12)
    by_key = {c.key: c for c in cards.metric_cards(_m(doc), "champion", versus="buy_and_hold")}
    assert by_key["annual_return"].value == "n/a" and by_key["calmar_ratio"].value == "n/a"
    assert "n/a: window under 63 sessions (12)" in by_key["annual_return"].help
    assert "period return is 12.34%" in by_key["annual_return"].help
    assert (
        by_key["annual_return"].delta == "period return 12.34%"
        and by_key["annual_return"].delta_arrow == "off"
    )
    assert by_key["calmar_ratio"].delta == "under 63 sessions" and by_key["calmar_ratio"].delta_color == "off"
    assert cards.short_window_note(_m(doc)).startswith(
        "Ann. return and Calmar: n/a: window under 63 sessions"
    )
    # 63 sessions or more, or an old run without the keys: no note, figures shown as written.
    assert cards.short_window_note(_m(_new_schema(63))) is None
    assert cards.short_window_note(METRICS) is None
    assert cards.metric_cards(METRICS, "champion")[1].value == "5.00%"


def test_verdict_box_shows_what_metrics_json_states():
    doc = _new_schema(70, pbo=0.62, oos_test={"strategy": "champion"})
    # The document states its verdict (backtests.report wrote it): the box shows that, not a re-derivation.
    stated = EdgeVerdict("not significant", ("PSR 0.970", "excess over buy_and_hold +0.01%/day (p 0.300)"))
    doc.update(verdict_fields(stated))
    assert verdict_box(_m(doc)) == VerdictBox("warning", stated.text)
    assert stated.text.startswith("edge not significant out of sample: PSR 0.970")
    significant = EdgeVerdict("significant", ("PSR 0.999",), (), "selection on the validation window: ...")
    doc.update(verdict_fields(significant))
    assert verdict_box(_m(doc)) == VerdictBox(
        "success", significant.text, "selection on the validation window: ..."
    )
    why = EdgeVerdict("not measurable", ("the held-out window has 12 sessions, the test needs at least 40",))
    assert verdict_box(_m({**doc, **verdict_fields(why)})).kind == "info"
    # A baselines-only report states no verdict.
    assert verdict_box(_m({**doc, **verdict_fields(None)})) is None


def test_verdict_box_of_a_document_without_a_stored_verdict():
    """A document with the out-of-sample test but no stored verdict is judged once by
    backtests.verdict; one from before the test (only older figures) states none."""
    oos = {
        "strategy": "champion",
        "held_out": True,
        "num_sessions": 63,
        "looks": 1,
        "psr_after_looks": 0.99,
        "benchmark": "buy_and_hold",
        "excess": {"buy_and_hold": {"mean_per_day": 0.002, "p_value_after_looks": 0.01}},
    }
    doc = _new_schema(70, pbo=0.5, oos_test=oos)
    box = verdict_box(_m(doc))
    assert box.kind == "success" and box.text.startswith("edge significant out of sample: PSR 0.990")
    doc["oos_test"] = {**oos, "psr_after_looks": 0.9}
    assert verdict_box(_m(doc)).kind == "warning"
    # Written before the out-of-sample test: its stored verdict rests on other statistics, no box.
    old = json.loads(json.dumps(METRICS_JSON))
    old["strategies"]["champion"]["deflated_sharpe_ratio"] = 0.99
    old.update(verdict_fields(EdgeVerdict("significant", ("DSR 0.990", "PBO 0.10"))))
    assert verdict_box(_m(old)) is None


def test_costs_caption_and_pbo_logits():
    doc = _new_schema(70, cost_rate=0.002, slippage_bps=1.0, pbo_logits=[0.5, None, -1.0, float("nan")])
    assert cards.costs_caption(_m(doc)) == "costs 0.20% + 1 bp"
    assert "costs 0.20% + 1 bp" in cards.window_caption(_m(doc)) and "70 sessions" in cards.window_caption(
        _m(doc)
    )
    assert cards.costs_caption(METRICS) is None
    modelled = {
        **doc,
        "spread_bps": 1.0,
        "impact_coef": 0.5,
        "max_participation": 0.025,
        "min_order_notional": 1.0,
    }
    assert cards.costs_caption(_m(modelled)) == (
        "costs 0.20% + 1 bp, half-spread 1 bp, impact 0.5, fills <= 2.5% of a bar's volume"
    )
    assert cards.pbo_logits(_m(doc)) == [0.5, -1.0]
    assert cards.pbo_logits(METRICS) == []
    fig = charts.pbo_histogram([0.5, -1.0, -0.2, 1.5], pbo=0.5)
    left, right = fig.data
    assert sorted(left.x) == [-1.0, -0.2] and sorted(right.x) == [0.5, 1.5]


def test_tidy_table_parses_json_text_cells():
    frame = pd.DataFrame({"tickers": ['["AAPL", "MSFT"]', "[]"], "note": ["{not json", "x"], "n": [1, 2]})
    out = tables.tidy_table(frame)
    assert list(out["tickers"]) == ["AAPL, MSFT", ""]
    assert list(out["note"]) == ["{not json", "x"] and list(out["n"]) == [1, 2]


def test_mutation_names_the_changed_hyper_parameters():
    parent = {"learning_rate": 1e-3, "gamma": 0.99, "update_epochs": 4}
    child = {"learning_rate": 1.2e-3, "gamma": 0.99, "update_epochs": 5}
    assert pods.mutation(child, parent) == "learning rate 1.00e-03 -> 1.20e-03, epochs 4 -> 5"
    assert pods.mutation(parent, parent) == "copied unchanged"
    assert pods.mutation(parent, None) == "new pod (no parent)"


def test_pod_table_lineage_and_fitness_on_a_tournament(tmp_path):
    from dashboard_fixture import write_tournament

    leaders = write_tournament(tmp_path, 60, board_size=8)
    data = artifacts.read_tournament(tmp_path)
    table = pods.pod_table(data.leaderboard)
    frame = table.frame
    assert list(frame["pod"]) == leaders and len(frame) == 8
    for column in ("learning rate", "gamma", "clip", "epochs", "Sharpe", "max drawdown", "costs"):
        assert pd.api.types.is_numeric_dtype(frame[column]), column  # sortable
    assert "Calmar" not in frame.columns  # null for every pod (short window): left out
    assert frame["max drawdown"].max() < 0 and frame["max drawdown"].min() > -100  # in percent
    assert table.formats["max drawdown"] == "%.2f%%" and table.formats["learning rate"] == "%.2e"
    text = frame.select_dtypes(exclude="number").astype(str)
    assert not text.apply(lambda col: col.str.startswith(("{", "["))).any().any()

    champion = leaders[0]
    points = pods.lineage_points(data.pods, set(leaders), champion)
    assert len(points) == len(data.pods) - (data.pods["status"] == "failed").sum()
    assert points.set_index("pod").loc[champion, "role"] == "champion"
    assert (points["role"] == "leaderboard").sum() == len(leaders) - 1
    children = points[points["parent"].notna()]
    assert (children["mutation"] != "").all() and not children["mutation"].str.contains("new pod").any()
    chain = pods.lineage_table(data.pods, champion)
    assert (
        chain.frame["pod"].iloc[0] == champion and chain.frame["mutation"].iloc[-1] == "new pod (no parent)"
    )
    fig = charts.lineage_figure(points)
    hover = " ".join(t for trace in fig.data if trace.text is not None for t in trace.text)
    assert "parent:" in hover and " -> " in hover

    history = pods.score_history(data.events)
    fitness = charts.fitness_figure(history, leaders)
    # One grey trace for the other pods, one per leaderboard pod (no legend entry), best so far.
    assert len(fitness.data) == 1 + len(leaders) + 1
    in_legend = [t.name for t in fitness.data if t.showlegend is not False]
    assert in_legend == ["other pods", "best so far"]
