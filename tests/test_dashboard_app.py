"""Every dashboard page through ``streamlit.testing.v1.AppTest`` on homes built by the test.

The other stages' stores are written with their real writers (tournament leaderboard, nightly
registry, paper journal), so a schema change on their side shows up here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from dashboard_fixture import make_run, make_walkforward_run, write_home_stores
from streamlit.testing.v1 import AppTest

from app.dashboard import cards, formatting

APP = str(Path(__file__).resolve().parent.parent / "app" / "dashboard" / "streamlit_app.py")
PAGES = ["overview", "tournament", "training", "positions", "nightly", "paper", "walkforward"]


def _app(home: Path, monkeypatch, run: str | None = None) -> AppTest:
    monkeypatch.setenv("PODRACER_HOME", str(home))
    if run:
        monkeypatch.setenv("PODRACER_DASHBOARD_RUN", run)
    else:
        monkeypatch.delenv("PODRACER_DASHBOARD_RUN", raising=False)
    return AppTest.from_file(APP, default_timeout=60)


def _open(at: AppTest, page: str) -> AppTest:
    if page != "overview":
        at.switch_page(f"screens/{page}.py")
    return at.run()


def _texts(elements) -> list[str]:
    return [str(e.value) for e in elements]


def _no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture
def full_home(tmp_path):
    """A home with one run holding every artifact, plus a nightly registry and a paper journal."""
    from agents.tournament.leaderboard import Leaderboard

    home = tmp_path / "home"
    run_dir = make_run(home, "run-a", days=25, real=True)
    # Tournament pods' curves also carry lineage_env_steps (agents/tournament/pod.py).
    for pod in ("pod-000", "pod-001"):
        path = run_dir / "pods" / pod / "curve.parquet"
        curve = pd.read_parquet(path)
        curve.assign(lineage_env_steps=curve["env_steps"] + 4096).to_parquet(path)
    with Leaderboard(run_dir, size=3) as board:
        for seq, (pod, parent, score) in enumerate([("pod-000", None, 0.4), ("pod-001", "pod-000", 1.1)]):
            board.start_pod(
                pod,
                seq=seq,
                parent_id=parent,
                generation=seq,
                algo="ppo",
                hparams={"learning_rate": 3e-4},
                seed=seq,
                checkpoint=f"pods/{pod}",
            )
            board.record_score(
                pod, score=score, metrics={"sharpe_ratio": score}, round_steps=64, env_steps=64
            )
        board.start_pod(
            "pod-002", seq=2, parent_id=None, generation=0, algo="sac", hparams={}, seed=2, checkpoint=""
        )
        board.record_failure("pod-002", "NaN in the critic loss")
    write_home_stores(home, "run-a", run_dir)
    return home


def test_overview_cards_equal_metrics_json(full_home, monkeypatch):
    at = _open(_app(full_home, monkeypatch), "overview")
    _no_exception(at)
    assert not at.error
    metrics = json.loads((full_home / "runs" / "run-a" / "backtest" / "metrics.json").read_text())
    shown = [(m.label, m.value) for m in at.metric]
    expected = []
    for strategy in ("champion", "buy_and_hold"):
        values = metrics["strategies"][strategy]
        expected += [(s.label, formatting.format_metric(values[s.key], s.kind)) for s in cards.CARD_METRICS]
    assert shown == expected
    # Spot-check the formatting against the raw JSON, independently of format_metric.
    champ = metrics["strategies"]["champion"]
    assert shown[3] == ("Sharpe", f"{champ['sharpe_ratio']:.2f}")
    assert shown[5] == ("Max drawdown", f"{champ['max_drawdown'] * 100:.2f}%")
    # The fixture's test window is under 63 sessions: metrics.json holds no Calmar (backtests.report).
    assert metrics["num_sessions"] < metrics["annualized_min_sessions"] and champ["calmar_ratio"] is None
    assert shown[6] == ("Calmar", formatting.format_metric(None, cards.CARD_METRICS[6].kind))
    # equity, underwater, returns heatmap, the capacity curve (no PBO logits)
    assert len(at.get("plotly_chart")) == 4
    assert len(metrics["capacity"]) >= 4 and "estimated_capacity" in metrics
    assert any("Estimated capacity:" in c for c in _texts(at.caption))
    assert any("run-a" in c for c in _texts(at.caption))
    # 25 sessions: the heatmap starts day by day; monthly is one click away.
    assert at.radio(key="heatmap").value == "daily"
    at.radio(key="heatmap").set_value("monthly").run()
    _no_exception(at)
    assert len(at.get("plotly_chart")) == 4 and [m.value for m in at.metric][:8] == [
        v for _, v in expected[:8]
    ]


@pytest.mark.parametrize("page", [p for p in PAGES[1:] if p != "walkforward"])
def test_every_page_renders_on_a_full_home(full_home, monkeypatch, page):
    at = _open(_app(full_home, monkeypatch), page)
    _no_exception(at)
    # The entry script ran too (page config, navigation, the sidebar's run picker).
    assert at.sidebar.selectbox(key="run_picker").value == "run-a"
    assert not at.error, _texts(at.error)
    assert not at.info, _texts(at.info)  # nothing is missing in this home
    if page == "tournament":
        labels = {m.label: m.value for m in at.metric}
        assert labels["Pods tried"] == "3" and labels["Failed"] == "1" and labels["On the leaderboard"] == "2"
        assert labels["Best score"] == "1.10"
        assert len(at.get("plotly_chart")) == 2  # fitness over time, lineage
        board = at.dataframe[0].value
        assert list(board["pod"]) == ["pod-001", "pod-000"]
        assert list(board["learning rate"]) == [3e-4, 3e-4] and list(board["Sharpe"]) == [1.1, 0.4]
        assert at.selectbox(key="lineage_pod").value == "pod-001"
        chain = at.dataframe[1].value
        assert list(chain["pod"]) == ["pod-001", "pod-000"]
        assert list(chain["mutation"]) == ["copied unchanged", "new pod (no parent)"]
    if page == "training":
        assert len(at.get("plotly_chart")) == 2
        assert at.radio(key="training_x").options == ["env steps", "env steps along the lineage"]
        at.radio(key="training_x").set_value("lineage_env_steps").run()
        _no_exception(at)
        assert len(at.get("plotly_chart")) == 2
    if page == "positions":
        assert len(at.get("plotly_chart")) == 2  # weights area + cumulative costs
    if page == "nightly":
        labels = {m.label: m.value for m in at.metric}
        assert labels["Run"] == "run-a" and labels["Promoted on"] == "2024-03-01"
        assert (
            labels["Promoted"] == "1" and labels["Rejected"] == "1" and labels["Fitness (sharpe)"] == "1.10"
        )
        # The champion's paper record while in charge (app.paper.attribution), and the status box.
        assert labels["Return"] == "0.25%" and labels["Sharpe"] == "n/a" and labels["Costs"] == "$1.00"
        assert any("1 orders" in c and "from 20 sessions on" in c for c in _texts(at.caption))
        assert labels["Champion"] == "run-a" and labels["Paper loop"] == "not started"
        # the rest of `podracer status` (app.workflows.status.gather_status): since when, the last and
        # the next retrain, the kill switch and the gone tickers, shown even when off / none
        assert labels["Champion since"] == "2024-03-01 07:10" and labels["Last retrain"] == "rejected"
        assert labels["Kill switch"] == "off" and labels["Gone tickers"] == "none"
        deltas = {m.label: m.delta for m in at.metric}
        assert deltas["Champion"] == "bundle b1" and deltas["Last retrain"] == "2024-03-02 07:10"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", labels["Next retrain"])
        assert deltas["Next retrain"] == "0 2 * * 1-5"  # the cron expression; its time zone in the tooltip
    if page == "paper":
        labels = {m.label: m.value for m in at.metric}
        assert labels["Equity"] == "$100,250.00" and labels["Orders recorded"] == "1"
        assert labels["Filled"] == "1"  # orders by final status (app.paper.journal.order_counts)
        # the account against the simulator (dashboard_fixture.write_sim_record): its figures' cards
        assert "Paper vs the simulator" in _texts(at.subheader)
        assert {"Slippage (bp)", "Model (bp)", "Fill ratio", "Fee gap"} <= set(labels)
        assert labels["Fill ratio"] == "75.00%" and labels["Fee gap"] == "$0.00"


def test_nightly_status_box_shows_the_kill_switch_and_the_gone_tickers(tmp_path, monkeypatch):
    """A loop halted by the kill switch, holding tickers the broker will not trade, beside an unreadable
    schedule record: the box says so as `podracer status` does (a fresh home otherwise: no champion,
    no retrain yet)."""
    from datetime import UTC, datetime, timedelta

    from app.paper.heartbeat import Heartbeat, heartbeat_path, write_heartbeat

    home = tmp_path / "home"
    now = datetime.now(UTC)
    kill = home / "paper" / "KILL"
    write_heartbeat(
        heartbeat_path(home),
        Heartbeat(
            time=now.isoformat(), status="kill_switch", mode="champion", interval_s=900.0,
            next_due=(now + timedelta(minutes=15)).isoformat(), attention=["ZOMB", "GONE"],
            kill_switch=str(kill),
        ),
    )  # fmt: skip
    kill.touch()
    (home / "schedule.json").write_text("{not json")  # an unreadable schedule record
    at = _open(_app(home, monkeypatch), "nightly")
    _no_exception(at)
    labels = {m.label: m.value for m in at.metric}
    assert labels["Kill switch"] == "ON" and labels["Gone tickers"] == "ZOMB, GONE"
    next_help = next(m.proto.help for m in at.metric if m.label == "Next retrain")
    assert next_help.endswith("(default schedule: the recorded one is unreadable)")
    assert any("the default schedule is shown" in w for w in _texts(at.warning))
    assert labels["Champion"] == "none yet" and labels["Champion since"] == "-"
    assert labels["Last retrain"] == "none recorded" and labels["Paper loop"] == "ok"
    assert any("kill switch on" in w for w in _texts(at.warning))
    assert _texts(at.error) == ["gone tickers need manual attention: ZOMB, GONE"]


def test_paper_equity_is_coloured_by_champion():
    """The Paper page's equity curve: one colour per bundle, a stretch per spell in charge, each
    starting at the previous one's last point (no gap at a switch), one legend entry per bundle."""
    from app.dashboard import charts

    frame = pd.DataFrame(
        {
            "recorded_at": pd.date_range("2024-01-04 15:00", periods=6, freq="D", tz="UTC"),
            "equity": [100.0, 101.0, 102.0, 101.5, 103.0, 104.0],
            "bundle_id": ["a" * 64, "a" * 64, "b" * 64, "b" * 64, "a" * 64, "a" * 64],
        }
    ).sample(frac=1.0, random_state=0)  # any order: the chart sorts by time
    fig = charts.champion_equity_figure(frame, "recorded_at")
    assert [t.name for t in fig.data] == ["bundle aaaaaaaaaaaa", "bundle bbbbbbbbbbbb", "bundle aaaaaaaaaaaa"]
    colours = [t.line.color for t in fig.data]
    assert colours[0] == colours[2] != colours[1]
    assert [t.showlegend for t in fig.data] == [True, True, False]
    assert [list(t.y) for t in fig.data] == [[100.0, 101.0], [101.0, 102.0, 101.5], [101.5, 103.0, 104.0]]
    # Before a champion qualifies the paper account holds the benchmark (app.paper.benchmark).
    held = frame.assign(bundle_id=frame["bundle_id"].replace({"a" * 64: "benchmark-0123456789abcdef"}))
    names = [t.name for t in charts.champion_equity_figure(held, "recorded_at").data]
    assert names == [
        "benchmark (no qualified champion)",
        "bundle bbbbbbbbbbbb",
        "benchmark (no qualified champion)",
    ]


