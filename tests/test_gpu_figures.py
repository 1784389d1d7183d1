"""The GPU figures' script (benchmarks/gpu_figures.py): which parts a run takes, the power part's
command at the default table's settings, and its timing read from the rows."""

import json

from agents.args import DirectArgs
from benchmarks import gpu_figures, power_table


def test_a_plain_run_takes_the_demo_and_the_walkforward_and_power_takes_a_slot_of_its_own(tmp_path):
    plain = gpu_figures.commands(gpu_figures.parse_args(["--out-dir", str(tmp_path)]))
    assert list(plain) == ["demo", "walkforward"]
    smoke = gpu_figures.commands(gpu_figures.parse_args(["--out-dir", str(tmp_path), "--smoke"]))
    assert list(smoke) == ["demo", "walkforward", "power"]
    (power,) = gpu_figures.commands(
        gpu_figures.parse_args(["--out-dir", str(tmp_path), "--only", "power"])
    ).values()
    args = power_table.parse_args(power[2:])
    # the default learner's table's settings (as its rows' key reads), on the device
    table = "budget=250000,round_steps=50000,pods=2,algo=direct,tickers=100,sessions=243,"
    table += "train_frac=0.2962962962962963,valid_frac=0.18518518518518517,cost_rate=None,levels=ic,"
    table += "features=library,ppo=1000000/4/250000/population"  # (the PPO column on the device's backend)
    table += ",start_single_share=1,start_products=1,start_crossfit=1"
    table += ",refit_alpha=1" if DirectArgs().refit_alpha else ""
    objective = DirectArgs().objective
    table += f",objective={objective}" if objective != "excess_sharpe" else ""
    assert power_table.settings_key(args) == table + ",device=cuda"
    assert args.shape == "nonlinear" and args.ic == [0.10] and args.markets == 8 and args.jobs == 8
    assert args.with_ppo and args.ppo_budget == 1_000_000


def test_the_power_part_reads_its_timing_from_the_rows(tmp_path):
    rows = tmp_path / "power.jsonl"
    assert gpu_figures.power_figures(rows, 10.0) is None
    rows.write_text(
        "\n".join(
            json.dumps({"settings_key": "k", "data_s": d, "tournament_s": t, "wall_s": d + t})
            for d, t in ((10, 20), (12, 40), (14, 30))
        )
        + "\n"
    )
    figures = gpu_figures.power_figures(rows, 60.0)
    assert figures["markets"] == 3 and figures["median_s"]["tournament_s"] == 30
    assert figures["markets_per_hour"] == 180.0
    assert figures["table_hours"] == round(gpu_figures.TABLE_MARKETS / 180.0, 2)
    assert gpu_figures.summary("power", {"figures": figures}).startswith("power: 3 markets")


def test_a_row_given_its_ppo_column_by_a_later_pass_counts_that_passs_seconds(tmp_path):
    """``power_table --with-ppo`` over rows without the PPO column merges the new pass's timings into
    ``rerun_timings`` (``power_rerun.merged``); the timing reads them there."""
    from benchmarks.power_rerun import merged

    old = {"columns": ["ridge"], "ridge": {}, "data_s": 10.0, "tournament_s": 20.0, "wall_s": 40.0}
    new = {"columns": ["ppo"], "commit": "c", "ppo": {}, "data_s": 11.0, "ppo_s": 70.0, "wall_s": 90.0}
    row = merged(old, new, ("ppo",), ("ridge", "ppo"))
    assert "ppo_s" not in row and row["rerun_timings"]["ppo_s"] == 70.0
    rows = tmp_path / "power.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    figures = gpu_figures.power_figures(rows, 60.0)
    assert figures["median_s"]["ppo_s"] == 70.0 and figures["median_s"]["data_s"] == 10.0
