"""The looks a run remembers (``backtests.looks_memory``): the count it was judged under survives a
deleted ledger or another home as a lower bound, never a fresh count of 1; the ledger's count stands
when it holds every remembered look; a malformed memory is a one-line error before anything is
recorded."""

from __future__ import annotations

import json
import math

import pytest

from backtests import looks
from backtests.looks import Look, record_look
from backtests.looks_memory import (
    RememberedLooks,
    combine,
    from_report,
    read_memory,
    record_and_remember,
    spread_of,
)
from backtests.metrics_model import MetricsDocument
from backtests.verdict import looks_hurdle
from data.errors import ArtifactError

MARKET = "synthetic seed=0 signal=0.5"
WINDOW = ("2024-03-01", "2024-03-29")


def _look(run: str, sharpe: float | None, policy: str = "p", window: tuple[str, str] = WINDOW) -> Look:
    return Look(run, "champion", MARKET, *window, 20, sharpe, policy=policy, tickers=("A", "B"))


@pytest.fixture()
def paths(tmp_path):
    """A home's ledger and run r1's memory (its run folder is elsewhere: it travels)."""
    return looks.ledger_path(tmp_path / "home"), tmp_path / "r1" / "looks.json"


def _home(paths):
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    paths[1].parent.mkdir(parents=True, exist_ok=True)
    return paths


def test_the_ledgers_count_stands_while_it_holds_every_remembered_look(paths):
    ledger, memory = _home(paths)
    record_look(ledger, _look("r0", 0.3))
    first = record_and_remember(ledger, _look("r1", 0.1), memory)
    assert (first.looks, first.all_sharpes, first.lost) == (2, (0.3, 0.1), False)
    record_look(ledger, _look("r2", -0.2))
    again = record_and_remember(ledger, _look("r1", 0.1), memory)
    # The same ledger: exactly what it counts, 3 now, 2 when first judged.
    assert (again.now.count, again.looks, again.lost) == (3, 2, False)
    (window,) = RememberedLooks.read(memory).windows
    assert (window.looks, window.sharpes, window.lost) == (3, [0.3, 0.1, -0.2], False)
    assert [(j.run_id, j.first) for j in window.judged] == [("r1", 2)]


def test_a_deleted_ledger_counts_at_least_the_remembered_looks(paths):
    ledger, memory = _home(paths)
    for run, sharpe in (("r0", 0.3), ("r2", -0.2)):
        record_look(ledger, _look(run, sharpe))
    judged = record_and_remember(ledger, _look("r1", 0.1), memory)
    assert (judged.now.count, judged.lost) == (3, False)
    ledger.unlink()
    again = record_and_remember(ledger, _look("r1", 0.1), memory)
    # The fresh ledger counts 1: the remembered 3 are used, a lower bound (the old ledger is gone),
    # with the Sharpe ratios the hurdle reads and the count it was first judged with.
    assert again.lost is True and again.now.lost is True
    assert (again.now.count, again.all_sharpes, again.looks) == (3, (0.3, -0.2, 0.1), 3)
    assert len(looks.read_looks(ledger)) == 1  # the ledger itself starts over
    # A lower bound stays one, however often the run is judged again in the new ledger.
    third = record_and_remember(ledger, _look("r1", 0.1), memory)
    assert (third.now.count, third.lost) == (3, True)
    assert RememberedLooks.read(memory).windows[0].lost is True


def test_after_a_reset_the_larger_count_is_used_and_a_new_look_adds_one(paths):
    ledger, memory = _home(paths)
    record_look(ledger, _look("r0", 0.3))
    record_and_remember(ledger, _look("r1", 0.1), memory)  # 2 looks
    ledger.unlink()
    # Another policy of the run (retrained, or its costs edited) is a look the old ledger never saw.
    new_policy = record_and_remember(ledger, _look("r1", 0.5, policy="q"), memory)
    assert (new_policy.now.count, new_policy.all_sharpes, new_policy.looks) == (3, (0.3, 0.1, 0.5), 3)
    # The new ledger overtakes the memory: its count is used, still a lower bound.
    for run in ("r3", "r4", "r5"):
        record_look(ledger, _look(run, 0.0))
    again = record_and_remember(ledger, _look("r1", 0.1), memory)
    assert (again.now.count, again.lost) == (5, True)  # q, r3, r4, r5 and this one in the new ledger
    assert RememberedLooks.read(memory).windows[0].looks == 5


def test_another_home_reads_at_least_the_remembered_count(paths, tmp_path):
    ledger, memory = _home(paths)
    record_look(ledger, _look("r0", 0.3))
    record_and_remember(ledger, _look("r1", 0.1), memory)
    other = looks.ledger_path(tmp_path / "other")
    other.parent.mkdir()
    there = record_and_remember(other, _look("r1", 0.1), memory)
    assert (there.now.count, there.lost) == (2, True)
    # Back home the memory names the other home's ledger: the count is no longer known to be complete.
    back = record_and_remember(ledger, _look("r1", 0.1), memory)
    assert (back.now.count, back.lost) == (2, True)


