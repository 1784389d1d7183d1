"""Nightly retrain: decision rule, promotion / rejection, failures at every step, lock, crash safety.

The pipeline's steps are replaced by fakes with scripted scores (:class:`FakePipeline`), so every
branch runs in milliseconds; ``test_nightly_integration.py`` runs the real steps on tiny data.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.champion import Champion
from app.config import Config
from app.gate import decide
from app.nightly.lock import LockBusyError, ProcessLock, read_lock_info
from app.nightly.pipeline import STEPS, RetrainError, run_retrain
from app.nightly.registry import current_champion, decision_gate, read_decisions, registry_path
from app.nightly.steps import ChallengerRun, DataSnapshot, Evaluation, RetrainSteps
from backtests.metrics_model import OosTest
from backtests.verdict import EdgeVerdict
from data.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
WINDOWS = {
    "train": ("2024-01-02", "2024-01-31"),
    "valid": ("2024-02-01", "2024-02-14"),
    "test": ("2024-02-15", "2024-02-29"),
    "full": ("2024-01-02", "2024-02-29"),
}


def _edge(outcome: str | None, psr: float = 0.99) -> EdgeVerdict | None:
    """The challenger's out-of-sample verdict as backtests.verdict states it (None: no test)."""
    if outcome is None:
        return None
    return EdgeVerdict(outcome, (f"PSR {psr:.3f}", "excess over buy_and_hold +0.10%/day (p 0.010)"))


class FakePipeline:
    """Scripted steps: the challenger scores ``challenger_fitness`` and its out-of-sample test says
    ``edge`` (PSR after the looks ``psr``), the champion scores ``champion_fitness``."""

    def __init__(
        self,
        challenger_fitness: float | None = 1.0,
        champion_fitness: float | None = 0.5,
        edge: str | None = "significant",
        psr: float = 0.99,
        trials: int = 4,
        windows: dict | None = None,
        run_id: str | None = None,
    ) -> None:
        self.run_id = run_id  # None: numbered by the runs already there
        self.challenger_fitness = challenger_fitness
        self.champion_fitness = champion_fitness
        self.edge = edge
        self.psr = psr
        self.trials = trials
        self.windows = windows or WINDOWS
        self.seen_champion: Champion | None = None
        self.evaluated = 0
        self.exported: list[str] = []

    def steps(self) -> RetrainSteps:
        return RetrainSteps(self.update_data, self.tournament, self.evaluate, self.export)

    def update_data(self, config, home):
        return DataSnapshot(splits=None, windows=self.windows, source="fake", update={"rows_fetched": 0})

    def tournament(self, config, home, data, champion):
        self.seen_champion = champion
        runs = home / "runs"
        run_id = self.run_id or f"nightly-{len(list(runs.glob('*'))) if runs.exists() else 0:03d}"
        policy_dir = runs / run_id / "champion"
        policy_dir.mkdir(parents=True)
        # Distinct bytes per run, so a test can tell which run's policy the champion folder holds.
        (policy_dir / "policy.safetensors").write_bytes(f"weights of {run_id}".encode())
        (policy_dir / "spec.json").write_text(json.dumps({"run": run_id}))
        return ChallengerRun(
            run_id=run_id,
            run_dir=runs / run_id,
            policy_dir=policy_dir,
            num_trials=self.trials,
            warm_started_from=None if champion is None else champion.run_id,
        )

    def evaluate(self, config, home, data, challenger, champion):
        self.evaluated += 1
        champ = None
        if champion is not None:
            champ = {"fitness": self.champion_fitness, "sharpe_ratio": self.champion_fitness}
        return Evaluation(
            fitness="sharpe",
            window=tuple(self.windows["test"]),
            challenger={"fitness": self.challenger_fitness, "sharpe_ratio": self.challenger_fitness},
            champion=champ,
            edge=_edge(self.edge, self.psr),
            test=OosTest(looks=2, psr_after_looks=self.psr),
        )

    def export(self, config, home, challenger):
        out = home / "exports" / f"{challenger.run_id}-champion"
        out.mkdir(parents=True)
        (out / "manifest.json").write_text(json.dumps({"run_id": challenger.run_id}))
        self.exported.append(challenger.run_id)
        return out


