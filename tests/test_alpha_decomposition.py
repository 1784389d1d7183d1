"""A power table's alpha split into costs and the gross edge, against hand arithmetic
(benchmarks/alpha_decomposition.py)."""

from __future__ import annotations

import json
import math

import pytest
from scipy.stats import norm

from benchmarks import alpha_decomposition


def _column(alpha: float, costs: float, p: float, turnover: float = 0.5) -> dict:
    return {"alpha_per_day": alpha, "costs": costs, "alpha_p_value": p, "turnover": turnover}


def _row(index: int, champion: dict, oracle: dict | None = None) -> dict:
    row = {"shape": "daily_cross_section", "level": 0.05, "index": index, "test_sessions": 100}
    row["columns"] = ["champion", "oracle"] if oracle else ["champion", "ppo"]
    row["champion"] = champion
    row["ppo"] = None  # (a column named but not run: left out)
    if oracle:
        row["oracle"] = oracle
    return row


def test_one_column_against_hand_arithmetic() -> None:
    row = _row(0, _column(0.0006, 0.02, 0.025, turnover=0.7))
    out = alpha_decomposition.decompose(row, "champion")
    assert out["alpha"] == pytest.approx(6.0)
    assert out["costs"] == pytest.approx(2.0)  # 2% of the account over 100 sessions: 2 bp a day
    assert out["gross"] == pytest.approx(8.0)
    assert out["turnover"] == pytest.approx(0.7)
    assert out["se"] == pytest.approx(6.0 / norm.ppf(0.975))


def test_standard_error_left_out_where_the_p_value_says_nothing() -> None:
    assert alpha_decomposition.decompose(_row(0, _column(0.0001, 0.01, 0.5)), "champion")["se"] is None


def test_medians_per_cell_skip_columns_not_run(tmp_path, capsys) -> None:
    rows = [
        _row(0, _column(0.0002, 0.01, 0.2), _column(0.001, 0.02, 0.01)),
        _row(1, _column(0.0004, 0.03, 0.1), _column(0.0012, 0.02, 0.01)),
        _row(2, _column(0.0009, 0.02, 0.01)),
    ]
    out = alpha_decomposition.table(rows)
    assert set(out) == {("daily_cross_section", 0.05, "champion"), ("daily_cross_section", 0.05, "oracle")}
    assert out[("daily_cross_section", 0.05, "champion")]["alpha"] == pytest.approx(4.0)
    assert out[("daily_cross_section", 0.05, "oracle")]["gross"] == pytest.approx(13.0)
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    printed = alpha_decomposition.main([str(path), "--json"])
    assert json.loads(capsys.readouterr().out)[0]["column"] == "champion"
    assert math.isclose(printed[("daily_cross_section", 0.05, "champion")]["costs"], 2.0)


def test_unreadable_rows_are_one_line(tmp_path) -> None:
    bad = tmp_path / "rows.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(SystemExit, match="cannot read"):
        alpha_decomposition.main([str(bad)])


def test_shares_of_a_column_per_market_and_pooled() -> None:
    rows = [
        _row(0, _column(0.0002, 0.01, 0.2), _column(0.001, 0.02, 0.01)),  # gross 3 of 12 bp
        _row(1, _column(0.0008, 0.02, 0.1), _column(0.0008, 0.02, 0.01)),  # gross 10 of 10 bp
        _row(2, _column(0.0009, 0.02, 0.01)),  # no oracle: not in the shares
    ]
    out = alpha_decomposition.shares(rows, "oracle")[("daily_cross_section", 0.05, "champion")]
    assert out["share_median"] == pytest.approx((3 / 12 + 10 / 10) / 2)
    assert out["share_pooled"] == pytest.approx(13 / 22)
