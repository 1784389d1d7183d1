"""benchmarks/sharpe_bar_power.py: the median-Sharpe bar and the paired test, simulated from a power
table's rows. With nothing between two columns the bar holds about half the time and the test about
5%; a gain far above the paired spread makes both hold on every draw."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import sharpe_bar_power as sbp


def _rows(tmp_path):
    rng = np.random.default_rng(1)
    rows = []
    for i in range(16):
        level = rng.normal(1.0, 0.8)  # the market's own luck, shared by both columns
        rows.append(
            {
                "shape": "minute_momentum",
                "level": 0.05,
                "seed": i,
                "champion": {"sharpe": level + rng.normal(0, 0.2)},
                "start": {"sharpe": level + rng.normal(0, 0.2)},
            }
        )
    rows.append({"shape": "nonlinear", "level": 0.05, "seed": 99, "champion": {"sharpe": 9.0}, "start": None})
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_with_nothing_between_the_columns_the_bar_is_a_coin_flip(tmp_path, monkeypatch):
    monkeypatch.setattr(sbp, "DRAWS", 2000)
    (cell,) = sbp.main([str(_rows(tmp_path)), "--json"])  # the nonlinear row is not a linear cell
    assert cell["markets"] == 16
    at_zero = cell["rates"][0]
    assert at_zero["gain"] == 0.0 and 0.35 < at_zero["bar"] < 0.65
    assert at_zero["wilcoxon"] < 0.09
    largest = cell["rates"][-1]
    assert largest["gain"] == 0.3 and largest["bar"] > 0.9 and largest["wilcoxon"] > 0.9


def test_the_bar_reads_the_medians_of_each_draw():
    first = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]])
    second = np.array([[1.0, 2.0, 4.0], [0.0, 1.0, 1.0]])
    assert sbp.bar_holds(first, second, at_least=True).tolist() == [True, False]
    assert sbp.bar_holds(first, second, at_least=False).tolist() == [False, False]


def test_two_runs_in_one_cell_or_a_seed_twice_is_a_one_line_exit():
    row = {"shape": "daily_cross_section", "level": 0.05, "seed": 1, "champion": {"sharpe": 1.0}}
    row["start"] = {"sharpe": 0.5}
    assert sbp.linear_cells([row, {**row, "seed": 2}], ("champion", "start")) == {
        ("daily_cross_section", 0.05): [(1.0, 0.5), (1.0, 0.5)]
    }
    for rows in ([row, {**row, "seed": 2, "settings_key": "other"}], [row, row]):
        with pytest.raises(SystemExit, match="sharpe_bar_power: daily_cross_section 0.05"):
            sbp.linear_cells(rows, ("champion", "start"))
