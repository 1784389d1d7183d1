"""The operating loop end to end: nightly promotions hand each new champion to paper trading.

The local Alpaca stand-in (tests/alpaca_fake.py) runs on a controllable clock along the XNAS
calendar; the champions are real exports of tiny policies promoted through the registry's API.
Three sessions: A trades; a retrain promotes B at night; B trades from the first cycle of the next
session; a retrain that keeps B; B trades on. Then the faults: a promotion during a cycle, a
half-written or corrupt export, the registry locked by a retrain, kill -9 of either process.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from alpaca_fake import FakeAlpaca, point_at
from test_paper_support import make_run

from app.export import export_bundle
from app.nightly.registry import Champion, DecisionRecord, current_champion, record_decision
from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy
from app.paper.attribution import SESSIONS_PER_YEAR, attribute
from app.paper.champion import ChampionSource, short
from app.paper.cycle import run_paper
from app.paper.heartbeat import heartbeat_path, read_heartbeat
from app.paper.journal import Journal, read_journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits

FAST = BrokerRetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01, timeout=5.0)
LIMITS = RiskLimits(max_order_notional=1e9, daily_loss_limit=None)
SESSIONS = ("2024-01-04", "2024-01-05", "2024-01-08")  # the fixture market's last three sessions
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """Two champions' exports (A and B, two tiny policies on the same tickers) and A's bars."""
    root = tmp_path_factory.mktemp("champions")
    run_a, run_b = make_run(root, "run-a", seed=0), make_run(root, "run-b", seed=1)
    run_c = make_run(root, "run-c", seed=2, num_tickers=2)  # a champion on fewer tickers
    a, b, c = (export_bundle(r.run_dir, exporter="torchscript") for r in (run_a, run_b, run_c))
    ids = {p: json.loads((p / "manifest.json").read_text())["bundle_id"] for p in (a, b, c)}
    return SimpleNamespace(bars=run_a.bars, a=a, b=b, c=c, id_a=ids[a], id_b=ids[b], id_c=ids[c])


@pytest.fixture
def alpaca_market(bundles, tmp_path, monkeypatch):
    """The fake Alpaca at 10:00 New York on the first session, keys in the environment, A promoted."""
    with FakeAlpaca(cash=100_000.0, bars=bundles.bars, slippage_bps=5.0) as fake:
        fake.set_time(at(SESSIONS[0]))
        point_at(fake, monkeypatch)
        home = tmp_path / "home"
        promote(home, "run-a", bundles.a)
        yield SimpleNamespace(fake=fake, home=home, **vars(bundles))


def at(day: str, time: str = "15:00") -> pd.Timestamp:
    return pd.Timestamp(f"{day} {time}", tz="UTC")


def promote(home: Path, run_id: str, bundle: Path, **kwargs) -> int:
    """What a retrain's record step writes on promotion: the decision and the pointer, one transaction."""
    now = datetime.now(UTC).isoformat()
    return record_decision(
        home,
        DecisionRecord(
            started_at=now,
            decided_at=now,
            verdict="promoted",
            reason="test",
            step="decide",
            challenger_run_id=run_id,
            bundle=str(bundle),
        ),  # fmt: skip
        Champion(run_id=run_id, policy_dir=str(bundle), promoted_at=now, bundle=str(bundle)),
        **kwargs,
    )


def keep(home: Path, run_id: str) -> None:
    """A retrain that keeps the champion: a rejected decision, the pointer untouched."""
    now = datetime.now(UTC).isoformat()
    record_decision(home, DecisionRecord(started_at=now, decided_at=now, verdict="rejected", reason="below margin",
                                   step="decide", challenger_run_id=run_id))  # fmt: skip


def trade_session(m, source: ChampionSource, day: str, cycles: int = 3) -> list:
    """``cycles`` decisions of the paper loop from 10:00 on ``day``, its sleeps moving the fake's clock."""
    m.fake.set_time(at(day))
    options = PaperOptions(
        limits=LIMITS, fill_timeout=1.0, fill_poll=0.01, kill_switch=m.home / "paper" / "KILL"
    )

    def advance(seconds: float) -> None:
        m.fake.set_time(pd.Timestamp(m.fake.now) + pd.Timedelta(seconds=seconds))

    with Journal.for_home(m.home) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        return run_paper(
            source,
            broker,
            journal,
            options,
            max_cycles=cycles,
            sleep=advance,
            heartbeat=heartbeat_path(m.home),
        )


