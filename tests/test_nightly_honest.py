"""Nightly, like with like and every look counted: the champion scored with its own normalization,
test-window figures labelled as selection figures, paper trading since promotion as the
out-of-sample record."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from test_nightly import FakePipeline, _config
from test_paper_support import DECISION_INTERVAL, NUM_SESSIONS, NUM_TICKERS, make_run

from app.config import Config, to_env_params
from app.nightly import record as record_module
from app.nightly.normalization import SPEC_FILE, champion_feature_spec, with_feature_spec
from app.nightly.pipeline import run_retrain
from app.nightly.registry import current_champion, read_decisions
from app.nightly.steps import ChallengerRun, DataSnapshot, evaluate_step
from app.paper import journal as journal_module
from app.paper.journal import Journal
from backtests import engine

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def _shifted(spec: dict) -> dict:
    """Other statistics, as a train window a month earlier would give."""
    return {**spec, "mean": [m + 0.5 * s for m, s in zip(spec["mean"], spec["std"], strict=True)],
            "std": [s * 1.7 for s in spec["std"]]}  # fmt: skip


def test_with_own_spec_reproduces_the_market_features(tmp_path):
    run = make_run(tmp_path / "home")
    splits = run.splits
    same = with_feature_spec(splits.full, splits.test, splits.full.feature_spec)
    # Recomputed from the float32 bars: equal to the loader's float64-price features to ~1e-4.
    assert torch.allclose(same.features, splits.test.features, atol=5e-4)
    other = with_feature_spec(splits.full, splits.test, _shifted(splits.full.feature_spec))
    assert (other.features - splits.test.features).abs().max() > 0.3
    assert (
        other.num_steps == splits.test.num_steps
        and other.feature_spec["std"][0] != same.feature_spec["std"][0]
    )


def test_champion_is_scored_with_its_own_normalization(tmp_path):
    home = tmp_path / "home"
    run = make_run(home)
    splits = run.splits
    own = _shifted(splits.full.feature_spec)  # the champion was trained on other statistics
    champ_dir = home / "champions" / "old"
    run.policy.save(champ_dir)
    (champ_dir / SPEC_FILE).write_text(json.dumps(own))
    champion = {"run_id": "old", "policy_dir": str(champ_dir), "bundle": None, "info": {}}
    assert champion_feature_spec(champion) == (own, str(champ_dir / SPEC_FILE))

    config = Config().with_updates(
        data={"num_tickers": NUM_TICKERS, "num_sessions": NUM_SESSIONS},
        env={"decision_interval": DECISION_INTERVAL},
        nightly={"tearsheet": False},
    )
    data = DataSnapshot(splits=splits, windows={k: tuple(v) for k, v in splits.windows().items()})
    challenger = ChallengerRun("run-test", run.run_dir, run.run_dir / "champion", num_trials=3)
    evaluation = evaluate_step(config, home, data, challenger, champion, 3)

    params = to_env_params(config.env)
    mine = with_feature_spec(splits.full, splits.test, own)
    by_own = engine.run_backtest(mine, params, {"p": run.policy}, baselines=())
    by_tonight = engine.run_backtest(splits.test, params, {"p": run.policy}, baselines=())
    final_own, final_tonight = float(by_own.equity[-1, 0]), float(by_tonight.equity[-1, 0])
    assert abs(final_own - final_tonight) > 1e-6  # the normalization matters for this policy
    # The same policy: the challenger (tonight's statistics, its own) and the champion (its own) differ.
    rep = json.loads((run.run_dir / "backtest" / "metrics.json").read_text())
    assert rep["role"] == "selection"
    incumbent = rep["strategies"]["incumbent"]["cum_returns_final"]
    assert incumbent == pytest.approx(final_own / by_own.initial_value - 1.0, rel=1e-6)
    assert rep["strategies"]["champion"]["cum_returns_final"] == pytest.approx(
        final_tonight / by_tonight.initial_value - 1.0, rel=1e-6
    )
    assert evaluation.champion["normalization"].startswith("its own")


def test_test_window_figures_are_labelled_selection(home):
    run_retrain(_config(), home, steps=FakePipeline(trials=3).steps())
    (row,) = read_decisions(home)
    assert row["scores"]["role"] == "selection"
    champ = current_champion(home)
    assert champ["info"]["eval_role"] == "selection"
    record = json.loads((home / "runs" / champ["run_id"] / "run.json").read_text())
    assert record["nightly"]["eval_role"] == "selection" and record["nightly"]["verdict"] == "promoted"


def test_out_of_sample_record_is_paper_trading_since_promotion(home, monkeypatch):
    assert record_module.out_of_sample_record(home).note == "no champion promoted yet"
    before = iter(f"2020-01-0{d}T15:00:00+00:00" for d in range(1, 10))  # before the promotion
    monkeypatch.setattr(journal_module, "_now", lambda: next(before))
    (home / "paper").mkdir()
    with Journal.for_home(home) as journal:  # before the promotion: the previous champion's
        journal.decision(decision_ts="2020-01-01T14:30:00+00:00", bundle_id="old", dry_run=False, equity=100.0, cash=0.0, tickers=[],
                         current_weights=[], target_weights=[], policy_weights=[], skipped=[])  # fmt: skip
        journal.pnl(decision_ts="2020-01-01T14:30:00+00:00", equity=100.0, cash=0.0, last_equity=None)
    fake = FakePipeline(trials=3)
    run_retrain(_config(), home, steps=fake.steps())
    champ = current_champion(home)
    manifest = json.loads((home / "exports" / f"{champ['run_id']}-champion" / "manifest.json").read_text())
    bundle_id = manifest["bundle_id"] = "new-bundle"
    (home / "exports" / f"{champ['run_id']}-champion" / "manifest.json").write_text(json.dumps(manifest))
    assert record_module.out_of_sample_record(home).decisions == 0  # promoted, not traded yet

    clock = iter(f"2099-01-0{d}T15:00:00+00:00" for d in range(1, 10))  # after it
    monkeypatch.setattr(journal_module, "_now", lambda: next(clock))
    with Journal.for_home(home) as journal:
        journal.pnl(
            decision_ts="2099-01-01T14:30:00+00:00", equity=101.0, cash=0.0, last_equity=100.0
        )  # still the old bundle's day
        for equity in (110.0, 121.0):
            journal.decision(decision_ts="2099-01-02T14:30:00+00:00", bundle_id=bundle_id, dry_run=False, equity=equity, cash=0.0,
                             tickers=[], current_weights=[], target_weights=[], policy_weights=[], skipped=[])  # fmt: skip
            journal.pnl(
                decision_ts="2099-01-02T14:30:00+00:00", equity=equity, cash=0.0, last_equity=equity / 1.1
            )
    oos = record_module.out_of_sample_record(home)
    assert oos.role == "out_of_sample" and oos.bundle_id == bundle_id and oos.decisions == 2
    assert list(oos.pnl["equity"]) == [110.0, 121.0]  # from the champion's first decision on
    assert oos.cum_return == pytest.approx(0.1)
    assert oos.to_dict()["pnl_rows"] == 2 and dataclasses.is_dataclass(oos)
