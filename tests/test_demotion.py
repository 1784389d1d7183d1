"""A champion losing its place through the nightly pipeline: the shadow book's demotion (here its
demotion test's e-value reaching 20 on the sessions since promotion: the edge is gone) recorded in the registry (the pointer removed, a demotion row saying why), then
``podracer status`` and the dashboard's champion card stating the reason and the date.

The tournament and the replays are scripted (``tests/test_shadow.py``'s fakes): the champion in
charge loses 1% a day against buy-and-hold on every session after its promotion."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from test_shadow import DAYS, _fake_replay, _Market

from app.champion import Champion
from app.commands.status import status_lines
from app.config import Config
from app.dashboard.in_charge import in_charge
from app.nightly import shadow
from app.nightly.pipeline import run_retrain
from app.nightly.registry import (
    DecisionRecord,
    current_champion,
    last_demotion,
    read_decisions,
    record_decision,
)
from app.nightly.steps import ChallengerRun, DataSnapshot, Evaluation, RetrainSteps
from app.workflows.status import gather_status

CHAMPION = "nightly-900"


def _steps(first_day: int) -> RetrainSteps:
    days = iter(range(first_day, len(DAYS)))

    def update_data(config, home):
        n = next(days)
        windows = {"train": (DAYS[0], DAYS[n - 20]), "valid": (DAYS[n - 19], DAYS[n - 10])}
        windows |= {"test": (DAYS[n - 9], DAYS[n - 1]), "full": (DAYS[0], DAYS[n - 1])}
        return DataSnapshot(splits=type("Splits", (), {"full": _Market(n)})(), windows=windows, source="fake")

    def tournament(config, home, data, champion):
        run_id = f"nightly-{len(list((home / 'runs').glob('*'))) if (home / 'runs').exists() else 0:03d}"
        policy = home / "runs" / run_id / "champion"
        policy.mkdir(parents=True)
        (policy / "spec.json").write_text("{}")
        return ChallengerRun(run_id, home / "runs" / run_id, policy, num_trials=4)

    def evaluate(config, home, data, challenger, champion):
        return Evaluation("sharpe", data.windows["test"], {"fitness": 1.0}, None, None)

    return RetrainSteps(update_data, tournament, evaluate, lambda config, home, challenger: None)


def _home_with_a_champion(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    policy = home / "champions" / CHAMPION
    policy.mkdir(parents=True)
    now = datetime.now(UTC).isoformat()
    record_decision(
        home,
        DecisionRecord(started_at=now, decided_at=now, verdict="promoted", reason="seeded", step="decide"),
        Champion(run_id=CHAMPION, policy_dir=str(policy), promoted_at=now),
    )
    return home


def test_a_losing_champion_is_demoted_and_status_and_the_dashboard_say_why(tmp_path, monkeypatch):
    home = _home_with_a_champion(tmp_path)
    # The champion loses 1% a day to buy-and-hold; tonight's challengers carry no edge.
    monkeypatch.setattr(shadow, "replay_returns", _fake_replay({CHAMPION: -0.01}))
    config = Config().with_updates(nightly={"export": False}, retention={"after_retrain": False})
    assert config.gate.rule == "book"  # the default rule
    steps = _steps(first_day=30)
    nights = 0
    while nights < 30:  # deterministic (the fakes' noise is seeded)
        nights += 1
        outcome = run_retrain(config, home, steps=steps)
        if outcome.demoted:
            break
    assert outcome.demoted == CHAMPION and outcome.verdict == "rejected", outcome
    assert outcome.previous_champion == CHAMPION and outcome.champion is None
    assert current_champion(home) is None
    gone = last_demotion(home)
    assert gone.run_id == CHAMPION and "edge is gone" in gone.reason and "e-value reached" in gone.reason
    last_session = DAYS[30 + nights - 2]
    assert gone.session == last_session and gone.decision_id == read_decisions(home)[-1]["id"]
    assert read_decisions(home)[-1]["reason"].startswith(f"shadow book: champion {CHAMPION}'s edge is gone")
    assert shadow.read_book(home).champion is None

    status = gather_status(home)
    assert status.champion is None and status.demotion["run_id"] == CHAMPION
    (line,) = [x for x in status_lines(status) if x.startswith("champion ")]
    assert f"none: {CHAMPION} demoted" in line and f"its record to {last_session}" in line
    assert "e-value reached" in line and "edge is gone" in line
    card = in_charge(status)
    assert card.value == "none (demoted)" and card.since == gone.demoted_at[:16].replace("T", " ")
    assert gone.reason in card.explanation and "[gate] before_champion" in card.explanation

    # The next night: no champion, nothing demoted again; the book tests challengers against buy-and-hold.
    after = run_retrain(config, home, steps=steps)
    assert after.demoted is None and after.previous_champion is None
    assert last_demotion(home).decision_id == gone.decision_id


def test_status_and_the_card_with_a_champion_or_none_ever():
    class State:
        champion = None
        demotion = None

    assert in_charge(State()).value == "none yet" and in_charge(State()).explanation is None
    State.champion = type(
        "C", (), {"run_id": "r1", "bundle_id": "abcdef0123456789", "promoted_at": "2030-01-02T03:04:05"}
    )()
    card = in_charge(State())
    assert (card.value, card.note, card.since) == ("r1", "bundle abcdef012345", "2030-01-02 03:04")