def fast_source(home: Path) -> ChampionSource:
    return ChampionSource(home, pointer=current_champion, registry_timeout=0.05, attempts=2, retry_wait=0.01)


def events(home: Path, kind: str) -> pd.DataFrame:
    ev = read_journal(home)["events"]
    return ev[ev["kind"] == kind]


def assert_books_balance(m) -> None:
    """Every broker order journaled once with its fill; the per-champion records add up to the
    account's P&L to the cent (the fake's own, unrounded equity), costs included."""
    tables = read_journal(m.home)
    broker_ids = [o.client_order_id for o in m.fake.orders.values()]
    assert len(broker_ids) == len(set(broker_ids))  # no client order id twice at the broker
    orders = tables["orders"].set_index("client_order_id")
    for o in m.fake.orders.values():
        assert o.client_order_id in orders.index  # nothing the broker did is missing from the journal
        assert orders.loc[o.client_order_id, "filled_qty"] == pytest.approx(o.filled_qty, abs=1e-9)
    result = attribute(tables)
    account = m.fake.equity() - 100_000.0
    assert abs(result.records_pnl - account) < 0.005, (result.records_pnl, account)
    assert abs(result.account_pnl - account) < 0.01  # the journal's own record of the account
    return result


# --- the three sessions ----------------------------------------------------------------------------
def test_three_sessions_two_champions(alpaca_market):
    m, source = alpaca_market, fast_source(alpaca_market.home)
    first = trade_session(m, source, SESSIONS[0])
    assert [r.bundle_id for r in first] == [m.id_a] * 3 and first[0].submitted

    promote(m.home, "run-b", m.b)  # the night's retrain promotes B
    second = trade_session(m, source, SESSIONS[1])
    assert [r.bundle_id for r in second] == [m.id_b] * 3 and second[0].submitted  # from its first cycle
    assert [r.run_id for r in second] == ["run-b"] * 3

    keep(m.home, "run-c")  # the next night's retrain keeps B
    third = trade_session(m, source, SESSIONS[2])
    assert [r.bundle_id for r in third] == [m.id_b] * 3

    tables = read_journal(m.home)
    by_session = tables["decisions"].groupby("session")["bundle_id"].agg(set).to_dict()
    assert by_session == {SESSIONS[0]: {m.id_a}, SESSIONS[1]: {m.id_b}, SESSIONS[2]: {m.id_b}}
    assert set(tables["orders"]["bundle_id"]) == {m.id_a, m.id_b}
    assert tables["sessions"]["bundle_id"].tolist() == [m.id_a, m.id_b, m.id_b]
    assert tables["fills"]["bundle_id"].notna().all() and tables["pnl"]["bundle_id"].notna().all()
    (switch,) = events(m.home, "champion_switch")["message"]
    assert switch.startswith(f"champion switch: {short(m.id_a)} -> {short(m.id_b)}")
    assert events(m.home, "champion_refused").empty
    # the selection's events carry the bundle they select: the first champion's, the switch's new one
    assert events(m.home, "champion")["bundle_id"].tolist() == [m.id_a]
    assert events(m.home, "champion_switch")["bundle_id"].tolist() == [m.id_b]

    result = assert_books_balance(m)
    a, b = result.records
    assert (a.bundle_id, a.run_id, a.sessions) == (m.id_a, "run-a", 1)
    assert (b.bundle_id, b.run_id, b.sessions) == (m.id_b, "run-b", 2)
    assert (a.first_session, b.first_session, b.last_session) == SESSIONS
    for record in (a, b):
        assert record.costs > 0  # 5 bps of slippage on every fill, inside the P&L already
        assert record.orders["filled"] == record.num_orders > 0 and record.decisions == 3 * record.sessions
        assert record.sharpe is None  # fewer than MIN_SHARPE_SESSIONS sessions
        assert record.buy_and_hold is not None
    # a session's P&L is measured from its first decision to the next session's: B's first session
    # starts where A's ended
    assert result.sessions["bundle_id"].tolist() == [m.id_a, m.id_b, m.id_b]
    beat = read_heartbeat(m.home)
    assert (beat.bundle_id, beat.run_id, beat.status, beat.mode) == (m.id_b, "run-b", "traded", "champion")
    assert beat.ok and beat.session == SESSIONS[2] and beat.orders == len(third[-1].orders)