def _config(**nightly) -> Config:
    """The fixed-window gate (``[gate] rule = "window"``): these tests script its scores; the shadow
    book's rule is tests/test_shadow.py's and tests/test_shadow_nights.py's."""
    return Config().with_updates(gate={"rule": "window", "margin": 0.1, "level": 0.1}, nightly=nightly)


def _registry_state(home: Path) -> tuple[list[dict], dict | None, bytes | None]:
    champ = current_champion(home)
    policy = Path(champ.policy_dir, "policy.safetensors").read_bytes() if champ else None
    return read_decisions(home), champ, policy


# --- the decision rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("challenger", "champion", "edge", "promote", "words"),
    [
        (1.25, 1.0, "significant", True, "beats champion"),
        (1.05, 1.0, "significant", False, "by the margin"),  # better, but not by the margin
        (0.5, 1.0, "significant", False, "does not beat"),
        (2.0, 1.0, "not significant", False, "challenger's edge not significant out of sample: PSR"),
        (2.0, 1.0, "not measurable", False, "edge not measurable"),
        (2.0, 1.0, None, False, "no out-of-sample test"),
        (math.nan, 1.0, "significant", False, "undefined"),
        (None, 1.0, "significant", False, "undefined"),
        (0.3, None, "significant", True, "undefined champion"),  # a flat champion has no Sharpe: beaten
        (0.3, math.inf, "significant", True, "undefined champion"),
    ],
)
def test_decide_with_champion(challenger, champion, edge, promote, words):
    verdict = decide(challenger, champion, _edge(edge), has_champion=True, margin=0.1)
    assert verdict.promote is promote
    assert words in verdict.reason


def test_decide_margin_is_inclusive_and_in_fitness_units():
    sig = _edge("significant")
    assert decide(1.1, 1.0, sig, has_champion=True, margin=0.1).promote
    assert not decide(1.0999, 1.0, sig, has_champion=True, margin=0.1).promote
    assert decide(1.0, 1.0, sig, has_champion=True, margin=0.0).promote
    assert (
        "edge significant out of sample: PSR 0.990"
        in decide(1.2, 1.0, sig, has_champion=True, margin=0.1).reason
    )


def test_decide_without_champion():
    # A first challenger passes the same test as any other: a significant edge, a defined fitness.
    gated = dict(has_champion=False, margin=0.1)
    assert not decide(9.0, None, _edge("not significant"), **gated).promote
    assert not decide(9.0, None, _edge("not measurable"), **gated).promote
    assert not decide(None, None, _edge("significant"), **gated).promote
    assert decide(1.0, None, _edge("significant"), **gated).promote


# --- promotion and rejection --------------------------------------------------------------------------


def test_first_run_with_no_champion_promotes_and_exports(home):
    # A first challenger whose gate test is significant takes charge (no margin: nothing to beat).
    fake = FakePipeline(challenger_fitness=0.2, edge="significant", psr=0.97)
    outcome = run_retrain(_config(), home, steps=fake.steps())
    assert outcome.verdict == "promoted" and outcome.previous_champion is None
    assert fake.seen_champion is None
    champ = current_champion(home)
    assert champ.run_id == outcome.challenger_run_id == outcome.champion
    assert champ.decision_id == outcome.decision_id
    # The pointer names an immutable copy of the challenger's policy, not the run folder.
    assert Path(champ.policy_dir) == home / "champions" / outcome.challenger_run_id
    assert Path(champ.policy_dir, "policy.safetensors").read_bytes() == b"weights of nightly-000"
    assert fake.exported == [outcome.challenger_run_id]
    assert champ.bundle == outcome.bundle and Path(outcome.bundle, "manifest.json").is_file()
    (row,) = read_decisions(home)
    assert row["verdict"] == "promoted" and row["champion_run_id"] is None
    assert row["challenger_fitness"] == pytest.approx(0.2) and row["challenger_dsr"] == pytest.approx(0.97)
    # The gate's level, the looks as the DSR's trials, the test in the scores.
    assert row["significance_level"] == pytest.approx(0.1) and row["num_trials"] == 2
    assert row["scores"]["edge"].startswith("edge significant out of sample")
    assert row["scores"]["rule"] == "window"  # the rule that decided, [gate] rule
    assert row["scores"]["oos_test"] == {"looks": 2, "psr_after_looks": 0.97}
    assert outcome.challenger_edge == row["scores"]["edge"] == decision_gate(row).edge
    assert (row["eval_start"], row["eval_end"]) == WINDOWS["test"]
    assert (row["selection_start"], row["selection_end"]) == WINDOWS["valid"]
    assert (row["data_start"], row["data_end"]) == WINDOWS["full"]
    assert row["inputs"]["config"]["gate"]["margin"] == 0.1 and row["inputs"]["run_trials"] == 4
    assert row["scores"]["challenger"]["sharpe_ratio"] == pytest.approx(0.2)
    assert not (home / "retrain.lock").read_text().strip()  # released cleanly


