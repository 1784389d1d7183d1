"""``benchmarks/verdict_calibration.py`` at a tiny count: one home's looks are counted by its ledger
(first judged 1, 2; read at the end 2, 2), and the null check can fail (its bound is the one-sided
Clopper-Pearson upper bound of the rate, at most 7.5%)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from scipy.stats import beta

ROOT = Path(__file__).resolve().parents[1]


def _calibration():
    spec = importlib.util.spec_from_file_location(
        "verdict_calibration", ROOT / "benchmarks" / "verdict_calibration.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_null_check_is_a_one_sided_upper_bound_that_can_fail():
    cal = _calibration()
    assert cal.upper_bound(0, 400) == pytest.approx(1 - 0.05 ** (1 / 400))
    assert cal.upper_bound(12, 400) == pytest.approx(beta.ppf(0.95, 13, 388))
    assert cal.upper_bound(20, 400) <= cal.MAX_RATE  # 5% observed over 400 looks: passes
    assert cal.upper_bound(22, 400) > cal.MAX_RATE  # 5.5% observed: the bound is over 7.5%, it fails
    assert cal.upper_bound(3, 3) == 1.0 and cal.upper_bound(0, 0) is None
    rows = [{"outcome": o} for o in ("significant", "not significant", "not measurable", "not significant")]
    assert cal.rate(rows) == {
        "looks": 4,
        "significant": 1,
        "not_measurable": 1,
        "rate": 0.25,
        "upper_95": pytest.approx(beta.ppf(0.95, 2, 3)),
    }


def test_one_home_counts_its_looks(monkeypatch):
    cal = _calibration()
    args = cal.parse_args(["--quick"])
    rows = cal.run_home(args, 1000, 0.0, 2)
    assert [r["look"] for r in rows] == [0, 1]
    assert [r["looks"] for r in rows] == [1, 2]  # the second tournament's look counts the first
    assert [r["looks_now"] for r in rows] == [2, 2]  # read at the end: both count both
    assert all(r["outcome"] in ("significant", "not significant", "not measurable") for r in rows)


def test_a_rows_file_resumes_finished_homes_and_refuses_other_settings(tmp_path, monkeypatch, capsys):
    cal = _calibration()
    args = cal.parse_args(
        ["--looks", "2", "--homes", "2", "--power-homes", "0", "--rows", str(tmp_path / "rows.jsonl")]
    )
    key = cal._settings_key(args)
    finished = [
        {
            "seed": 1000 + h,
            "signal": 0.0,
            "look": k,
            "outcome": "not significant",
            "outcome_now": "not significant",
        }
        for h in (0, 1)
        for k in (0, 1)
    ]
    cal._append_rows(args.rows, [{**row, "settings_key": key} for row in finished])
    calls = []
    monkeypatch.setattr(cal, "run_home", lambda *a: calls.append(a) or [])
    with pytest.raises(SystemExit):  # 4 looks cannot bound the null rate under 7.5%: the check fails
        cal.main(["--looks", "2", "--homes", "2", "--power-homes", "0", "--rows", str(args.rows), "--json"])
    assert calls == []  # both homes read back, none rerun
    assert json.loads(capsys.readouterr().out)["rates"]["signal_0"]["looks"] == 4
    other = cal.parse_args(["--homes", "2", "--rows", str(args.rows)])
    with pytest.raises(SystemExit, match="rows of other settings"):
        cal.load_rows(other.rows, cal._settings_key(other))


def test_the_settings_key_names_the_learner(monkeypatch):
    cal = _calibration()
    args = cal.parse_args(["--quick"])
    key = cal._settings_key(args)
    assert ",algo=direct,agent=" in key
    default_config = cal._config
    monkeypatch.setattr(
        cal,
        "_config",
        lambda *a, **k: default_config(*a, **k).with_updates(agent={"start_single_share": 0.5}),
    )
    assert cal._settings_key(args) != key  # another learner's rows are not resumed as these
    monkeypatch.setattr(cal, "_config", default_config)
    assert cal._settings_key(cal.parse_args(["--quick", "--first-seed", "7"])) == key  # not the seed
