"""The shadow book (``app.nightly.shadow``): challengers judged on sessions after their creation, the
bound and its retirements, promotion against the champion and buy-and-hold, demotion, and the store
surviving a failed write; a night-by-night loop with a planted edge and with none (replays faked)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from app.nightly import shadow
from app.nightly.shadow import ShadowBook, ShadowSettings
from backtests import anytime
from data.errors import ArtifactError

DAYS = [str(np.datetime64("2030-01-01") + np.timedelta64(i, "D")) for i in range(400)]


def _book_with(run_ids, settings=ShadowSettings(), after="2029-12-31"):
    book = ShadowBook()
    for run_id in run_ids:
        book, entered, _ = shadow.enter(book, run_id, after, f"/copies/{run_id}", settings)
        assert entered
    return book


def _record(book, n, returns, bench, champion=None, start=0):
    dates = DAYS[start : start + n]
    return shadow.record_sessions(
        book, dates, {k: list(v[:n]) for k, v in returns.items()}, champion, list(bench[:n])
    )


def test_each_entry_takes_its_share_of_the_level_and_the_count_never_falls():
    settings = ShadowSettings(slots=2, min_sessions=5, per_block=2)
    book = _book_with(["a", "b"], settings)
    assert [c.level for c in book.challengers] == [0.05 / 4, 0.05 / 4]
    # Full, and both still under the minimum sessions: tonight's challenger is not entered (not counted).
    same, entered, retired = shadow.enter(book, "c", "2029-12-31", "/copies/c", settings)
    assert not entered and not retired and same.entries == 2
    # Both lose for 5 sessions: the oldest retires to make room, its share stays spent.
    losing = {"a": [-0.01] * 5, "b": [-0.01] * 5}
    book = _record(book, 5, losing, [0.0] * 5)
    book, entered, retired = shadow.enter(book, "c", DAYS[4], "/copies/c", settings)
    assert entered and [r.run_id for r in retired] == ["a"]
    assert book.entries == 3 and book.retired_count == 1
    assert book.challengers[-1].level == pytest.approx(0.05 / 8)  # entry 3: the second block


def test_a_challenger_only_records_sessions_after_its_creation():
    book = _book_with(["a"], after=DAYS[9])
    book = _record(book, 15, {"a": [0.01] * 15}, [0.0] * 15)
    assert book.challengers[0].dates == DAYS[10:15]
    again = _record(book, 15, {"a": [0.01] * 15}, [0.0] * 15)  # the same sessions again: nothing doubled
    assert again.challengers[0].dates == DAYS[10:15]


def test_a_planted_edge_is_promoted_and_noise_is_not():
    rng = np.random.default_rng(0)
    n = 150
    bench = rng.normal(0.0, 0.01, n)
    good = bench + rng.normal(0.01, 0.01, n)  # daily IR 1 over buy-and-hold
    noise = bench + rng.normal(0.0, 0.01, n)
    book = _record(_book_with(["noise", "good"]), n, {"good": good, "noise": noise}, bench)
    decision = shadow.judge(book)
    assert decision.promote is not None and decision.promote.run_id == "good"
    assert not decision.evidence["noise"].passes
    assert "passed on 150 sessions after its creation" in decision.reason


def test_beating_buy_and_hold_is_not_enough_when_the_champion_is_better():
    rng = np.random.default_rng(1)
    n = 150
    bench = rng.normal(0.0, 0.01, n)
    good = bench + rng.normal(0.01, 0.01, n)
    champion = good + 0.002  # the champion in charge earns more every session
    book = shadow.follow_champion(_book_with(["good"]), "champ", "/champions/champ", "2029-12-31")
    book = _record(book, n, {"good": good}, bench, champion=list(champion))
    decision = shadow.judge(book)
    assert decision.promote is None
    ev = decision.evidence["good"]
    assert ev.log_wealth_benchmark >= anytime.log_threshold(ev.level) > ev.log_wealth_champion


def test_a_challenger_that_trails_the_champion_in_charge_is_never_promoted_over_it():
    # "late" beat the first champion by 1% a day for 150 sessions; then "winner" is promoted and
    # "late" loses 1% a day to it: whatever it earned against the earlier champion, it never passes.
    rng = np.random.default_rng(7)
    n, after = 150, 120
    bench = rng.normal(0.0, 0.01, n + after)
    old_champion = bench + rng.normal(0.0, 0.002, n + after)
    late = old_champion + 0.01 + rng.normal(0.0, 0.005, n + after)
    winner = bench + rng.normal(0.03, 0.005, n + after)
    book = shadow.follow_champion(_book_with(["late", "winner"]), "old", "/champions/old", "2029-12-31")
    book = _record(book, n, {"late": late, "winner": winner}, bench, champion=list(old_champion))
    before = shadow.judge(book)
    assert before.evidence["late"].log_wealth_champion >= anytime.log_threshold(before.evidence["late"].level)
    assert before.promote is not None and before.promote.run_id == "winner"
    book = shadow.promote_in_book(book, before.promote)
    assert book.challengers[0].charge_from == n  # its test against the in-charge restarts
    trailing = winner - 0.01
    for night in range(1, after + 1):
        series = np.concatenate([late[:n], trailing[n : n + night]])
        dates = DAYS[: n + night]
        book = shadow.record_sessions(
            book, dates, {"late": list(series)}, list(winner[: n + night]), list(bench[: n + night])
        )
        decision = shadow.judge(book)
        assert decision.promote is None, night
    assert decision.evidence["late"].log_wealth_champion < 0.5  # no evidence against the in-charge
    assert decision.evidence["late"].log_wealth_benchmark > anytime.log_threshold(0.05)


def test_a_demotion_and_a_change_by_hand_restart_the_tests_against_the_in_charge():
    book = _record(_book_with(["a"]), 30, {"a": [0.01] * 30}, [0.0] * 30)
    by_hand = shadow.follow_champion(book, "manual", "/champions/manual", DAYS[29])
    assert by_hand.challengers[0].charge_from == 30
    demoted = shadow.demote_in_book(by_hand, shadow.Demotion("manual", "edge gone"))
    assert demoted.challengers[0].charge_from == 30 and demoted.champion is None
    assert shadow.evidence(demoted.challengers[0]).log_wealth_champion == 0.0


def test_a_restarted_test_against_the_in_charge_does_not_make_a_challenger_spent():
    # "c" earned against buy-and-hold for 30 sessions; a new champion takes charge: its restarted test
    # has no evidence yet, so it keeps its slot until it has min_sessions under the new in-charge.
    settings = ShadowSettings(min_sessions=20)
    book = _record(_book_with(["c"], settings), 30, {"c": [0.01] * 30}, [0.0] * 30)
    book = shadow.follow_champion(book, "new", "/champions/new", DAYS[29])
    assert shadow.promising(book.challengers[0], settings)
    trailing = {"c": [0.01] * 30 + [-0.01] * 20}
    later = shadow.record_sessions(book, DAYS[:50], trailing, [0.0] * 50, [0.0] * 50)
    assert not shadow.promising(later.challengers[0], settings)  # 20 sessions trailing the new one


def test_a_champion_whose_edge_is_gone_is_demoted():
    rng = np.random.default_rng(2)
    n = 120
    bench = rng.normal(0.0005, 0.01, n)
    gone = bench + rng.normal(-0.004, 0.01, n)  # costs with no edge left
    book = shadow.follow_champion(ShadowBook(), "champ", "/champions/champ", "2029-12-31")
    book = _record(book, n, {}, bench, champion=list(gone))
    decision = shadow.judge(book)
    assert decision.demote is not None and "edge is gone" in decision.demote.reason
    assert shadow.demote_in_book(book, decision.demote).champion is None
    kept = _record(
        shadow.follow_champion(ShadowBook(), "c2", "/c2", "2029-12-31"),
        n,
        {},
        bench,
        champion=list(bench + 0.003),
    )
    assert shadow.judge(kept).demote is None


def test_a_drawdown_past_the_limit_demotes():
    book = shadow.follow_champion(ShadowBook(), "champ", "/champions/champ", "2029-12-31")
    crash = [0.01] * 5 + [-0.1] * 3
    book = _record(book, 8, {}, [0.0] * 8, champion=crash)
    decision = shadow.judge(book, ShadowSettings(max_drawdown=0.25))
    assert decision.demote is not None and "drawdown" in decision.demote.reason
    assert shadow.drawdown([0.1, -0.5]) == pytest.approx(0.5)


def test_a_champion_falling_less_than_a_falling_market_is_kept():
    book = shadow.follow_champion(ShadowBook(), "champ", "/champions/champ", "2029-12-31")
    # Down 33% on its own, but up 45% against buy-and-hold (down 54%): the drawdown that counts is
    # the one relative to buy-and-hold.
    book = _record(book, 10, {}, [-0.06] * 10, champion=[-0.04] * 10)
    assert shadow.drawdown([-0.04] * 10) > 0.25
    assert shadow.judge(book, ShadowSettings(max_drawdown=0.25)).demote is None


def test_a_challenger_tested_too_long_retires():
    settings = ShadowSettings(min_sessions=5, max_sessions=10)
    book = _record(_book_with(["a"], settings), 10, {"a": [0.0] * 10}, [0.0] * 10)
    book = shadow.expire(book, settings)
    assert not book.challengers and book.retired[0].why.startswith("tested 10 sessions")


def test_the_book_round_trips_and_a_newer_schema_is_refused(tmp_path):
    book = _record(_book_with(["a"]), 3, {"a": [0.01, float("nan"), -0.01]}, [0.0] * 3)
    shadow.write_book(tmp_path, book)
    back = shadow.read_book(tmp_path)
    assert back.challengers[0].returns == [0.01, None, -0.01]
    assert back.entries == 1
    raw = json.loads(shadow.book_path(tmp_path).read_text())
    raw["schema_version"] = 99
    shadow.book_path(tmp_path).write_text(json.dumps(raw))
    with pytest.raises(ArtifactError, match="newer"):
        shadow.read_book(tmp_path)
    assert shadow.read_book(tmp_path / "fresh").entries == 0


def test_a_failed_write_leaves_the_previous_book_whole(tmp_path, monkeypatch):
    shadow.write_book(tmp_path, _book_with(["a"]))
    before = shadow.book_path(tmp_path).read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("data.artifact.atomic_write_text", full_disk)
    with pytest.raises(OSError):
        shadow.write_book(tmp_path, _book_with(["a", "b"]))
    assert shadow.book_path(tmp_path).read_bytes() == before


# --- night by night, replays faked ---------------------------------------------------------------


@dataclass(frozen=True)
class _Market:
    """What ``shadow_night`` reads of the loaded market: its session dates."""

    days: int

    @property
    def num_steps(self) -> int:
        return self.days

    def session_dates(self):
        return np.array(DAYS[: self.days], dtype="datetime64[D]")


@dataclass(frozen=True)
class _Run:
    run_id: str
    run_dir: Path
    policy_dir: Path


def _fake_replay(edges: dict[str, float], seed: int = 0):
    """Replays whose daily excess over buy-and-hold is ``edges[run]`` (by the run id in the policy
    copy's folder name) plus noise fixed per (run, date)."""

    def replay(config, full, policy_dir, after):
        run = Path(policy_dir).name
        dates = [d for d in DAYS[: full.days] if d > after]
        if not dates:
            return None
        bench, out = [], []
        for d in dates:
            day = DAYS.index(d)
            bench.append(float(np.random.default_rng([seed, day]).normal(0.0, 0.01)))
            noise = np.random.default_rng([seed, day, int(run.split("-")[-1])]).normal(0.0, 0.01)
            out.append(bench[-1] + edges.get(run, 0.0) + float(noise))
        return shadow.Replay(tuple(dates), tuple(out), tuple(bench))

    return replay


def _nights(tmp_path, edges, nights, settings=ShadowSettings(), first_days=30, stop_at_promotion=False):
    home = tmp_path / "home"
    promoted = []
    champion = None
    for night in range(nights):
        run_id = f"run-{night:03d}"
        policy = tmp_path / "runs" / run_id / "champion"
        policy.mkdir(parents=True)
        (policy / "spec.json").write_text("{}")
        result = shadow.shadow_night(
            None,
            home,
            _Market(first_days + night),
            _Run(run_id, policy.parent, policy),
            champion,
            settings,
            replay=_fake_replay(edges),
        )
        if result.promote:
            promoted.append((night, result.promote))
            champion = {"run_id": result.promote, "policy_dir": result.promote_policy}
            if stop_at_promotion:
                break
        if result.demote:
            champion = None
    return home, promoted


def test_nightly_loop_promotes_a_planted_edge_and_keeps_the_book_bounded(tmp_path):
    edges = {f"run-{n:03d}": 0.01 for n in range(200)}  # every challenger carries daily IR 1
    home, promoted = _nights(tmp_path, edges, 70, stop_at_promotion=True)
    assert promoted, "a planted edge of IR 1 a day is promoted within 70 nights"
    book = shadow.read_book(home)
    assert len(book.challengers) <= ShadowSettings().slots
    copies = sorted(p.name for p in (home / "shadow" / "policies").iterdir())
    assert set(copies) <= {c.run_id for c in book.challengers} | {
        book.champion.run_id if book.champion else ""
    }


def test_nightly_loop_does_not_promote_noise(tmp_path):
    home, promoted = _nights(tmp_path, {}, 60)
    assert promoted == []
    book = shadow.read_book(home)
    assert (
        book.entries >= ShadowSettings().slots and book.entries == len(book.challengers) + book.retired_count
    )


def test_replay_runs_the_policy_through_the_engine_on_the_sessions_after_its_creation(tmp_path):
    from agents.networks import NetworkConfig
    from agents.policy import Policy, PolicyMeta
    from app.config import Config
    from data.loader import load_market

    cfg = Config().with_updates(data={"num_tickers": 3, "num_sessions": 6}, env={"decision_interval": 30})
    full = load_market(cfg.data, home=tmp_path).full
    policy_dir = tmp_path / "policy"
    Policy(
        NetworkConfig(full.num_assets, full.num_features),
        PolicyMeta(tickers=full.tickers, feature_names=full.feature_names),
    ).save(policy_dir)
    dates = [str(d) for d in np.unique(full.session_dates())]
    replay = shadow.replay_returns(cfg, full, policy_dir, dates[2])
    assert replay is not None and list(replay.dates) == dates[3:]
    assert len(replay.returns) == len(replay.benchmark) == 3
    assert all(np.isfinite(replay.returns)) and replay.benchmark[0] != 0.0
    assert shadow.replay_returns(cfg, full, policy_dir, dates[-1]) is None


def _retrain_steps(home):
    from app.nightly.steps import ChallengerRun, DataSnapshot, Evaluation, RetrainSteps

    days = iter(range(30, 200))

    def update_data(config, home):
        n = next(days)
        windows = {"train": (DAYS[0], DAYS[n - 20]), "valid": (DAYS[n - 19], DAYS[n - 10])}
        windows |= {"test": (DAYS[n - 9], DAYS[n - 1]), "full": (DAYS[0], DAYS[n - 1])}
        return DataSnapshot(splits=type("Splits", (), {"full": _Market(n)})(), windows=windows, source="fake")

    def tournament(config, home, data, champion):
        run_id = f"nightly-{len(list((home / 'runs').glob('*'))) if (home / 'runs').exists() else 0:03d}"
        policy = home / "runs" / run_id / "champion"
        policy.mkdir(parents=True)
        (policy / "policy.safetensors").write_bytes(run_id.encode())
        (policy / "spec.json").write_text("{}")
        return ChallengerRun(run_id, home / "runs" / run_id, policy, num_trials=4)

    def evaluate(config, home, data, challenger, champion):
        return Evaluation("sharpe", data.windows["test"], {"fitness": 1.0}, None, None)

    def export(config, home, challenger):
        return home / "exports" / challenger.run_id

    return RetrainSteps(update_data, tournament, evaluate, export)


def test_the_gate_level_changes_nightly_s_book_and_walk_forward_s_alike(tmp_path, monkeypatch):
    """``[gate] level`` is read once (``app.gate.shadow_settings``): the nightly retrain's book and a
    walk-forward's (``book_settings``, its block the planned folds) run at the same level and knobs,
    and tonight's challenger enters at its share of it; the fixed window's rule reads it too."""
    import dataclasses

    from app.config import Config
    from app.gate import GateRule
    from app.nightly import pipeline
    from app.walkforward.book import book_settings

    monkeypatch.setattr(shadow, "replay_returns", _fake_replay({f"nightly-{n:03d}": 0.01 for n in range(99)}))
    used = []

    def spy(config, home, full, challenger, champion, settings):
        used.append(settings)
        return shadow.book_decision(config, home, full, challenger, champion, settings)

    monkeypatch.setattr(pipeline, "book_decision", spy)
    for level in (0.05, 0.01):
        home = tmp_path / f"home-{level}"
        config = Config().with_updates(
            gate={"level": level, "slots": 3}, nightly={"export": False}, retention={"after_retrain": False}
        )
        pipeline.run_retrain(config, home, steps=_retrain_steps(home))
        nightly, walkforward = used[-1], book_settings(config, 6)
        assert (nightly.level, nightly.demotion_level, nightly.slots) == (level, level, 3)
        assert walkforward == dataclasses.replace(nightly, per_block=6)
        assert GateRule.of_config(config).significance_level == level
        entered = shadow.read_book(home).challengers[0]
        assert entered.level == pytest.approx(anytime.challenger_level(level, 1))
    assert used[0].level != used[1].level


def test_the_retrain_promotes_through_the_book_and_protects_its_runs_from_pruning(tmp_path, monkeypatch):
    from app.config import Config
    from app.nightly.pipeline import run_retrain
    from app.nightly.registry import current_champion, read_decisions
    from app.nightly.retention import protected

    home = tmp_path / "home"
    monkeypatch.setattr(shadow, "replay_returns", _fake_replay({f"nightly-{n:03d}": 0.01 for n in range(99)}))
    steps = _retrain_steps(home)
    config = Config().with_updates(
        gate={"rule": "book"}, nightly={"export": False}, retention={"after_retrain": False}
    )
    for night in range(70):
        outcome = run_retrain(config, home, steps=steps)
        tonight = f"nightly-{night:03d}"
        assert shadow.read_book(home).challengers[0].run_id in protected(home)["runs"]
        if outcome.verdict == "promoted":
            break
    assert outcome.verdict == "promoted" and outcome.reason.startswith("shadow book: challenger")
    champion = current_champion(home)
    # An earlier night's challenger, judged on the sessions after its creation, not tonight's.
    assert champion.run_id == outcome.challenger_run_id != tonight
    assert (Path(champion.policy_dir) / "policy.safetensors").read_bytes() == champion.run_id.encode()
    # Tonight's challenger's test-window figures are not the promoted run's: none are claimed for it.
    assert champion.fitness_value is None and champion.info.challenger_edge is None
    assert read_decisions(home)[-1]["challenger_run_id"] == champion.run_id
    assert read_decisions(home)[-1]["inputs"]["tonights_challenger"] == tonight  # and tonight's run
    assert read_decisions(home)[-1]["scores"]["rule"] == "book"  # the rule that decided
    assert shadow.read_book(home).champion.run_id == champion.run_id


def test_a_retrain_that_fails_at_its_commit_leaves_the_book_as_it_was(tmp_path, monkeypatch):
    """The book follows the registry: every night first fails inside the registry's transaction (the
    book and the champion must be those of the night before), then runs; the promotion still comes,
    and the book's champion is the registry's."""
    from app.config import Config
    from app.nightly.pipeline import run_retrain
    from app.nightly.registry import current_champion

    home = tmp_path / "home"
    monkeypatch.setattr(
        shadow, "replay_returns", _fake_replay({f"nightly-{n:03d}": 0.01 for n in range(200)})
    )
    steps = _retrain_steps(home)
    config = Config().with_updates(
        gate={"rule": "book"}, nightly={"export": False}, retention={"after_retrain": False}
    )

    def crash():
        raise RuntimeError("killed before COMMIT")

    for _ in range(70):
        book, champion = shadow.read_book(home), current_champion(home)
        with pytest.raises(Exception, match="killed before COMMIT"):
            run_retrain(config, home, steps=steps, faults={"record": crash})
        assert shadow.read_book(home) == book
        assert current_champion(home) == champion
        outcome = run_retrain(config, home, steps=steps)
        if outcome.verdict == "promoted":
            break
    assert outcome.verdict == "promoted"
    assert (
        shadow.read_book(home).champion.run_id == current_champion(home).run_id == outcome.challenger_run_id
    )


def test_a_book_that_cannot_be_written_after_the_commit_leaves_the_decision_standing(tmp_path, monkeypatch):
    """The registry has committed the night: a failure writing the book is logged, the retrain is not
    reported failed, and the book stays as it was."""
    from app.config import Config
    from app.nightly import pipeline
    from app.nightly.registry import read_decisions

    home = tmp_path / "home"
    monkeypatch.setattr(shadow, "replay_returns", _fake_replay({}))
    config = Config().with_updates(
        gate={"rule": "book"}, nightly={"export": False}, retention={"after_retrain": False}
    )

    def full_disk(home, night):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pipeline, "commit_night", full_disk)
    outcome = pipeline.run_retrain(config, home, steps=_retrain_steps(home))
    assert outcome.verdict != "failed"
    assert [d["verdict"] for d in read_decisions(home)] == [outcome.verdict]
    assert not shadow.book_path(home).exists() and not shadow.read_book(home).challengers
