"""The power table's timing script (benchmarks/power_table_time.py): the command it runs is the table's."""

from __future__ import annotations

from pathlib import Path

from benchmarks import gpu_figures, power_table, power_table_time


def test_the_timed_command_is_the_default_learners_table_with_the_ppo_column(tmp_path: Path) -> None:
    args = power_table_time.parse_args(["--ppo-backend", "population"])
    cmd = power_table_time.command(args, tmp_path / "rows.jsonl")
    assert cmd[1].endswith("power_table.py")
    table = power_table.parse_args(cmd[2:])  # (the table's own parser accepts every flag)
    assert (table.features, table.tickers, table.sessions, table.budget, table.pods) == (
        "library",
        100,
        243,
        250_000,
        2,
    )
    assert table.with_ppo and table.ppo_budget == 1_000_000 and table.ppo_backend == "population"
    assert (
        table.jobs == 2 and table.markets == 4 and table.nulls == 0 and table.out == tmp_path / "rows.jsonl"
    )
    assert round(table.sessions * table.train_frac) == 72 and round(table.sessions * table.valid_frac) == 45
    # its markets are its own: not the GPU part's (docs/benchmarks.md lists the seeds each run used)
    assert table.first_seed == 2_410_000 and args.first_seed != gpu_figures.parse_args([]).power_first_seed


def test_its_read_out_counts_the_ppo_stage_and_the_tables_hours(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"data_s": 20, "tournament_s": 40, "ppo_s": 70, "fit_s": 3, "backtest_s": 13, "wall_s": 146}\n'
        '{"data_s": 22, "tournament_s": 50, "ppo_s": 60, "fit_s": 3, "backtest_s": 15, "wall_s": 150}\n'
    )
    figures = gpu_figures.power_figures(rows, wall_s=150.0)
    assert figures["median_s"]["ppo_s"] == 65 and figures["median_s"]["wall_s"] == 148
    assert figures["markets_per_hour"] == 48.0 and figures["table_hours"] == round(292 / 48.0, 2)
