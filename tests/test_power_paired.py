"""Two power tables paired market by market (benchmarks/power_paired.py), against hand counts."""

from __future__ import annotations

import json

import pytest

from benchmarks import power_paired
from benchmarks.power_rerun import same_value


def _row(seed: int, champion: bool, sharpe: float, oracle_sharpe: float = 2.0, level: float = 0.05) -> dict:
    verdict = "significant" if champion else "not significant"
    return {
        "shape": "daily_cross_section",
        "level": level,
        "seed": seed,
        "champion": {"outcome": verdict, "sharpe": sharpe},
        "oracle": {"outcome": "significant", "sharpe": oracle_sharpe},
    }


def test_paired_counts_mcnemar_and_sharpe_differences(tmp_path) -> None:
    a = [_row(1, True, 2.0), _row(2, True, 1.5), _row(3, False, 0.5), _row(4, True, 1.0), _row(9, True, 9.0)]
    b = [_row(1, True, 1.0), _row(2, False, 1.0), _row(3, False, 1.0), _row(4, False, 0.0, oracle_sharpe=2.5)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in a))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in b))
    out = power_paired.main(
        [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--same", "oracle", "--json"]
    )
    (r,) = out
    assert (r["markets"], r["a"], r["b"], r["both"], r["a_only"], r["b_only"]) == (4, 3, 1, 1, 2, 0)
    assert r["mcnemar_p"] == pytest.approx(0.5)  # two discordant markets, both one way: 2 * 0.5^2
    assert r["median_sharpe_a"] == pytest.approx(1.25) and r["median_sharpe_b"] == pytest.approx(1.0)
    assert r["median_sharpe_diff"] == pytest.approx(0.75)  # differences 1.0, 0.5, -0.5, 1.0
    assert r["same_columns_differ"] == 1  # market 4's oracle


def test_no_discordant_market_reads_p_one_and_bad_files_are_one_line(tmp_path) -> None:
    assert power_paired.mcnemar(0, 0) == 1.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops")
    with pytest.raises(SystemExit, match="cannot read"):
        power_paired.main([str(bad), str(bad)])


def test_fine_tuned_champions_and_those_above_their_start_are_counted() -> None:
    rows = [
        {"champion_start_t": None, "champion": {"sharpe": 1.0}, "start": {"sharpe": 0.5}},
        {
            "champion_start_t": 2.5,
            "champion_refit": False,
            "champion": {"sharpe": 0.2},
            "start": {"sharpe": 0.4},
        },
        {
            "champion_start_t": 0.3,
            "champion_refit": True,
            "champion": {"sharpe": 0.4},
            "start": {"sharpe": 0.4},
        },
        {"champion": {"sharpe": 3.0}},  # (a row before the start column: not above it)
    ]
    assert power_paired.fine_tuning(rows) == {"fine_tuned": 2, "kept": 1, "over_start": 1}


def test_same_columns_equal_to_float_rounding_do_not_count_as_differing() -> None:
    base = {"outcome": "significant", "sharpe": 1.0, "beta": 0.9, "alpha_per_day": 1e-4, "p": float("nan")}
    rounded = {**base, "beta": 0.9 * (1 + 1e-14), "alpha_per_day": 1e-4 + 1e-19}
    assert same_value(base, rounded)
    assert not same_value(base, {**base, "beta": 0.9 * (1 + 1e-6)})
    assert not same_value(base, {**base, "outcome": "not significant"})
    assert not same_value(base, {k: v for k, v in base.items() if k != "beta"})
    assert same_value(None, None) and not same_value(base, None)