def test_first_run_gated_by_significance_is_rejected_without_champion(home):
    # A first challenger whose gate test is not significant never takes charge.
    fake = FakePipeline(edge="not significant", psr=0.5)
    outcome = run_retrain(_config(), home, steps=fake.steps())
    assert outcome.verdict == "rejected" and outcome.champion is None
    assert current_champion(home) is None


def test_worse_challenger_is_rejected_and_champion_unchanged(home):
    first = run_retrain(_config(), home, steps=FakePipeline(challenger_fitness=1.0).steps())
    before = current_champion(home)
    worse = FakePipeline(challenger_fitness=0.4, champion_fitness=1.0)
    outcome = run_retrain(_config(), home, steps=worse.steps())
    assert outcome.verdict == "rejected" and "does not beat" in outcome.reason
    assert outcome.champion == first.challenger_run_id
    assert current_champion(home) == before
    assert worse.exported == []  # no bundle for a rejected challenger
    assert worse.seen_champion.run_id == first.challenger_run_id  # the tournament was warm-started
    rows = read_decisions(home)
    assert [r["verdict"] for r in rows] == ["promoted", "rejected"]
    assert rows[1]["champion_run_id"] == first.challenger_run_id
    assert rows[1]["champion_fitness"] == pytest.approx(1.0)
    assert not (home / "champions" / outcome.challenger_run_id).exists()


def test_better_challenger_is_promoted_and_its_bundle_exported(home):
    first = run_retrain(_config(), home, steps=FakePipeline().steps())
    better = FakePipeline(challenger_fitness=1.5, champion_fitness=1.0, psr=0.97)
    outcome = run_retrain(_config(), home, steps=better.steps())
    assert outcome.verdict == "promoted" and outcome.previous_champion == first.challenger_run_id
    champ = current_champion(home)
    assert champ.run_id == outcome.challenger_run_id != first.challenger_run_id
    assert better.exported == [outcome.challenger_run_id]
    assert Path(champ.bundle, "manifest.json").read_text() == json.dumps(
        {"run_id": outcome.challenger_run_id}
    )
    assert Path(champ.policy_dir, "policy.safetensors").read_bytes() == b"weights of nightly-001"
    assert champ.info.previous_champion == first.challenger_run_id
    # The first champion's policy copy is kept (history), untouched.
    assert (home / "champions" / first.challenger_run_id / "policy.safetensors").read_bytes() == (
        b"weights of nightly-000"
    )


def test_better_fitness_but_no_significant_edge_is_rejected(home):
    run_retrain(_config(), home, steps=FakePipeline().steps())
    before = current_champion(home)
    fake = FakePipeline(challenger_fitness=3.0, champion_fitness=1.0, edge="not significant", psr=0.6)
    outcome = run_retrain(_config(), home, steps=fake.steps())
    assert outcome.verdict == "rejected" and "edge not significant out of sample" in outcome.reason
    assert current_champion(home) == before


def test_export_disabled_promotes_without_bundle(home):
    fake = FakePipeline()
    outcome = run_retrain(_config(export=False), home, steps=fake.steps())
    assert outcome.verdict == "promoted" and outcome.bundle is None and fake.exported == []
    assert current_champion(home).bundle is None