def test_sessions_per_year_is_the_backtests():
    from backtests.metrics import ANNUALIZATION_FACTORS

    assert ANNUALIZATION_FACTORS["daily"] == SESSIONS_PER_YEAR


def test_a_champion_on_fewer_tickers_sells_the_ones_it_leaves_out(alpaca_market):
    m, source = alpaca_market, fast_source(alpaca_market.home)
    trade_session(m, source, SESSIONS[0], cycles=1)
    assert m.fake.positions.get("SYN002", 0.0) > 0  # A holds all three
    promote(m.home, "run-c", m.c)  # C trades SYN000 and SYN001 only
    (first,) = trade_session(m, source, SESSIONS[1], cycles=1)
    assert first.bundle_id == m.id_c and abs(m.fake.positions["SYN002"]) < 1e-9  # sold whole, at once
    sell = read_journal(m.home)["orders"].query("ticker == 'SYN002' and bundle_id == @m.id_c")
    assert len(sell) == 1 and sell["message"].iloc[0].startswith("retired: SYN002")
    assert len(events(m.home, "retired")) == 1
    assert_books_balance(m)


# --- faults ------------------------------------------------------------------------------------------
def test_promotion_during_a_cycle_finishes_on_the_old_bundle(alpaca_market):
    m, source = alpaca_market, fast_source(alpaca_market.home)
    promoted: list[int] = []

    def promote_at_first_order(order) -> None:  # the pointer moves while the cycle is sending orders
        if not promoted:
            promoted.append(promote(m.home, "run-b", m.b))

    m.fake.on_order = promote_at_first_order
    first = trade_session(m, source, SESSIONS[0])
    assert promoted and current_champion(m.home).run_id == "run-b"
    # the cycle that saw the promotion and the rest of the session: A's
    assert [r.bundle_id for r in first] == [m.id_a] * 3
    assert set(read_journal(m.home)["orders"]["bundle_id"]) == {m.id_a}
    second = trade_session(m, source, SESSIONS[1], cycles=1)  # the next session: B from its first cycle
    assert second[0].bundle_id == m.id_b and len(events(m.home, "champion_switch")) == 1
    assert_books_balance(m)


def _corrupt(bundle: Path, target: Path) -> Path:
    """A copy of ``bundle`` whose graph lost its last bytes (an export cut short)."""
    import shutil

    shutil.copytree(bundle, target)
    onnx = target / "policy.onnx"
    onnx.write_bytes(onnx.read_bytes()[:-100])
    return target


@pytest.mark.parametrize("damage", ["truncated graph", "missing folder", "edited manifest"])
def test_a_bad_export_is_not_traded(alpaca_market, tmp_path, damage):
    m, source = alpaca_market, fast_source(alpaca_market.home)
    trade_session(m, source, SESSIONS[0], cycles=1)
    if damage == "truncated graph":
        bad = _corrupt(m.b, tmp_path / "b-cut")
    elif damage == "missing folder":  # the staging folder of an export that never finished
        bad = tmp_path / "run-b-champion"
        (tmp_path / ".run-b-champion.tmp").mkdir()
    else:
        import shutil

        bad = Path(shutil.copytree(m.b, tmp_path / "b-edited"))
        manifest = json.loads((bad / "manifest.json").read_text())
        manifest["tickers"] = list(reversed(manifest["tickers"]))
        (bad / "manifest.json").write_text(json.dumps(manifest))
    promote(m.home, "run-b", bad)
    second = trade_session(m, source, SESSIONS[1])
    assert [r.bundle_id for r in second] == [m.id_a] * 3  # A stays; nothing traded with the bad one
    assert all(r.alert and "run-b" in r.alert and "not traded" in r.alert for r in second)
    refused = events(m.home, "champion_refused")
    assert len(refused) == 1 and set(refused["level"]) == {"error"}  # one loud event
    assert refused["bundle_id"].tolist() == [m.id_a]  # the bundle that keeps trading
    beat = read_heartbeat(m.home)
    assert not beat.ok and "not traded" in beat.alert and beat.bundle_id == m.id_a
    promote(m.home, "run-b", m.b)  # a good export: the next session switches
    third = trade_session(m, source, SESSIONS[2], cycles=1)
    assert third[0].bundle_id == m.id_b and third[0].alert is None and read_heartbeat(m.home).ok
    assert_books_balance(m)