def test_only_the_same_window_is_remembered(paths):
    ledger, memory = _home(paths)
    record_look(ledger, _look("r0", 0.3))
    record_and_remember(ledger, _look("r1", 0.1), memory)
    ledger.unlink()
    # The bars changed and the test window moved: its looks were never counted, the memory says nothing.
    moved = record_and_remember(ledger, _look("r1", 0.1, window=("2024-04-01", "2024-04-30")), memory)
    assert (moved.now.count, moved.lost) == (1, False)
    assert len(RememberedLooks.read(memory).windows) == 2


def test_a_run_copied_under_another_name_is_another_look(paths):
    ledger, memory = _home(paths)
    record_look(ledger, _look("r0", 0.3))
    record_and_remember(ledger, _look("r1", 0.1), memory)
    ledger.unlink()
    copied = record_and_remember(ledger, _look("r1-copy", 0.1), memory)
    assert (copied.now.count, copied.lost) == (3, True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is corrupt: not valid JSON"),
        ('{"windows": [{"market": "m"}]}', "windows.0.start: field required"),
        (
            json.dumps(
                {"windows": [{"market": "m", "start": "a", "end": "b", "looks": 2, "sharpes": [0.1]}]}
            ),
            "one sharpe ratio per look: 1 for 2 looks",
        ),
        ('{"schema_version": 9}', "schema version 9 is newer"),
    ],
)
def test_a_malformed_memory_is_a_one_line_error_and_nothing_is_recorded(paths, text, message):
    ledger, memory = _home(paths)
    memory.write_text(text)
    with pytest.raises(ArtifactError) as err:
        record_and_remember(ledger, _look("r1", 0.1), memory)
    assert message in str(err.value) and str(memory) in str(err.value) and "\n" not in str(err.value)
    assert looks.read_looks(ledger) == []


def test_a_report_from_before_the_memory_stands_for_it(paths):
    ledger, memory = _home(paths)
    for run, sharpe in (("r0", 0.3), ("r2", -0.2)):
        record_look(ledger, _look(run, sharpe))
    look = _look("r1", 0.1)
    count = record_look(ledger, look)
    hurdle = looks_hurdle(list(count.all_sharpes), 20)
    doc = MetricsDocument.parse(
        {
            "strategies": {"champion": {}},
            "oos_test": {
                "strategy": "champion",
                "sharpe_per_day": 0.1,
                "looks": hurdle.looks,
                "looks_first": count.looks,
                "looks_sharpe_variance": hurdle.variance,
                "look": {**looks.look_fields(look).model_dump(), "ledger": count.ledger},
            },
        }
    )
    report = memory.parent / "metrics.json"
    doc.write(report)
    (window,) = read_memory(memory, report).windows
    # The report keeps the count and the variance of the looks' Sharpe ratios: the seeded ratios
    # give the same hurdle.
    assert window.looks == 3 and window.ledger == count.ledger
    assert math.isclose(looks_hurdle(window.sharpes, 20).hurdle, hurdle.hurdle, rel_tol=1e-12)
    ledger.unlink()
    again = record_and_remember(ledger, look, memory, report=report)
    assert (again.now.count, again.lost) == (3, True)
    # A report that names no ledger (written before ledgers had an identity) says nothing.
    key = doc.oos_test.look.model_copy(update={"ledger": ""})
    assert (
        from_report(
            doc.model_copy(update={"oos_test": doc.oos_test.model_copy(update={"look": key})})
        ).windows
        == []
    )


def test_the_seeded_spread_has_the_variance():
    for looks_, variance in ((2, 0.04), (5, 0.01), (40, 0.3)):
        values = spread_of(looks_, variance)
        mean = sum(values) / looks_
        assert len(values) == looks_
        assert math.isclose(sum((v - mean) ** 2 for v in values) / (looks_ - 1), variance, rel_tol=1e-12)
    assert spread_of(3, None) == [None, None, None] and spread_of(1, 0.2) == [None]


def test_no_memory_is_the_ledgers_count(paths):
    ledger, _ = _home(paths)
    count = record_look(ledger, _look("r1", 0.1))
    assert combine(None, _look("r1", 0.1), count) is count


def test_a_report_whose_count_is_a_bound_is_read_with_the_larger_count(tmp_path):
    # The dashboard restates a stored report with the home's ledger (``looks.restated``): a report
    # whose count is a lower bound keeps it unless the ledger now counts more, and stays a bound.
    home = tmp_path / "home"
    home.mkdir()
    ledger = looks.ledger_path(home)
    look = _look("r1", 0.1)
    count = record_look(ledger, look)
    doc = MetricsDocument.parse(
        {
            "strategies": {"champion": {}},
            "oos_test": {
                "strategy": "champion",
                "num_sessions": 20,
                "sharpe_per_day": 0.1,
                "skewness": 0.0,
                "kurtosis": 3.0,
                "looks": 3,
                "looks_first": 3,
                "looks_unknown": True,
                "look": {**looks.look_fields(look).model_dump(), "ledger": count.ledger},
            },
        }
    )
    assert looks.restated(doc, home) is doc  # the ledger counts 1: the report's 3 stand
    for run in ("r2", "r3", "r4"):
        record_look(ledger, _look(run, 0.0))
    more = looks.restated(doc, home)
    assert (more.oos_test.looks, more.oos_test.looks_unknown) == (4, True)
    assert "looks unknown (at least 4" in more.verdict