def test_overlapping_windows_fail_before_training(home):
    bad = {**WINDOWS, "valid": ("2024-02-01", "2024-02-20")}  # runs into the test window
    fake = FakePipeline(windows=bad)
    with pytest.raises(RetrainError, match="step update_data: windows overlap"):
        run_retrain(_config(), home, steps=fake.steps())
    assert fake.evaluated == 0 and current_champion(home) is None


# --- failures leave the champion in place -------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS)
def test_failure_at_any_step_keeps_champion_and_registry(home, step):
    first = run_retrain(_config(), home, steps=FakePipeline().steps())
    rows_before, champ_before, policy_before = _registry_state(home)

    def boom() -> None:
        raise ValueError(f"injected at {step}")

    better = FakePipeline(challenger_fitness=2.0, champion_fitness=0.1)  # would be promoted
    with pytest.raises(RetrainError) as info:
        run_retrain(_config(), home, steps=better.steps(), faults={step: boom})
    message = str(info.value)
    assert "\n" not in message
    assert f"step {step}: ValueError: injected at {step}" in message
    assert f"champion {first.challenger_run_id} kept" in message
    rows, champ, policy = _registry_state(home)
    assert champ == champ_before and policy == policy_before
    assert rows[: len(rows_before)] == rows_before  # history untouched
    (failed,) = rows[len(rows_before) :]  # plus exactly one row that records the failure
    assert failed["verdict"] == "failed" and failed["step"] == step
    assert "injected" in failed["reason"] and failed["champion_run_id"] == first.challenger_run_id
    assert not (home / "retrain.lock").read_text().strip()
    # The next night works normally.
    assert run_retrain(_config(), home, steps=better.steps()).verdict == "promoted"


def test_a_failing_step_is_one_line_and_exit_1_on_the_cli(home, tmp_path, monkeypatch, capsys):
    from app import cli
    from app.nightly import pipeline as nightly

    def broken(config, home_dir):
        raise RuntimeError("disk on fire\nsecond line")

    fake = FakePipeline()
    steps = RetrainSteps(broken, fake.tournament, fake.evaluate, fake.export)
    monkeypatch.setattr(nightly, "default_steps", lambda: steps)
    rc = cli.main(["--home", str(home), "retrain"])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert err.count("\n") == 0 and "step update_data: RuntimeError: disk on fire" in err
    assert read_decisions(home)[-1]["verdict"] == "failed"


def test_a_retrain_refuses_the_always_rule_before_it_starts(home):
    """``[gate] rule = "always"`` (every challenger takes over) is a walk-forward's plumbing: a retrain
    refuses it as a config error, before it takes the lock or records anything."""
    fake = FakePipeline()
    config = Config().with_updates(gate={"rule": "always"})
    with pytest.raises(ConfigError, match='\\[gate\\] rule = "always" promotes every challenger untested'):
        run_retrain(config, home, steps=fake.steps())
    assert not registry_path(home).exists() and not (home / "retrain.lock").exists()