def test_registry_locked_by_a_retrain_keeps_the_bundle_for_the_session(alpaca_market):
    m, source = alpaca_market, fast_source(alpaca_market.home)
    trade_session(m, source, SESSIONS[0], cycles=1)
    promote(m.home, "run-b", m.b)
    # A writer holding the registry in exclusive mode: readers get "database is locked".
    writer = sqlite3.connect(m.home / "registry.sqlite", isolation_level=None)
    writer.execute("PRAGMA locking_mode=EXCLUSIVE")
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("UPDATE champion SET fitness = fitness")
    try:
        second = trade_session(m, source, SESSIONS[1], cycles=2)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert [r.bundle_id for r in second] == [m.id_a] * 2 and second[0].submitted
    (locked,) = events(m.home, "registry_locked")["message"]
    assert "keeps this session" in locked
    assert events(m.home, "registry_locked")["bundle_id"].tolist() == [m.id_a]  # the one it keeps
    third = trade_session(m, source, SESSIONS[2], cycles=1)  # unlocked: the next session reads it
    assert third[0].bundle_id == m.id_b
    assert_books_balance(m)


def test_restart_mid_session_resumes_the_sessions_bundle(alpaca_market):
    """A new process (a new source) mid-session trades on with the bundle the journal names, even
    though a promotion happened since; the next session switches."""
    m = alpaca_market
    trade_session(m, fast_source(m.home), SESSIONS[0], cycles=1)
    promote(m.home, "run-b", m.b)
    m.fake.set_time(at(SESSIONS[0], "16:00"))
    restarted = fast_source(m.home)
    with Journal.for_home(m.home) as journal:
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        options = PaperOptions(limits=LIMITS, fill_timeout=1.0, fill_poll=0.01)
        (again,) = run_paper(restarted, broker, journal, options, once=True)
    assert again.bundle_id == m.id_a and again.session == SESSIONS[0]
    resume = events(m.home, "resume")
    assert "resumed with bundle" in resume["message"].iloc[0] and resume["bundle_id"].iloc[0] == m.id_a
    assert trade_session(m, restarted, SESSIONS[1], cycles=1)[0].bundle_id == m.id_b
    assert_books_balance(m)


def test_a_restarted_loop_journals_the_switch_against_the_last_traded_session(alpaca_market):
    """A new process (a systemd restart, a reboot) between sessions holds no bundle: the journal's
    last traded session names the bundle it switches from."""
    m = alpaca_market
    trade_session(m, fast_source(m.home), SESSIONS[0], cycles=1)
    promote(m.home, "run-b", m.b)  # the night's retrain promotes B; the paper process restarts
    (second,) = trade_session(m, fast_source(m.home), SESSIONS[1], cycles=1)
    assert second.bundle_id == m.id_b and second.alert is None
    switch = events(m.home, "champion_switch")
    assert len(switch) == 1 and switch["bundle_id"].tolist() == [m.id_b]
    (message,) = switch["message"]
    assert message.startswith(f"champion switch: {short(m.id_a)} -> {short(m.id_b)} (run run-a -> run-b")
    assert events(m.home, "champion")["bundle_id"].tolist() == [m.id_a]  # session 1's, nothing more
    keep(m.home, "run-c")  # the next night's retrain keeps B; another restart: no switch
    (third,) = trade_session(m, fast_source(m.home), SESSIONS[2], cycles=1)
    assert third.bundle_id == m.id_b and len(events(m.home, "champion_switch")) == 1
    kept = events(m.home, "champion")
    assert kept["bundle_id"].tolist() == [m.id_a, m.id_b]
    assert kept["message"].iloc[-1].endswith(f"from session {SESSIONS[2]} (as in session {SESSIONS[1]})")
    assert_books_balance(m)


