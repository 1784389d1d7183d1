"""A walk-forward's shadow book (``app.walkforward.book``), fold by fold on a real calendar with replays
stood in for by known return streams: a strong challenger is promoted on sessions after its entry and
before the test window it then trades; a null one never is; a champion whose edge is gone is demoted;
a fold rerun from the book on disk (a resume) decides the same."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from app.config import parse_config
from app.nightly.shadow import Replay
from app.nightly.steps import ChallengerRun
from app.runs import RunDir
from app.walkforward.book import book_before, book_file, book_settings, fold_book
from app.walkforward.plan import plan_folds
from app.walkforward.record import BookStep

#: The `market` fixture (conftest.py): 130 sessions of 390 one-minute bars (the book reads its calendar).
TOY_MARKET = {"num_steps": 130 * 390, "num_assets": 2, "num_features": 1, "seed": 4}
LAYOUT = {"train_sessions": 10, "valid_sessions": 10, "gate_sessions": 10, "step_sessions": 20}


def _noise(date: str, who: str) -> float:
    digest = hashlib.sha256(f"{date}/{who}".encode()).digest()
    return float(np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal())


class KnownReplays:
    """Replays by the policy folder's name: buy-and-hold a noisy 0.05%/day, each policy buy-and-hold
    plus its ``edges`` (a daily excess; a callable of the date where it changes) plus its own noise.
    Records the last session of every market it was handed."""

    def __init__(self, edges):
        self.edges = edges
        self.last_seen: list[str] = []

    def __call__(self, config, market, policy_dir, after):
        dates = [str(d) for d in np.unique(market.session_dates())]
        self.last_seen.append(dates[-1])
        days = [d for d in dates if d > after]
        if not days:
            return None
        name = str(policy_dir).rsplit("/", 1)[-1]
        edge = self.edges[name]
        bench = [0.0005 + 0.01 * _noise(d, "bench") for d in days]
        mine = [
            b + (edge(d) if callable(edge) else edge) + 0.005 * _noise(d, name)
            for d, b in zip(days, bench, strict=True)
        ]
        return Replay(tuple(days), tuple(mine), tuple(bench))


def _walk(tmp_path, market, edges, *, folds=None):
    config = parse_config({"walkforward": LAYOUT})
    plans = plan_folds(market, config.walkforward)[:folds]
    run = RunDir.at(tmp_path / "wf")
    settings = book_settings(config, len(plans))
    replay = KnownReplays(edges)
    steps: list[BookStep] = []
    for plan in plans:
        name = f"fold-{plan.fold.index:03d}"
        policy = tmp_path / "policies" / name
        policy.mkdir(parents=True, exist_ok=True)
        (policy / "weights").write_text(name)
        challenger = ChallengerRun(name, run.fold(plan.fold.index).path, policy, 1)
        _book, step = fold_book(config, run, plan, challenger, market, settings, replay=replay)
        steps.append(step)
        # Every market a fold replays on ends with its gate window: nothing of its test window.
        assert max(replay.last_seen) == plan.dates["gate"][1] < plan.dates["test"][0]
    return config, plans, run, settings, replay, steps


@pytest.mark.usefixtures("one_thread")
def test_a_strong_challenger_is_promoted_on_sessions_after_its_entry_and_before_the_test(tmp_path, market):
    edges = {"fold-000": 0.02, **{f"fold-{k:03d}": 0.0 for k in range(1, 9)}}
    _config, plans, run, settings, _replay, steps = _walk(tmp_path, market, edges)
    assert len(plans) >= 4 and settings.per_block == len(plans)
    assert (
        steps[0].entered == "fold-000" and steps[0].evidence["fold-000"].sessions == LAYOUT["gate_sessions"]
    )
    promoted = [k for k, s in enumerate(steps) if s.promoted]
    assert promoted and steps[promoted[0]].promoted == "fold-000", [s.reason for s in steps]
    first = promoted[0]
    # Promoted on its evidence at its share of the level, from sessions before that fold's test window.
    ev = steps[first].evidence["fold-000"]
    assert ev.passes and min(ev.e_value_in_charge, ev.e_value_benchmark) >= 1 / ev.level
    assert ev.level == pytest.approx(0.05 / (2 * len(plans)))
    assert steps[first].recorded_through == plans[first].dates["gate"][1] < plans[first].dates["test"][0]
    assert all(s.champion is None for s in steps[:first])
    assert all(s.champion == "fold-000" for s in steps[first:])
    # The later null challengers are never promoted over it.
    assert all(s.promoted is None for s in steps[first + 1 :])
    book = book_before(run, len(plans))
    assert book.champion.run_id == "fold-000" and book.champion.dates[0] > plans[first].dates["gate"][1]
    for ch in book.challengers:
        assert all(d > ch.entered_after for d in ch.dates)


@pytest.mark.usefixtures("one_thread")
def test_null_challengers_are_never_promoted(tmp_path, market):
    edges = {f"fold-{k:03d}": 0.0 for k in range(9)}
    *_, steps = _walk(tmp_path, market, edges)
    assert all(s.promoted is None and s.champion is None for s in steps)
    assert steps[-1].evidence and all(not e.passes for s in steps for e in s.evidence.values())


@pytest.mark.usefixtures("one_thread")
def test_a_champion_whose_edge_is_gone_is_demoted(tmp_path, market):
    dates = [str(d) for d in np.unique(market.session_dates())]
    switch = dates[70]
    edges = {
        "fold-000": lambda d: 0.03 if d < switch else -0.03,
        **{f"fold-{k:03d}": -0.01 for k in range(1, 9)},
    }
    *_, steps = _walk(tmp_path, market, edges)
    promoted = [k for k, s in enumerate(steps) if s.promoted]
    demoted = [k for k, s in enumerate(steps) if s.demoted]
    assert promoted and demoted and demoted[0] > promoted[0], [s.reason for s in steps]
    assert steps[demoted[0]].demoted == "fold-000" and steps[demoted[0]].champion is None
    assert "edge is gone" in steps[demoted[0]].reason or "drawdown" in steps[demoted[0]].reason


@pytest.mark.usefixtures("one_thread")
def test_a_fold_rerun_from_the_book_on_disk_decides_the_same(tmp_path, market):
    edges = {"fold-000": 0.02, **{f"fold-{k:03d}": 0.0 for k in range(1, 9)}}
    config, plans, run, settings, replay, steps = _walk(tmp_path, market, edges, folds=3)
    written = book_file(run, 2).read_text()
    last = plans[2]
    policy = tmp_path / "policies" / "fold-002"
    challenger = ChallengerRun("fold-002", run.fold(2).path, policy, 1)
    _book, again = fold_book(config, run, last, challenger, market, settings, replay=replay)
    assert again == steps[2] and book_file(run, 2).read_text() == written