def test_cli_json_reports_the_decision(home, monkeypatch, capsys):
    from app import cli
    from app.nightly import pipeline as nightly

    fake = FakePipeline()
    monkeypatch.setattr(nightly, "default_steps", fake.steps)
    config = home / "c.toml"
    config.write_text('[gate]\nrule = "window"\nmargin = 0.25\n')
    assert cli.main(["retrain", "--home", str(home), "--config", str(config), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "promoted" and out["champion"] == out["challenger_run_id"]
    assert read_decisions(home)[0]["margin"] == 0.25


# --- processes: lock, stale lock, hard crash ----------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_nightly import FakePipeline, _config
    from app.nightly.pipeline import run_retrain
    home = Path({home!r})
    mode = sys.argv[1]
    fake = FakePipeline(challenger_fitness=5.0, champion_fitness=0.0)
    faults = {{}}
    if mode == "hold":
        def hold():
            Path(home, "started").touch()
            deadline = time.monotonic() + 60
            while not Path(home, "release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        faults["tournament"] = hold
    elif mode == "crash-in-commit":
        # Dies inside the registry transaction, after the decision row and the new champion
        # pointer were written but before COMMIT: like a kill -9 or a power cut at the worst moment.
        faults["record"] = lambda: os._exit(9)
    run_retrain(_config(), home, steps=fake.steps(), faults=faults)
    """
)


def _child(home: Path, mode: str) -> subprocess.Popen:
    code = _CHILD.format(tests=str(ROOT / "tests"), home=str(home))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, mode], cwd=ROOT, env=env, stderr=subprocess.PIPE)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited early: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


def test_concurrent_runs_are_blocked(home):
    holder = _child(home, "hold")
    try:
        _wait_for(home / "started", holder)
        # Another process: the CLI exits 75 with one line naming the holder.
        second = subprocess.run(
            [sys.executable, "-m", "app.cli", "--home", str(home), "retrain"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert second.returncode == 75, second.stderr
        line = second.stderr.strip()
        assert "\n" not in line and "another podracer retrain is running" in line
        assert f"pid {holder.pid}" in line
        # And in this process too (a third one), through the library.
        with pytest.raises(LockBusyError, match=f"pid {holder.pid}"):
            run_retrain(_config(), home, steps=FakePipeline().steps())
        assert read_decisions(home) == []  # blocked runs decide nothing
    finally:
        (home / "release").touch()
        assert holder.wait(timeout=60) == 0, holder.stderr.read().decode()[-2000:]
    assert current_champion(home).run_id == read_decisions(home)[0]["challenger_run_id"]


def test_stale_lock_from_a_dead_process_is_recovered(home):
    code = (
        "import os, sys; from app.nightly.lock import ProcessLock; "
        f"ProcessLock({str(home / 'retrain.lock')!r}).acquire(); os._exit(0)"
    )
    dead = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    assert dead.wait(timeout=60) == 0
    assert read_lock_info(home / "retrain.lock").pid == dead.pid  # it died holding the lock
    lock = ProcessLock(home / "retrain.lock")
    with lock:
        assert lock.recovered is not None and lock.recovered.pid == dead.pid
        assert read_lock_info(home / "retrain.lock").pid == os.getpid()
    # And a whole retrain goes through after a holder died.
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60, check=True)
    assert run_retrain(_config(), home, steps=FakePipeline().steps()).verdict == "promoted"


def test_hard_crash_inside_the_commit_leaves_registry_and_champion_intact(home):
    run_retrain(_config(), home, steps=FakePipeline().steps())
    rows_before, champ_before, policy_before = _registry_state(home)
    crashed = _child(home, "crash-in-commit")
    assert crashed.wait(timeout=60) == 9
    rows, champ, policy = _registry_state(home)
    assert rows == rows_before  # no half decision: the transaction never committed
    assert champ == champ_before and policy == policy_before
    # The dead process's pid is still in the lock file; the next run recovers it and decides.
    assert read_lock_info(home / "retrain.lock").pid == crashed.pid
    outcome = run_retrain(_config(), home, steps=FakePipeline(challenger_fitness=9.0).steps())
    assert outcome.verdict == "promoted"
    assert registry_path(home).is_file()


# --- incremental data update --------------------------------------------------------------------------


def test_incremental_update_fetches_only_what_is_missing(home):
    from datetime import date

    import pandas as pd

    from app.nightly.steps import incremental_update
    from data.store import BarStore
    from data.synthetic import SyntheticSpec, generate, to_frame

    everything = to_frame(generate(SyntheticSpec(num_tickers=2, num_sessions=10, seed=3)))
    session = pd.DatetimeIndex(everything["timestamp"]).tz_convert("America/New_York").strftime("%Y-%m-%d")
    tickers = sorted(everything["ticker"].unique())
    calls = []

    def fake_fetch(source, names, start, end, interval):
        calls.append((source, list(names), start, end, interval))
        keep = (session >= start) & (session <= end) & everything["ticker"].isin(names).to_numpy()
        return everything.loc[keep].reset_index(drop=True)

    first = incremental_update(
        home,
        source="alpaca",
        tickers=tickers,
        interval="1m",
        initial_days=5,
        today=date(2024, 1, 9),
        fetch=fake_fetch,
    )
    assert calls[-1] == ("alpaca", tickers, "2024-01-04", "2024-01-09", "1m")
    assert first["rows_fetched"] > 0 and first["files_written"] > 0
    part = BarStore(home).info()["intervals"]["1m"]
    assert (part["start"], part["end"]) == ("2024-01-04", "2024-01-09")

    # Next night: from the last stored session (re-fetched, it may have been partial) to today.
    incremental_update(
        home,
        source="alpaca",
        tickers=[],
        interval="1m",
        initial_days=5,
        today=date(2024, 1, 12),
        fetch=fake_fetch,
    )
    assert calls[-1][1:4] == (tickers, "2024-01-09", "2024-01-12")
    part = BarStore(home).info()["intervals"]["1m"]
    assert part["end"] == "2024-01-12"
    stored_days = sorted({d for d in session if "2024-01-04" <= d <= "2024-01-12"})
    # Re-fetched bars are merged by timestamp, never doubled: one row per ticker and grid minute.
    assert part["rows"] == len(tickers) * 390 * len(stored_days)


def test_online_update_needs_the_bar_store(home):
    from app.nightly.steps import update_data_step

    config = _config(update="yfinance")
    with pytest.raises(ConfigError, match="data.source = 'stored'"):
        update_data_step(config, home)
    # Through the pipeline: recorded as failed, exit status 2 like any config error, no download.
    with pytest.raises(RetrainError, match="step update_data: nightly.update") as info:
        run_retrain(config, home)
    assert info.value.exit_code == 2
    assert read_decisions(home)[-1]["step"] == "update_data"


def test_lock_is_exclusive_even_within_one_process_and_tolerates_garbage(tmp_path):
    path = tmp_path / "retrain.lock"
    path.write_bytes(b"\x00garbage{")  # e.g. a torn write by some other tool: no holder info
    with ProcessLock(path) as first:
        assert first.recovered is None and first.held
        with pytest.raises(LockBusyError, match=f"pid {os.getpid()}") as info:
            ProcessLock(path).acquire()
        assert "\n" not in str(info.value) and info.value.exit_code == 75
    assert not first.held and path.read_text() == ""  # released and cleared
    with ProcessLock(path) as again:
        assert again.recovered is None  # a cleanly released lock is not "stale"


def test_retention_is_applied_after_each_retrain(home):
    """[retention] after_retrain: old nightly runs and old champions' exports go; the champion in
    charge and its predecessor stay, whatever the counts."""
    config = _config().with_updates(retention={"keep_runs": 1, "keep_champions": 2})
    champions = []
    for k in range(5):
        steps = FakePipeline(1.0 + k, 0.5 + k, psr=0.99, run_id=f"nightly-{k:03d}").steps()
        champions.append(run_retrain(config, home, steps=steps).champion)
    assert champions == [f"nightly-{k:03d}" for k in range(5)]
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["nightly-003", "nightly-004"]
    assert sorted(p.name for p in (home / "exports").iterdir()) == [
        "nightly-003-champion",
        "nightly-004-champion",
    ]
    assert sorted(p.name for p in (home / "champions").iterdir()) == ["nightly-003", "nightly-004"]
    off = _config().with_updates(retention={"keep_runs": 1, "after_retrain": False})
    run_retrain(off, home, steps=FakePipeline(challenger_fitness=0.1, run_id="nightly-005").steps())
    assert len(list((home / "runs").iterdir())) == 3  # nothing pruned


def test_no_warm_start_from_a_champion_gated_on_tonights_sessions():
    from app.nightly.steps import DataSnapshot, gated_on_tonight

    tonight = DataSnapshot(splits=None, windows={"test": ("2024-03-05", "2024-04-02")})

    # Last night's gate read up to 2024-04-01: tonight's window shares all but one day with it.
    def gated(eval_end: str | None) -> Champion:
        return Champion(run_id="last-night", policy_dir="champions/last-night", eval_end=eval_end)

    assert gated_on_tonight(gated("2024-04-01"), tonight)
    assert gated_on_tonight(gated(None), tonight)  # unknown: no warm start rather than a leak
    assert not gated_on_tonight(gated("2024-03-04"), tonight)  # gated before tonight's window