# --- the journal's migration -------------------------------------------------------------------------
OLD_SCHEMA = """
CREATE TABLE decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at TEXT NOT NULL, decision_ts TEXT NOT NULL,
    bundle_id TEXT NOT NULL, dry_run INTEGER NOT NULL, equity REAL, cash REAL, tickers TEXT NOT NULL,
    current_weights TEXT NOT NULL, target_weights TEXT NOT NULL, policy_weights TEXT NOT NULL,
    skipped TEXT NOT NULL, note TEXT);
CREATE TABLE orders (client_order_id TEXT PRIMARY KEY, recorded_at TEXT NOT NULL, decision_ts TEXT NOT NULL,
    bundle_id TEXT NOT NULL, ticker TEXT NOT NULL, side TEXT NOT NULL, qty REAL NOT NULL, est_price REAL,
    est_notional REAL, status TEXT NOT NULL, broker_order_id TEXT, filled_qty REAL DEFAULT 0,
    filled_avg_price REAL, message TEXT);
CREATE TABLE fills (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at TEXT NOT NULL, client_order_id TEXT NOT NULL,
    ticker TEXT NOT NULL, side TEXT NOT NULL, filled_qty REAL NOT NULL, filled_avg_price REAL, status TEXT NOT NULL);
CREATE TABLE positions (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at TEXT NOT NULL, decision_ts TEXT,
    ticker TEXT NOT NULL, qty REAL NOT NULL, market_value REAL, expected_qty REAL, diff REAL);
CREATE TABLE pnl (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at TEXT NOT NULL, decision_ts TEXT,
    equity REAL NOT NULL, cash REAL NOT NULL, last_equity REAL, day_pnl REAL, day_return REAL);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at TEXT NOT NULL, level TEXT NOT NULL,
    kind TEXT NOT NULL, message TEXT NOT NULL);
INSERT INTO decisions VALUES (1, '2024-01-03T15:00:00+00:00', '2024-01-03T14:59:00+00:00', 'old', 0, 100.0,
    100.0, '[]', '[]', '[]', '[]', '[]', '');
INSERT INTO fills VALUES (1, '2024-01-03T15:00:01+00:00', 'pr-1', 'AAA', 'buy', 1.0, 10.0, 'filled');
INSERT INTO pnl VALUES (1, '2024-01-03T15:00:02+00:00', NULL, 100.0, 90.0, 100.0, 0.0, 0.0);
"""


def test_a_journal_of_the_previous_schema_is_migrated_in_place(tmp_path):
    from app.paper.journal import journal_path
    from app.paper.journal_schema import ADDED_COLUMNS, SCHEMA_VERSION

    path = journal_path(tmp_path)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as old:
        old.executescript(OLD_SCHEMA)
    before = read_journal(tmp_path)  # read-only, not migrated: the new columns read as missing
    assert before["decisions"]["session"].isna().all() and before["sessions"].empty
    with Journal.for_home(tmp_path) as journal:
        journal.event("start", "after the upgrade")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        for table, columns in ADDED_COLUMNS.items():
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            assert {name for name, _ in columns} <= have
    tables = read_journal(tmp_path)
    assert tables["decisions"]["bundle_id"].tolist() == ["old"]  # the old rows stay, the new columns NULL
    assert tables["decisions"]["holdings"].isna().all() and tables["fills"]["bundle_id"].isna().all()
    assert tables["events"]["message"].tolist() == ["after the upgrade"]
    assert attribute(tables).records == []  # no marks in the old rows: nothing attributed


