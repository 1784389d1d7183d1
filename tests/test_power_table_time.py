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
    ours = {power_table.market_seed(table, 0.10, i) for i in range(table.markets)}
    assert ours == set(range(2_510_000, 2_510_004))
    gpu = gpu_figures.parse_args([])
    gpu_table = power_table.parse_args(["--ic", "0.10", "--first-seed", str(gpu.power_first_seed)])
    assert not ours & {power_table.market_seed(gpu_table, 0.10, i) for i in range(gpu.power_markets)}


def test_its_read_out_counts_the_ppo_stage_and_the_tables_hours(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"data_s": 20, "tournament_s": 40, "ppo_s": 70, "fit_s": 3, "backtest_s": 13, "wall_s": 146}\n'
        '{"data_s": 22, "tournament_s": 50, "ppo_s": 60, "fit_s": 3, "backtest_s": 15, "wall_s": 150}\n'
    )
    figures = gpu_figures.power_figures(rows, wall_s=150.0)
    assert figures["median_s"]["ppo_s"] == 65 and figures["median_s"]["wall_s"] == 148
    assert figures["markets_per_hour"] == 48.0 and figures["table_hours"] == round(292 / 48.0, 2)


def test_the_warm_pace_leaves_out_each_processs_first_market() -> None:
    rows = [
        {"index": 0, "data_s": 30, "ppo_s": 90, "wall_s": 190},  # (each process's first: compile, imports)
        {"index": 1, "data_s": 30, "ppo_s": 90, "wall_s": 170},
        {"index": 2, "data_s": 20, "ppo_s": 60, "wall_s": 140},
        {"index": 3, "data_s": 22, "ppo_s": 66, "wall_s": 144},
    ]
    later = power_table_time.warm(rows, jobs=2)
    assert later["markets"] == 2 and later["median_s"] == {"data_s": 21, "ppo_s": 63, "wall_s": 142}
    assert later["table_hours"] == round(292 * 142 / 2 / 3600, 2)
    assert power_table_time.warm(rows[:2], jobs=2) is None
