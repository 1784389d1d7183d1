"""The fine-tuning study (benchmarks/finetune_gain.py): its cells and its read-out against hand counts."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import finetune_gain


def _row(shape: str, gain_intraday: float, gain_open: float, moved: bool = True) -> dict:
    return {
        "shape": shape,
        "ic": 0.05,
        "seed": 1,
        "steps": 100,
        "moved": {"intraday": moved, "open": False},
        "intraday_start": {"sharpe": 1.0},
        "intraday_tuned": {"sharpe": 1.0 + gain_intraday},
        "open_start": {"sharpe": 2.0},
        "open_tuned": {"sharpe": 2.0 + gain_open},
    }


def test_the_read_out_counts_each_kinds_change_over_its_start() -> None:
    rows = [
        _row("minute_momentum", 0.3, 0.0),
        _row("minute_momentum", -0.1, 0.0),
        _row("minute_momentum", 0.4, 0.0),
    ]
    intraday, open_ = finetune_gain.summary(rows)
    assert (intraday["kind"], open_["kind"]) == ("intraday", "open")
    assert intraday["moved"] == 3 and open_["moved"] == 0
    assert intraday["tuned_higher"] == 2 and intraday["tuned_lower"] == 1
    assert intraday["mean_gain"] == pytest.approx(0.2) and intraday["median_gain"] == pytest.approx(0.3)
    sd = math.sqrt(((0.1) ** 2 + (0.3) ** 2 + (0.2) ** 2) / 2)
    assert intraday["t"] == pytest.approx(0.2 / (sd / math.sqrt(3)))
    assert open_["tuned_higher"] == open_["tuned_lower"] == 0 and math.isnan(open_["t"])


def test_its_cells_are_the_power_tables_markets() -> None:
    args = finetune_gain.parse_args([])
    assert args.cells == [("nonlinear", 0.10), ("minute_momentum", 0.05), ("daily_cross_section", 0.05)]
    table = finetune_gain.table_args("nonlinear", 0.10, args.first_seed)
    assert (table.features, table.tickers, table.sessions) == ("library", 100, 243)
    assert finetune_gain.power_table.market_seed(table, 0.10, 0) == 2_900_000
    with pytest.raises(SystemExit):
        finetune_gain.parse_args(["--cells", "nonlinear"])
    assert args.tune_on == "train" and finetune_gain.parse_args(["--tune-on", "valid"]).tune_on == "valid"
    with pytest.raises(SystemExit):
        finetune_gain.parse_args(["--tune-on", "test"])  # (the test window judges; it never tunes)


def test_set_reads_direct_args_settings_as_json() -> None:
    args = finetune_gain.parse_args(
        ["--set", "average_weights=true", "learning_rate=0.001", "objective=sharpe"]
    )
    assert args.overrides == {"average_weights": True, "learning_rate": 0.001, "objective": "sharpe"}
    assert finetune_gain.parse_args([]).overrides == {}
    twice = finetune_gain.parse_args(["--set", "average_weights=true", "--set", "finetune=skip"])
    assert twice.overrides == {"average_weights": True, "finetune": "skip"}
    for bad in (
        ["--set", "no_such_field=1"],
        ["--set", "average_weights"],
        ["--set", "average_weights=True"],  # (JSON's true: not a truthy string)
        ["--set", "learning_rate=fast"],
        ["--set", "horizon=true"],
        ["--set", "total_steps=10"],  # fixed by the study
    ):
        with pytest.raises(SystemExit):
            finetune_gain.parse_args(bad)


def test_the_pooled_count_and_its_sign_test(tmp_path) -> None:
    rows = [_row("minute_momentum", g, 0.0) for g in (0.3, -0.1, 0.4, 0.2)] + [
        _row("daily_cross_section", 0.5, 0.0, moved=False)  # not moved: left out
    ]
    out = finetune_gain.pooled(rows)
    assert (out["moved"], out["higher"], out["lower"]) == (4, 3, 1)
    assert out["sign_p"] == pytest.approx(5 / 16)  # P(X >= 3 | n 4, 1/2)
    assert finetune_gain.sign_test(0, 0) == 1.0 and finetune_gain.sign_test(5, 0) == pytest.approx(1 / 32)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    read = finetune_gain.main(["--rows", str(path), "--json"])
    assert read["pooled"] == out and read["settings"]["markets"] == 5
    assert read["settings"]["tune_on"] == ["train"]  # (rows without the key ran on the train window)
    nan = _row("minute_momentum", float("nan"), 0.0)
    assert finetune_gain.pooled([nan])["undefined"] == 1
    path.write_text("{not json\n")
    with pytest.raises(SystemExit, match="--rows"):
        finetune_gain.main(["--rows", str(path)])