# --- kill -9 of either process -------------------------------------------------------------------------
def _subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PODRACER_DEBUG": "1"}


def _paper_once(home: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "app.cli", "--home", str(home), "paper", "--champion", "--once"]
    argv += ["--fill-timeout", "1", "--max-order-notional", "1e9", "--daily-loss-limit", "0.5"]
    return subprocess.Popen(
        argv, cwd=ROOT, env=_subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_paper_process_killed_mid_cycle_and_restarted(alpaca_market):
    """A real `podracer paper --champion --once` process, SIGKILLed after the broker created its second
    order and before the reply: the restart finishes the same bar, finds that order by its client id
    and sends only what is missing."""
    m = alpaca_market
    proc: list[subprocess.Popen] = []
    posts = []

    def kill_at_second_order(order) -> None:
        posts.append(order.client_order_id)
        if len(posts) == 2:
            os.kill(proc[0].pid, signal.SIGKILL)

    m.fake.on_order = kill_at_second_order
    proc.append(_paper_once(m.home))
    out, _ = proc[0].communicate(timeout=120)
    assert proc[0].returncode == -signal.SIGKILL, out
    rows = read_journal(m.home)["orders"].set_index("client_order_id")
    assert rows.loc[posts[1], "status"] == "submitted"  # journaled, the broker's answer never came back
    m.fake.on_order = None
    # The restart: the same command, run here (a fresh loop; its state is the journal's and the broker's).
    from app.cli import main

    argv = ["--home", str(m.home), "paper", "--champion", "--once"]
    assert (
        main([*argv, "--fill-timeout", "1", "--max-order-notional", "1e9", "--daily-loss-limit", "0.5"]) == 0
    )
    tables = read_journal(m.home)
    decided = tables["decisions"]["decision_ts"].unique()
    assert len(decided) == 1  # the same decision bar, so the same client order ids
    assert tables["orders"].set_index("client_order_id").loc[posts[1], "status"] == "filled"
    per_ticker = pd.Series([o.symbol for o in m.fake.orders.values()]).value_counts()
    assert per_ticker.max() == 1  # one order per ticker for the bar: nothing sent twice
    assert len(m.fake.orders) == len(tables["orders"])
    assert "resumed with bundle" in events(m.home, "resume")["message"].iloc[0]
    last = tables["decisions"].iloc[-1]
    target = dict(zip(json.loads(last["tickers"]), json.loads(last["target_weights"]), strict=True))
    equity = m.fake.equity()
    for ticker, weight in target.items():  # nothing lost: the book is at the restarted decision's target
        held = m.fake.positions.get(ticker, 0.0) * m.fake.prices[ticker] / equity
        assert held == pytest.approx(weight, abs=0.01)
    assert read_heartbeat(m.home).status == "traded"
    assert_books_balance(m)


RETRAIN_KILLED_BEFORE_COMMIT = """
import os, signal, sys
from app.nightly.registry import Champion, DecisionRecord, record_decision
home, bundle = sys.argv[1], sys.argv[2]
record_decision(
    home,
    DecisionRecord(started_at="s", decided_at="d", verdict="promoted", reason="r", step="decide", bundle=bundle),
    Champion(run_id="run-b", policy_dir=bundle, promoted_at="p", bundle=bundle),
    before_commit=lambda: os.kill(os.getpid(), signal.SIGKILL),
)
"""


def test_retrain_killed_before_its_commit_is_never_traded(alpaca_market):
    """The export of B is complete, its promotion never committed: B is not the champion, A trades."""
    m, source = alpaca_market, fast_source(alpaca_market.home)
    trade_session(m, source, SESSIONS[0], cycles=1)
    killed = subprocess.run(
        [sys.executable, "-c", RETRAIN_KILLED_BEFORE_COMMIT, str(m.home), str(m.b)],
        cwd=ROOT, env=_subprocess_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert current_champion(m.home).run_id == "run-a"
    second = trade_session(m, source, SESSIONS[1], cycles=2)
    assert [r.bundle_id for r in second] == [m.id_a] * 2 and events(m.home, "champion_switch").empty
    assert_books_balance(m)
