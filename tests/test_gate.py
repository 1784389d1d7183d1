"""The gate (``app.gate``): one typed answer for nightly and walk-forward, and the older homes that
still read into it (a registry row and a fold.json written before the gate was one model)."""

from __future__ import annotations

import json

import pydantic
import pytest

from app.champion import Champion
from app.config import Config
from app.gate import Evaluation, GateResult, GateRule, decide, judge_challenger
from app.nightly.decision import DecisionRecord, DecisionRuns, DecisionWindows
from app.nightly.registry import decision_gate, read_decisions, record_decision
from app.runs import RunDir
from app.walkforward.record import read_fold_records
from backtests.metrics_model import OosTest
from backtests.verdict import EdgeVerdict

WINDOW = ("2024-03-01", "2024-03-28")


def _scores(challenger: float | None, incumbent: float | None, outcome: str = "significant") -> Evaluation:
    return Evaluation(
        fitness="sharpe",
        window=WINDOW,
        challenger={"fitness": challenger, "sharpe_ratio": challenger, "normalization": "its own"},
        champion=None if incumbent is None else {"fitness": incumbent, "sharpe_ratio": incumbent},
        edge=EdgeVerdict(outcome, (f"edge {outcome} out of sample",)),
        test=OosTest(looks=3, psr_after_looks=0.97),
    )


def test_the_rule_comes_from_the_sections():
    config = Config().with_updates(gate={"margin": 0.2, "level": 0.01, "rule": "window"})
    rule = GateRule.of_config(config)
    assert (rule.rule, rule.fitness, rule.margin, rule.significance_level) == (
        "window",
        config.tournament.fitness,
        0.2,
        0.01,
    )
    # No level of its own: the backtest's.
    assert GateRule.of_config(Config()).significance_level == Config().backtest.significance_level


@pytest.mark.parametrize(
    ("challenger", "incumbent", "outcome"),
    [
        (1.3, 1.0, "significant"),
        (1.05, 1.0, "significant"),
        (1.3, 1.0, "not significant"),
        (None, 1.0, "significant"),
    ],
)
def test_the_answer_is_the_rule_on_the_scores(challenger, incumbent, outcome):
    rule = GateRule(margin=0.1)
    champion = Champion(run_id="old", policy_dir="champions/old", selection_end="2024-02-20")
    gate = judge_challenger(rule, _scores(challenger, incumbent, outcome), champion)
    expected = decide(
        challenger,
        incumbent,
        EdgeVerdict(outcome, (f"edge {outcome} out of sample",)),
        has_champion=True,
        margin=0.1,
    )
    assert (gate.promote, gate.reason) == (expected.promote, expected.reason)
    assert (gate.challenger_fitness, gate.incumbent_fitness, gate.margin) == (challenger, incumbent, 0.1)
    assert (gate.looks, gate.num_trials, gate.psr_after_looks, gate.window) == (3, 3, 0.97, WINDOW)
    assert gate.challenger.sharpe_ratio == challenger and gate.incumbent.sharpe_ratio == incumbent
    with pytest.raises(pydantic.ValidationError):
        gate.promote = not gate.promote  # frozen


def test_an_incumbent_selected_on_the_window_is_noted_and_always_promotes():
    champion = Champion(run_id="old", policy_dir="p", selection_end=WINDOW[1])
    gate = judge_challenger(GateRule(), _scores(0.5, 1.0), champion)
    assert not gate.promote and gate.reason.endswith(
        f"(note: the champion was selected on data up to {WINDOW[1]})"
    )
    assert gate.rule == "window"  # the fixed window's rule decided
    always = judge_challenger(GateRule(rule="always"), _scores(0.5, 1.0), champion)
    assert always.promote and always.reason == "[gate] rule = always: the challenger takes over"
    assert always.rule == "always"


def test_a_fold_record_written_with_a_figures_block_reads_at_the_top_level(tmp_path):
    run = RunDir(tmp_path, "wf")
    legacy = {
        "index": 1,
        "windows": {"train": ["a", "b"], "valid": ["c", "d"], "test": ["e", "f"]},
        "gate": {
            "promote": False,
            "reason": "challenger sharpe 0.9 does not beat champion 1.0 by the margin 0.1",
            "fitness": "sharpe",
            "challenger": {"sharpe_ratio": 0.9, "fitness": 0.9, "normalization": "its own"},
            "incumbent": {"sharpe_ratio": 1.0, "fitness": 1.0},
            "window": ["c", "d"],
            "figures": {
                "challenger_fitness": 0.9,
                "incumbent_fitness": 1.0,
                "margin": 0.1,
                "significance_level": 0.05,
                "edge": "edge not significant out of sample",
                "edge_outcome": "not significant",
                "looks": 2,
            },
        },
    }
    run.fold(1).path.mkdir(parents=True)
    run.fold_record(1).write_text(json.dumps(legacy))
    (record,) = read_fold_records(run)
    gate = record.gate
    assert isinstance(gate, GateResult) and gate.window == ("c", "d")
    assert (gate.challenger_fitness, gate.incumbent_fitness, gate.margin, gate.looks) == (0.9, 1.0, 0.1, 2)
    assert gate.edge_outcome == "not significant" and gate.incumbent.sharpe_ratio == 1.0


def test_registry_rows_read_back_as_the_gate_old_and_new(tmp_path):
    now = "2024-03-29T07:00:00+00:00"
    old = DecisionRecord(  # the scores as a registry row held them before the gate was one model
        started_at=now,
        decided_at=now,
        verdict="rejected",
        reason="challenger's edge not significant out of sample",
        step="decide",
        fitness="sharpe",
        challenger_fitness=1.3,
        champion_fitness=1.0,
        margin=0.1,
        challenger_dsr=0.4,
        significance_level=0.05,
        eval_start=WINDOW[0],
        eval_end=WINDOW[1],
        scores={
            "role": "selection",
            "challenger": {"sharpe_ratio": 1.3, "fitness": 1.3},
            "champion": {"sharpe_ratio": 1.0},
            "challenger_test": {"looks": 2, "psr_after_looks": 0.4},
            "challenger_edge": "edge not significant out of sample",
        },
    )
    gate = judge_challenger(GateRule(), _scores(1.3, 1.0), Champion(run_id="old", policy_dir="p"))
    new = DecisionRecord.decided(
        gate,
        started_at=now,
        decided_at=now,
        runs=DecisionRuns(challenger="new", champion="old"),
        windows=DecisionWindows(data=WINDOW, selection=WINDOW, evaluation=WINDOW),
        bundle=None,
        inputs={},
        role="selection",
    )
    record_decision(tmp_path, old)
    record_decision(tmp_path, new)
    first, second = (decision_gate(row) for row in read_decisions(tmp_path))
    assert (first.promote, first.edge, first.oos_test.looks, first.incumbent.sharpe_ratio) == (
        False,
        "edge not significant out of sample",
        2,
        1.0,
    )
    assert (first.challenger_fitness, first.psr_after_looks, first.window) == (1.3, 0.4, WINDOW)
    assert second == gate
