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

from app.champion import Champion
from app.config import Config, to_env_params
from app.nightly import record as record_module
from app.nightly.normalization import SPEC_FILE, champion_feature_spec, with_feature_spec, write_spec_file
from app.nightly.pipeline import run_retrain
from app.nightly.registry import current_champion, read_decisions
from app.nightly.steps import ChallengerRun, DataSnapshot, score_step
from app.paper.journal import Journal
from backtests import capacity, engine

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
    champion = Champion(run_id="old", policy_dir=str(champ_dir))
    assert champion_feature_spec(champion) == (own, str(champ_dir / SPEC_FILE))  # written before the base
    write_spec_file(champ_dir, own)  # on the document base: versioned, the spec itself unchanged
    assert json.loads((champ_dir / SPEC_FILE).read_text())["schema_version"] == 1
    assert champion_feature_spec(champion) == (own, str(champ_dir / SPEC_FILE))

    config = Config().with_updates(
        data={"num_tickers": NUM_TICKERS, "num_sessions": NUM_SESSIONS},
        env={"decision_interval": DECISION_INTERVAL},
        nightly={"tearsheet": False},
    )
    data = DataSnapshot(splits=splits, windows={k: tuple(v) for k, v in splits.windows().items()})
    challenger = ChallengerRun("run-test", run.run_dir, run.run_dir / "champion", num_trials=3)
    evaluation = score_step(config, home, data, challenger, champion)

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
    # The challenger's capacity curve: every size, and the size of the env's own account is the report.
    rows = rep["capacity"]
    assert [r["capital"] for r in rows] == list(capacity.CAPITAL_LEVELS)
    assert {r["strategy"] for r in rows} == {"champion"}
    (own_size,) = [r for r in rows if r["capital"] == params.initial_cash]
    assert own_size["cum_returns_final"] == pytest.approx(
        rep["strategies"]["champion"]["cum_returns_final"], rel=1e-6, abs=1e-9
    )
    assert rep["estimated_capacity_rule"] in ("significant", "half_sharpe", "no_edge")


def test_test_window_figures_are_labelled_selection(home):
    run_retrain(_config(), home, steps=FakePipeline(trials=3).steps())
    (row,) = read_decisions(home)
    assert row["scores"]["role"] == "selection"
    champ = current_champion(home)
    assert champ.info.eval_role == "selection"
    record = json.loads((home / "runs" / champ.run_id / "run.json").read_text())
    assert record["nightly"]["eval_role"] == "selection" and record["nightly"]["verdict"] == "promoted"


def _paper_session(journal, session, bundle_id, *, equity, holdings, price, side, fill_price, run_id=None):
    """One session of a paper loop: its owner, a decision with its marks, one order, its fill, a snapshot."""
    ts = f"{session}T15:00:00+00:00"
    journal.start_session(session, bundle_id=bundle_id, bundle_path=None, run_id=run_id,
                          source="champion" if run_id else "bundle")  # fmt: skip
    journal.decision(decision_ts=ts, bundle_id=bundle_id, dry_run=False, equity=equity, cash=0.0, tickers=["AAA"],
                     current_weights=[0.0], target_weights=[0.5], policy_weights=[0.5], skipped=[], session=session,
                     account_equity=equity, holdings=holdings, prices=[price])  # fmt: skip
    cid = f"pr-{session}"
    journal.order(client_order_id=cid, decision_ts=ts, bundle_id=bundle_id, ticker="AAA", side=side, qty=5.0,
                  est_price=price, status="filled")  # fmt: skip
    journal.fill(client_order_id=cid, ticker="AAA", side=side, filled_qty=5.0, filled_avg_price=fill_price,
                 status="filled")  # fmt: skip


def test_champion_timeline_is_paper_trading_while_in_charge(home):
    empty = record_module.champion_timeline(home)
    assert empty.entries == [] and empty.note
    run_retrain(_config(), home, steps=FakePipeline(trials=3).steps())
    champ = current_champion(home)
    manifest_path = home / "exports" / f"{champ.run_id}-champion" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["bundle_id"] = "new-bundle"
    manifest_path.write_text(json.dumps(manifest))
    (entry,) = record_module.champion_timeline(home).entries
    assert entry.current and entry.run_id == champ.run_id and entry.record is None  # not traded yet

    with Journal.for_home(home) as journal:
        # a session of a bundle traded by hand (paper --bundle): 5 AAA bought at 10
        _paper_session(
            journal, "2099-01-01", "old", equity=100.0, holdings={}, price=10.0, side="buy", fill_price=10.0
        )
        journal.pnl(
            decision_ts=None, equity=100.0, cash=50.0, last_equity=100.0, holdings={"AAA": (5.0, 10.0)}
        )
        # the champion's first session: AAA opened at 12 (the overnight gain is the old bundle's), sold at 11.9
        _paper_session(journal, "2099-01-02", "new-bundle", equity=110.0, holdings={"AAA": (5.0, 12.0)}, price=12.0,
                       side="sell", fill_price=11.9, run_id=champ.run_id)  # fmt: skip
        journal.pnl(decision_ts=None, equity=109.5, cash=109.5, last_equity=110.0, holdings={})
    timeline = record_module.champion_timeline(home)
    old, new = sorted(timeline.entries, key=lambda e: e.run_id is None)[::-1]
    assert (old.run_id, old.promoted_at, old.record.pnl) == (None, None, pytest.approx(10.0))
    assert new.current and new.record.bundle_id == "new-bundle" and new.role == "out_of_sample"
    assert new.record.pnl == pytest.approx(-0.5) and new.record.costs == pytest.approx(0.5)
    assert new.record.cum_return == pytest.approx(-0.5 / 110.0) and new.record.sessions == 1
    assert timeline.records_pnl == pytest.approx(9.5) == timeline.account_pnl
    assert timeline.to_dict()["entries"][0]["record"] is not None and dataclasses.is_dataclass(new)