def test_walkforward_page_shows_the_account_the_folds_and_who_traded_when(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_walkforward_run(home, "wf", days=45, folds=3)
    make_run(home, "plain", days=5)
    at = _open(_app(home, monkeypatch, run="wf"), "walkforward")
    _no_exception(at)
    assert not at.error and not at.info, (_texts(at.error), _texts(at.info))
    assert len(at.get("plotly_chart")) == 2  # the account with its folds marked, the drawdown
    table = at.dataframe[0].value
    assert list(table["fold"]) == [0, 1, 2] and list(table["gate"]) == ["promoted", "kept", "promoted"]
    assert list(table["in charge"]) == ["fold-000", "fold-000", "fold-002"]
    assert list(table["pods tried"]) == [12, 13, 14]
    metrics = json.loads((home / "runs" / "wf" / "backtest" / "metrics.json").read_text())
    champ = metrics["strategies"]["champion"]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Sharpe"] == f"{champ['sharpe_ratio']:.2f}"
    assert any("3 of 3 folds done" in c for c in _texts(at.caption))
    spans = " ".join(str(m.value) for m in at.markdown)
    assert "fold-000" in spans and "0, 1" in spans and "fold-002" in spans
    # Another run: the page says what it needs instead of failing.
    at = _open(_app(home, monkeypatch, run="plain"), "walkforward")
    _no_exception(at)
    assert "is not a walk-forward" in " ".join(_texts(at.info)) and not at.error


def test_walkforward_view_marks_folds_and_champion_changes():
    from app.dashboard import walkforward_view
    from app.walkforward.record import FoldRecord

    records = [
        FoldRecord.parse(
            {"index": i, "windows": {"test": [day, day], "train": ["a", "b"], "valid": ["c", "d"]}, "in_charge": who,
             "before_champion": None if who else "benchmark"}
        )
        for i, (day, who) in enumerate(
            [("2024-01-02", None), ("2024-01-03", {"fold": 1, "run": "fold-001"}),
             ("2024-01-04", {"fold": 1, "run": "fold-001"}), ("2024-01-05", {"fold": 3, "run": "fold-003"})]
        )
    ]  # fmt: skip
    assert walkforward_view.champion_changes(records) == [
        ("2024-01-03", "fold-001"),
        ("2024-01-05", "fold-003"),
    ]
    equity = pd.DataFrame(
        {"champion": [1.0, 1.1, 1.2, 1.3], "buy_and_hold": [1.0] * 4},
        index=pd.date_range("2024-01-02", periods=4, tz="UTC"),
    )
    fig = walkforward_view.walkforward_equity_figure(equity, records)
    lines = [s for s in fig.layout.shapes]
    assert len(lines) == 4  # every fold's start: 2 plain, 2 new champions
    assert [a.text for a in fig.layout.annotations] == ["fold-001", "fold-003"]
    frame = walkforward_view.folds_frame(records)
    assert list(frame["in charge"]) == [
        "benchmark (no qualified champion)",
        "fold-001",
        "fold-001",
        "fold-003",
    ]
    assert "it held benchmark (no qualified champion) (1 fold(s))" in walkforward_view.before_champion_note(
        records
    )
    assert walkforward_view.before_champion_note(records[1:]) == ""


def test_empty_home_shows_how_to_start(tmp_path, monkeypatch):
    home = tmp_path / "empty"
    home.mkdir()
    at = _app(home, monkeypatch)
    for page in PAGES:
        _open(at, page)
        _no_exception(at)
        assert not at.error
        infos = " ".join(_texts(at.info))
        if page in ("nightly", "paper"):
            assert ("no nightly retrain yet" if page == "nightly" else "no paper trading yet") in infos
        else:
            assert "No runs under" in infos and "podracer demo" in infos


def test_run_without_backtest(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "fresh", backtest=False)
    at = _app(home, monkeypatch)
    for page in ("overview", "positions", "training", "tournament"):
        _open(at, page)
        _no_exception(at)
        infos = " ".join(_texts(at.info))
        if page in ("overview", "positions"):
            assert (
                "no backtest yet: run `podracer backtest fresh`" in infos
                or "podracer backtest fresh" in infos
            )
            assert not at.metric
        if page == "tournament":
            assert "no tournament in run 'fresh'" in infos
        if page == "training":
            assert not at.info and len(at.get("plotly_chart")) == 2


def test_corrupt_metrics_json(tmp_path, monkeypatch):
    home = tmp_path / "home"
    run_dir = make_run(home, "broken", days=3)
    (run_dir / "backtest" / "metrics.json").write_text('{"strategies": {"champion": {"sharpe_ratio": 1.2')
    at = _open(_app(home, monkeypatch), "overview")
    _no_exception(at)
    errors = _texts(at.error)
    assert len(errors) == 1 and "metrics.json is corrupt" in errors[0]
    assert not at.metric
    # The rest of the page still renders from the intact files.
    assert len(at.get("plotly_chart")) == 3


def test_run_picker_opens_the_requested_run_and_switches(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "first", days=3, seed=1)
    make_run(home, "second", days=3, seed=2)
    at = _open(_app(home, monkeypatch, run="first"), "overview")
    picker = at.sidebar.selectbox(key="run_picker")
    assert picker.value == "first" and set(picker.options) == {"first", "second"}
    sharpe_first = at.metric[3].value
    picker.set_value("second").run()
    _no_exception(at)
    assert any("second" in c for c in _texts(at.caption))
    expected = json.loads((home / "runs" / "second" / "backtest" / "metrics.json").read_text())
    assert at.metric[3].value == formatting.format_metric(
        expected["strategies"]["champion"]["sharpe_ratio"], "ratio"
    )
    # The choice survives a page change.
    _open(at, "positions")
    _no_exception(at)
    assert at.session_state["run"] == "second"
    assert sharpe_first  # the first run rendered its own cards


def test_unknown_requested_run_falls_back_to_newest(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "only", days=3)
    at = _open(_app(home, monkeypatch, run="ghost"), "overview")
    _no_exception(at)
    assert any("'ghost' not found" in w for w in _texts(at.sidebar.warning))
    assert at.session_state["run"] == "only"


def test_baseline_only_backtest_shows_the_benchmark(tmp_path, monkeypatch):
    """`podracer backtest --baseline buy-and-hold` writes no champion: only the benchmark's cards."""
    home = tmp_path / "home"
    run_dir = make_run(home, "baseline", days=3)
    path = run_dir / "backtest" / "metrics.json"
    doc = json.loads(path.read_text())
    del doc["strategies"]["champion"]
    doc["positions_frequency"] = "session"
    path.write_text(json.dumps(doc))
    at = _open(_app(home, monkeypatch), "overview")
    _no_exception(at)
    assert not at.error
    bench = doc["strategies"]["buy_and_hold"]
    assert [(m.label, m.value) for m in at.metric] == [
        (s.label, formatting.format_metric(bench[s.key], s.kind)) for s in cards.CARD_METRICS
    ]
    assert [s.value for s in at.subheader][0] == "Buy & hold (benchmark)"
    _open(at, "positions")
    _no_exception(at)
    assert any("per session" in c for c in _texts(at.caption))


def _no_json_cells(at: AppTest) -> None:
    for frame in at.dataframe:
        table = frame.value
        text = table.select_dtypes(exclude="number").astype(str)
        held = text.apply(lambda col: col.str.strip().str.startswith(("{", "["))).to_numpy()
        assert not held.any(), table.columns.tolist()


def test_new_metrics_schema_verdict_short_window_and_pbo(tmp_path, monkeypatch):
    """metrics.json with pbo, pbo_logits, num_sessions (12 < 63), cost_rate."""
    home = tmp_path / "home"
    run_dir = make_run(home, "trust", days=12, tournament_pods=30)
    doc = json.loads((run_dir / "backtest" / "metrics.json").read_text())
    at = _open(_app(home, monkeypatch), "overview")
    _no_exception(at)
    # The verdict box shows the verdict metrics.json states, word for word (12 held-out sessions: not
    # measurable), and its line of selection diagnostics below it.
    assert (
        doc["verdict"]
        == "edge not measurable: the held-out window has 12 sessions, the test needs at least 40"
    )
    assert _texts(at.info) == [doc["verdict"]] and not _texts(at.warning)
    assert doc["verdict_diagnostics"].endswith(f"PBO {doc['pbo']:.2f} (ranking among pods)")
    assert doc["verdict_diagnostics"] in _texts(at.caption)
    cards = {m.label: m for m in at.metric[:8]}
    assert cards["Ann. return"].value == "n/a" and cards["Calmar"].value == "n/a"
    assert "n/a: window under 63 sessions (12)" in cards["Ann. return"].proto.help
    assert any(
        c.startswith("Ann. return and Calmar: n/a: window under 63 sessions") for c in _texts(at.caption)
    )
    assert any("costs 0.05% + 1 bp" in c for c in _texts(at.caption))
    assert len(at.get("plotly_chart")) == 4  # + the PBO logit histogram
    _open(at, "tournament")
    _no_exception(at)
    _no_json_cells(at)
    board = at.dataframe[0].value
    for column in ("learning rate", "gamma", "clip", "epochs", "Sharpe", "max drawdown", "costs"):
        assert column in board.columns


def test_old_run_with_absurd_figures_shows_short_values(tmp_path, monkeypatch):
    """A run from before the trust change, with the default demo's 3,525,288% and Calmar 7.7M."""
    home = tmp_path / "home"
    make_run(home, "old", days=12, schema="old", absurd=True)
    at = _open(_app(home, monkeypatch), "overview")
    _no_exception(at)
    cards = {m.label: m for m in at.metric[:8]}
    assert cards["Ann. return"].value == "3.5M%" and cards["Calmar"].value == "7.7M"
    assert "3,525,288.00%" in cards["Ann. return"].proto.help
    # No stored verdict and no out-of-sample test in an old run: no verdict box (nothing is re-derived
    # from older figures), and no logit histogram.
    assert not _texts(at.warning) and not _texts(at.success) and not _texts(at.info)
    assert len(at.get("plotly_chart")) == 3


def test_hundreds_of_pods_render(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "big", days=3, tournament_pods=300)
    at = _open(_app(home, monkeypatch), "tournament")
    _no_exception(at)
    assert {m.label: m.value for m in at.metric}["Pods tried"] == "300"
    assert len(at.dataframe[0].value) == 10 and len(at.get("plotly_chart")) == 2
    _no_json_cells(at)


def test_paper_page_shows_the_compacted_days(tmp_path, monkeypatch):
    """Days the journal compacted ([retention] journal_sessions) show as one summary row each."""
    from app.paper.compact import compact_journal
    from app.paper.journal import Journal

    home = tmp_path / "home"
    with Journal.for_home(home) as journal:
        for session in ("2024-01-02", "2024-01-03", "2024-01-04"):
            ts = f"{session}T15:00:00+00:00"
            journal.decision(
                decision_ts=ts, bundle_id="b1", dry_run=False, equity=1e5, cash=5e4, tickers=["AAA"],
                current_weights=[0.0], target_weights=[0.5], policy_weights=[0.5], skipped=[], session=session,
            )  # fmt: skip
            journal.pnl(decision_ts=ts, equity=1e5, cash=5e4, last_equity=1e5, bundle_id="b1")
        assert compact_journal(journal, keep_sessions=1).days == ["2024-01-02", "2024-01-03"]
    at = _open(_app(home, monkeypatch), "paper")
    _no_exception(at)
    assert "Earlier days (compacted)" in _texts(at.subheader)
    assert any("2 days up to 2024-01-03" in text for text in _texts(at.caption))
