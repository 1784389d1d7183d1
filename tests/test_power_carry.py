"""Carrying a power table's rows to an arm of the refit's judge (benchmarks/power_carry.py): the
markets whose champion is its start carry over under the arm's key, the others run fresh, and a
fresh row must come from the same tournament with every column but the champion unchanged."""

import json

import pytest

from benchmarks import power_carry


def _row(index: int, start_t, sharpe: float = 1.0, key: str = "old") -> dict:
    column = {"outcome": "significant", "alpha_p_value": 0.01, "alpha_per_day": 1e-3, "sharpe": sharpe}
    column |= {"turnover": 0.5, "costs": 0.01}
    return {
        "settings_key": key, "shape": "nonlinear", "level": 0.1, "index": index, "seed": 100 + index,
        "commit": "abc", "columns": ["champion", "start"], "champion": dict(column), "start": dict(column),
        "champion_start_t": start_t, "env_steps": 250_000, "pods_tried": 6, "champion_kind": "open",
    }  # fmt: skip


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rows_whose_champion_is_its_start_carry_and_fresh_rows_are_checked(tmp_path):
    source, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(source, [_row(0, None), _row(1, 1.5), _row(2, None), _row(0, None, key="other")])
    assert (
        power_carry.main(
            ["carry", "--source", str(source), "--out", str(out), "--from-key", "old", "--to-key", "new"]
        )
        == 0
    )
    carried = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in carried] == [0, 2]
    assert all(
        r["settings_key"] == "new" and r["carried_from"] == {"settings_key": "old", "commit": "abc"}
        for r in carried
    )
    with pytest.raises(SystemExit, match="already holds rows"):
        power_carry.carry(source, out, "old", "new")
    # market 1 neither carried nor run yet: the arm is incomplete
    (line,) = power_carry.check(source, out, "old", "new")
    assert line.startswith("('nonlinear', 0.1, 1)") and "no row of the arm" in line
    # the fresh row of market 1: the same tournament, a different champion, every other column the same
    fresh = _row(1, 1.5, key="new")
    fresh["champion"]["sharpe"] = 0.2
    with out.open("a") as f:
        f.write(json.dumps(fresh) + "\n")
    assert power_carry.check(source, out, "old", "new") == []
    # a fresh row from another tournament, or with a baseline that moved, is named
    moved = _row(1, 0.7, key="new")
    moved["start"]["sharpe"] = 2.0
    with out.open("a") as f:
        f.write(json.dumps(moved) + "\n")
    (line,) = power_carry.check(source, out, "old", "new")
    assert "champion_start_t" in line and "start.sharpe" in line
    assert (
        power_carry.main(
            ["check", "--source", str(source), "--out", str(out), "--from-key", "old", "--to-key", "new"]
        )
        == 1
    )
