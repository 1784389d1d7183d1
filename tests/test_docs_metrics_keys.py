"""docs/backtests.md lists the verdict's metrics.json keys: the list and the documents agree, key for key."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from backtests import oos_test as sig
from backtests import snooping as sn

DOC = Path(__file__).resolve().parents[1] / "docs" / "backtests.md"
SPAN = re.compile(r"`([^`]+)`")
NAME = re.compile(r"[a-z_]+")


def _keys(text: str) -> set[str]:
    """The key names in ``text``'s code spans: a span that is a name, or the names of a nested
    ``{...}`` span (``excess: {buy_and_hold | equal_weight: {mean_per_day, ...}}``)."""
    keys: set[str] = set()
    for span in SPAN.findall(text):
        if NAME.fullmatch(span):
            keys.add(span)
        elif "{" in span:
            keys.update(NAME.findall(span))
    return keys


def _documented() -> tuple[set[str], set[str]]:
    """The keys docs/backtests.md names for ``oos_test`` and for ``selection``."""
    text = DOC.read_text(encoding="utf-8")
    para = text[text.index("**metrics.json keys of the verdict.**") :]
    para = para[: para.index("\n\n")]
    oos = para[para.index("`oos_test` (null") : para.index("`selection`:")]
    selection = para[para.index("`selection`:") + len("`selection`:") :]
    return _keys(oos) - {"oos_test"}, _keys(selection)


def test_the_documented_keys_are_the_keys_written():
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
    oos["held_out"] = True  # added by backtests.report for the window
    trials = np.column_stack([bench + rng.normal(0.001, 0.004, 40), bench * 0.5])
    selection = sn.selection_diagnostics(
        sn.SelectionInputs(returns=trials, ids=("a", "b"), champion=0, benchmark=bench), seed=0
    )
    oos_doc, selection_doc = _documented()
    written = set(oos) | set(oos["excess"]) | set(oos["excess"]["buy_and_hold"])
    assert oos_doc == written, f"doc only: {oos_doc - written}; written only: {written - oos_doc}"
    assert selection_doc == set(selection), (
        f"doc only: {selection_doc - set(selection)}; written only: {set(selection) - selection_doc}"
    )
