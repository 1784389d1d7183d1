"""metrics.json has one definition, ``backtests.metrics_model``: the blocks the report's writers build
carry exactly the model's keys, and docs/backtests.md's key tables are the ones generated from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from backtests import oos_test as sig
from backtests import snooping as sn
from backtests.metrics_model import ExcessFigures, OosTest, SelectionDiagnostics, key_tables

DOC = Path(__file__).resolve().parents[1] / "docs" / "backtests.md"
START, END = "<!-- metrics-keys:start -->", "<!-- metrics-keys:end -->"


def _documented_tables() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index(START) + len(START) : text.index(END)].strip()


def test_the_docs_tables_are_generated_from_the_model():
    expected = key_tables()
    assert _documented_tables() == expected, (
        "docs/backtests.md's metrics.json tables differ from backtests.metrics_model: replace the lines "
        f"between {START} and {END} with the output of `python -m backtests.metrics_model`:\n\n{expected}"
    )


def test_the_writers_write_the_model_keys():
    rng = np.random.default_rng(0)
    bench = rng.normal(0.0005, 0.01, 40)
    oos = sig.out_of_sample_test(
        bench + 0.001,
        {"buy_and_hold": bench, "equal_weight": bench * 0.9},
        strategy="champion",
        benchmark="buy_and_hold",
        min_replications=99,
        max_replications=99,
    )
    oos["held_out"] = True  # added by backtests.report for the window ...
    oos["prefers_no_asset"] = False  # ... and for the strategy (backtests.engine.prefers_no_asset)
    trials = np.column_stack([bench + rng.normal(0.001, 0.004, 40), bench * 0.5])
    selection = sn.selection_diagnostics(
        sn.SelectionInputs(returns=trials, ids=("a", "b"), champion=0, benchmark=bench), seed=0
    )
    # The report adds ``look`` (the look it recorded); ``looks_first`` is added when a reader restates
    # the verdict for the looks counted now (backtests.verdict.restate), ``looks_unknown`` when the
    # reader's ledger no longer holds the look (backtests.verdict.looks_unknown).
    written_by_the_test = set(OosTest.model_fields) - {"look", "looks_first", "looks_unknown"}
    assert set(oos) == written_by_the_test, set(oos) ^ written_by_the_test
    assert set(oos["excess"]) == {"buy_and_hold", "equal_weight"}
    assert set(oos["excess"]["buy_and_hold"]) == set(ExcessFigures.model_fields)
    assert set(selection) == set(SelectionDiagnostics.model_fields), set(selection) ^ set(
        SelectionDiagnostics.model_fields
    )
    # What they write reads back as the model, key for key (no key falls into the extras).
    assert not OosTest.model_validate(oos).model_extra
    assert not SelectionDiagnostics.model_validate(selection).model_extra
