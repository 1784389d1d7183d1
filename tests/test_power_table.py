"""The power table's pieces that need no tournament: the planted predictor it trades as the oracle,
the Clopper-Pearson bounds and the resumable rows (benchmarks/power_table.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from data.synthetic import SyntheticSpec, generate, planted_predictor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import power_table  # noqa: E402

from benchmarks import power_columns  # noqa: E402

#: The flags of rows run with the half (`start_single_share = 0.5`) and without the pair candidate and
#: the cross-fitted judgement, whose keys do not name them.
#: The learner of the first tables' rows (each setting at its value then), whose key they keep.
HALF = [
    "--start-single-share",
    "0.5",
    "--no-start-products",
    "--no-start-crossfit",
    "--no-refit-alpha",
    "--objective",
    "excess_sharpe",
]


def test_the_planted_predictor_is_the_trailing_idiosyncratic_sum_and_predicts():
    spec = SyntheticSpec(num_tickers=8, num_sessions=6, seed=3, signal=1.0)
    predictor = planted_predictor(spec)
    bars = generate(spec)
    assert predictor.shape == bars.close.shape
    # the next 15 bars' log returns, demeaned across assets, follow the predictor (demeaned)
    log_close = np.log(bars.close)
    ahead = log_close[15 + 520 :] - log_close[520:-15]
    x = predictor[520:-15] - predictor[520:-15].mean(axis=1, keepdims=True)
    y = ahead - ahead.mean(axis=1, keepdims=True)
    assert float(np.corrcoef(x.ravel(), y.ravel())[0, 1]) > 0.05
    null = planted_predictor(SyntheticSpec(num_tickers=8, num_sessions=6, seed=3, signal=0.0))
    x0 = null[520:-15] - null[520:-15].mean(axis=1, keepdims=True)
    y0 = np.log(generate(SyntheticSpec(num_tickers=8, num_sessions=6, seed=3, signal=0.0)).close)
    y0 = y0[15 + 520 :] - y0[520:-15]
    y0 = y0 - y0.mean(axis=1, keepdims=True)
    assert abs(float(np.corrcoef(x0.ravel(), y0.ravel())[0, 1])) < 0.05


def test_clopper_pearson_bounds():
    low, high = power_table.interval(0, 48)
    assert low == 0.0 and high == pytest.approx(0.0740, abs=1e-3)
    assert power_table.upper_95(0, 48) == pytest.approx(0.0605, abs=1e-3)
    low, high = power_table.interval(16, 16)
    assert high == 1.0 and low == pytest.approx(0.794, abs=1e-3)


def test_rows_are_appended_and_read_back_by_settings(tmp_path):
    args = power_table.parse_args(["--out", str(tmp_path / "rows.jsonl"), "--budget", "1000"])
    key = power_table.settings_key(args)
    outcome = {"outcome": "significant", "p_value": 0.01, "sharpe": 2.0}
    columns = list(power_columns.COLUMNS)
    row = {
        "settings_key": key,
        "level": 0.42,
        "index": 0,
        "columns": columns,
        **dict.fromkeys(columns, outcome),
    }
    power_table.append_row(args.out, row)
    power_table.append_row(args.out, {**row, "settings_key": "other"})
    assert power_table.load_rows(args.out, key) == {(0.42, 0): row}
    (line,) = power_table.table([row])[:1]
    assert (line["markets"], line["significant"], line["power"], line["median_sharpe"]) == (1, 1, 1.0, 2.0)


def test_a_test_window_under_126_sessions_is_refused():
    with pytest.raises(SystemExit):
        power_table.parse_args(["--sessions", "150"])


def test_jobs_run_the_shards_side_by_side_and_refuse_a_shard_beside_them():
    assert power_table.parse_args(["--jobs", "2"]).jobs == 2
    for bad in (["--jobs", "0"], ["--jobs", "2", "--shard", "1/2"]):
        with pytest.raises(SystemExit):
            power_table.parse_args(bad)


def test_the_feature_set_reaches_the_market_and_the_settings_key():
    small = power_table.parse_args([*HALF])
    library = power_table.parse_args(["--features", "library", *HALF])
    assert power_table.config_of(library, 5, 0.42).data.features == "library"
    assert power_table.config_of(small, 5, 0.42).data.features == "small"
    assert "features" not in power_table.settings_key(small)  # the small set's rows keep their key
    assert power_table.settings_key(library).endswith(",features=library")


def test_the_start_single_share_reaches_the_learner_and_the_settings_key():
    from app.config import to_learner_args

    before = [
        "--no-start-products",
        "--no-start-crossfit",
        "--no-refit-alpha",
        "--objective",
        "excess_sharpe",
    ]
    default = power_table.parse_args(["--features", "library", *before])
    single = power_table.parse_args(["--features", "library", "--start-single-share", "1", *before])
    half = power_table.parse_args(["--features", "library", "--start-single-share", "0.5", *before])
    assert to_learner_args(power_table.config_of(default, 5, 0.05)).start_single_share == 1.0
    assert to_learner_args(power_table.config_of(single, 5, 0.05)).start_single_share == 1.0
    assert to_learner_args(power_table.config_of(half, 5, 0.05)).start_single_share == 0.5
    # The default (1) names itself, as the flag does; the half's rows, the first, keep their key.
    assert power_table.settings_key(default).endswith(",features=library,start_single_share=1")
    assert power_table.settings_key(single) == power_table.settings_key(default)
    assert power_table.settings_key(half).endswith(",features=library")
    with pytest.raises(SystemExit):
        power_table.parse_args(["--start-single-share", "1.5"])


def test_the_pair_candidate_and_the_crossfit_judgement_reach_the_learner_and_the_settings_key():
    """Both on by default (the learner's), named in the key when on; ``--no-...`` runs the rows of
    the learner before them, whose key they keep."""
    from app.config import to_learner_args

    old = [
        "--no-refit-alpha",
        "--objective",
        "excess_sharpe",
    ]  # (the refit's judge and objective of those rows)
    default = power_table.parse_args(["--features", "library", *old])
    flagged = power_table.parse_args(["--features", "library", "--start-products", "--start-crossfit", *old])
    off = power_table.parse_args(
        ["--features", "library", "--no-start-products", "--no-start-crossfit", *old]
    )
    learner = to_learner_args(power_table.config_of(default, 5, 0.05))
    assert learner.start_products and learner.start_crossfit
    learner = to_learner_args(power_table.config_of(off, 5, 0.05))
    assert not learner.start_products and not learner.start_crossfit
    assert power_table.settings_key(default) == power_table.settings_key(flagged)
    assert (
        power_table.settings_key(default)
        == power_table.settings_key(off) + ",start_products=1,start_crossfit=1"
    )
    assert "start_products" not in power_table.settings_key(off)  # the rows before them keep their key
    only_pair = power_table.parse_args(["--features", "library", "--no-start-crossfit", *old])
    assert power_table.settings_key(only_pair) == power_table.settings_key(off) + ",start_products=1"


def test_the_device_reaches_the_tournaments_and_names_itself_in_the_key_off_the_cpu():
    cpu = power_table.parse_args(["--features", "library"])
    gpu = power_table.parse_args(["--features", "library", "--device", "cuda"])
    assert power_table.config_of(cpu, 5, 0.05).agent.device == "cpu"
    assert power_table.config_of(gpu, 5, 0.05).agent.device == "cuda"
    assert power_table.ppo_config(gpu, 5, 0.05).agent.device == "cuda"
    # on cuda the direct tournament goes to the population backend, on the CPU it stays local
    from agents.tournament.backend_choice import resolve_backend

    gpu_config = power_table.config_of(gpu, 5, 0.05)
    assert resolve_backend(gpu_config.tournament.backend, gpu_config.agent.device, "direct") == "population"
    cpu_config = power_table.config_of(cpu, 5, 0.05)
    assert resolve_backend(cpu_config.tournament.backend, cpu_config.agent.device, "direct") == "local"
    assert power_table.settings_key(gpu) == power_table.settings_key(cpu) + ",device=cuda"
    assert "device" not in power_table.settings_key(cpu)  # the CPU's rows keep their key


def test_the_ppo_column_runs_on_the_devices_backend_unless_told_and_its_key_names_the_one_run():
    cpu = power_table.parse_args(["--with-ppo"])
    gpu = power_table.parse_args(["--with-ppo", "--device", "cuda"])
    told = power_table.parse_args(["--with-ppo", "--ppo-backend", "population"])
    assert power_table.ppo_config(cpu, 5, 0.05).tournament.backend == "local"
    assert power_table.ppo_config(gpu, 5, 0.05).tournament.backend == "population"
    assert power_table.ppo_config(told, 5, 0.05).tournament.backend == "population"
    assert ",ppo=1000000/4/250000/local," in power_table.settings_key(cpu)
    # the tables run before the flag (the population backend on the CPU) rerun under their key
    assert ",ppo=1000000/4/250000/population," in power_table.settings_key(told)
    with pytest.raises(SystemExit):
        power_table.parse_args(["--ppo-backend", "ray"])


def test_shards_split_the_markets_between_processes():
    assert power_table.parse_args([]).shard == (0, 1)
    assert power_table.parse_args(["--shard", "1/2"]).shard == (1, 2)
    for bad in ("2/2", "x", "1/0"):
        with pytest.raises(SystemExit):
            power_table.parse_args(["--shard", bad])


def test_the_static_book_holds_equal_weights_over_the_tradable_names_and_is_summarized():
    import static_null_size
    import torch

    from envs.observation import TRADABLE, obs_dim, split_obs

    obs = torch.zeros(2, obs_dim(4, 3))
    _, block = split_obs(obs, 4, 3)
    block[0, :, TRADABLE] = 1.0
    block[1, :3, TRADABLE] = 1.0
    weights = static_null_size.EqualWeight(4, 3)(obs)
    assert torch.allclose(weights[0], torch.full((4,), 0.25))
    assert torch.allclose(weights[1], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]))
    rows = [
        {"outcome": "significant", "alpha_p_value": 0.01, "alpha_per_day": 2e-4, "turnover": 0.1},
        {"outcome": "not significant", "alpha_p_value": 0.6, "alpha_per_day": -4e-4, "turnover": 0.2},
    ]
    result = static_null_size.summary(rows)
    assert (result["markets"], result["significant"], result["rate"]) == (2, 1, 0.5)
    assert result["alpha_p_below"] == {"0.05": 1, "0.1": 1, "0.25": 1, "0.5": 1}
    assert result["mean_alpha_per_day"] == pytest.approx(-1e-4)
    assert result["upper_95_one_sided"] == pytest.approx(power_table.upper_95(1, 2))


def test_ic_levels_plant_the_shape_and_keep_the_old_rows_key():
    old = power_table.parse_args([*HALF])
    assert power_table.settings_key(old).endswith("cost_rate=None")  # earlier runs' rows still read
    args = power_table.parse_args(
        ["--shape", "nonlinear", "--ic", "0", "0.02", "0.1", "--first-seed", "700000", *HALF]
    )
    assert args.levels == [0.0, 0.02, 0.1] and power_table.settings_key(args).endswith(",levels=ic")
    assert [power_table.market_seed(args, ic, 3) for ic in args.levels] == [700003, 720003, 800003]
    assert power_table.market_spec(args, 0.02) == {"shape": "nonlinear", "target_ic": 0.02}
    config = power_table.config_of(args, 700003, 0.02)
    assert (config.data.shape, config.data.target_ic) == ("nonlinear", 0.02)
    # the null markets are the same bars for every shape: shared, not built once per shape
    assert power_table.row_shape(args, 0.0) == "null" and power_table.row_shape(args, 0.02) == "nonlinear"
    for bad in (["--ic", "0.5"], ["--ic", "0.02", "--nulls", "1001"]):
        with pytest.raises(SystemExit):
            power_table.parse_args(bad)


def test_rows_of_another_shape_are_not_read_back(tmp_path):
    args = power_table.parse_args(["--out", str(tmp_path / "rows.jsonl"), "--ic", "0", "0.05"])
    key = power_table.settings_key(args)
    rows = [
        {"settings_key": key, "level": 0.0, "index": 0, "shape": "null"},
        {"settings_key": key, "level": 0.05, "index": 0, "shape": "nonlinear"},
        {"settings_key": key, "level": 0.05, "index": 1, "shape": "minute_momentum"},
    ]
    for row in rows:
        power_table.append_row(args.out, row)
    assert set(power_table.load_rows(args.out, key, ("minute_momentum", "null"))) == {(0.0, 0), (0.05, 1)}


def test_rows_written_before_the_columns_read_with_their_new_names_and_absent_columns_show_a_dash(
    tmp_path, capsys
):
    args = power_table.parse_args(["--out", str(tmp_path / "rows.jsonl")])
    key = power_table.settings_key(args)
    old = {
        "settings_key": key,
        "level": 0.42,
        "index": 0,
        "champion": {"outcome": "significant", "p_value": 0.01, "sharpe": 3.0},
        "linear": {"outcome": "not significant", "p_value": 0.4, "sharpe": 1.0},
        "oracle": {"outcome": "significant", "p_value": 0.001, "sharpe": 5.0},
    }
    power_table.append_row(args.out, old)
    (row,) = power_table.load_rows(args.out, key).values()
    assert row["columns"] == ["champion", "ridge_quintile", "oracle_quintile"]
    assert row["ridge_quintile"] == old["linear"] and row["oracle_quintile"] == old["oracle"]
    lines = {r["strategy"]: r for r in power_table.table([row])}
    assert lines["ridge_quintile"]["median_sharpe"] == 1.0 and lines["oracle"]["markets"] == 0
    power_table.print_table(power_table.table([row]))
    text = capsys.readouterr().out
    boosted = next(line for line in text.splitlines() if " boosted_softmax " in line)
    assert boosted.split()[2:] == ["-"] * 6
    # a run of today's columns runs that market again rather than keeping the old row
    assert not set(power_table.run_columns(args)) <= set(row["columns"])


def test_the_table_gives_each_column_its_own_markets_power_interval_and_median_sharpe():
    def entry(outcome, sharpe):
        return {"outcome": outcome, "p_value": 0.5, "alpha_p_value": 0.5, "sharpe": sharpe}

    rows = [
        {
            "level": 0.05,
            "columns": ["champion", "start"],
            "champion": entry("significant", s),
            "start": entry(o, 1.0),
        }
        for s, o in ((1.0, "significant"), (2.0, "not significant"), (4.0, "not significant"))
    ]
    lines = {r["strategy"]: r for r in power_table.table(rows)}
    champion, start = lines["champion"], lines["start"]
    assert (champion["markets"], champion["significant"], champion["median_sharpe"]) == (3, 3, 2.0)
    assert (start["significant"], start["power"]) == (1, pytest.approx(1 / 3))
    assert (start["ci95_low"], start["ci95_high"]) == power_table.interval(1, 3)
    assert lines["ppo"]["markets"] == 0 and lines["ppo"]["power"] is None


def test_the_score_head_is_the_champion_start_head():
    """The softmax head the boosted ranker and the oracle trade through gives the champion's own
    network's action when handed the ridge's scores (up to the network's input clip, not reached)."""
    import torch

    from agents.args import DirectArgs
    from backtests.linear import fit_linear
    from data.loader import synthetic_market
    from envs.observation import FEATURES, split_obs
    from envs.trading import EnvParams

    splits = synthetic_market(
        num_tickers=6, num_sessions=8, seed=3, signal=1.0, train_frac=0.5, valid_frac=0.25
    )
    params, args = EnvParams(), DirectArgs()
    interval = int(params.decision_interval)
    linear = fit_linear(splits.train, splits.valid, interval, penalties=(1e-2,))
    assert linear.coef.any()
    policy = power_columns.start_policy(splits.train, params, args, linear)
    decisions, fit_rows = power_columns.fit_rows_of(splits.train, interval, args)
    coef = linear.coef.to(torch.float32)

    def ridge(obs):
        _, block = split_obs(obs, 6, splits.train.num_features)
        return block[..., FEATURES] @ coef

    head = power_columns.ScoreSoftmax.calibrated(
        ridge, decisions.features[:fit_rows] @ coef, decisions.tradable[:fit_rows], args
    )
    from agents.direct import observation

    gen = torch.Generator().manual_seed(0)
    held = torch.softmax(torch.randn(5, 7, generator=gen), dim=-1)[:, :6]
    obs = observation(held, decisions, torch.arange(5) * 7)
    torch.testing.assert_close(head(obs), policy.act(obs), atol=1e-5, rtol=1e-4)
    assert head.rebalance_rate == policy.config.rebalance_rate == args.rebalance_rate


@pytest.mark.slow
def test_one_tiny_market_gives_every_column_and_its_fields_and_one_backtest_judges_as_separate_ones(
    tmp_path,
):
    """A market of 8 tickers over 20 sessions (seed 17, outside the plan's seeds), tiny tournaments."""
    args = power_table.parse_args(
        ["--out", str(tmp_path / "rows.jsonl"), "--with-ppo", "--ppo-budget", "2048"]
    )
    args.tickers, args.sessions, args.train_frac, args.valid_frac = 8, 20, 0.25, 0.5
    args.budget, args.round_steps, args.first_seed, args.ppo_pods = 1024, 1024, 17, 1
    row = power_table.run_market(args, 0.42, 0)
    assert row["seed"] == 17 + 42_000
    assert row["columns"] == list(power_columns.COLUMNS)
    for name in power_columns.COLUMNS:
        assert set(row[name]) == set(power_columns.FIELDS), name
        assert row[name]["outcome"] in ("significant", "not significant", "not measurable"), name
        assert row[name]["turnover"] is not None and row[name]["costs"] is not None, name
    assert row["ppo_env_steps"] >= 2048 and row["env_steps"] >= 1024
    assert row["champion_kind"] in ("intraday", "open")  # (the direct pod kinds: DIRECT_KINDS)
    # the one batched backtest judges a column as a backtest of that column alone does
    config = power_table.config_of(args, row["seed"], 0.42)
    splits = power_table.market_splits(config, row["seed"])
    params = power_table.to_env_params(config.env)
    from backtests.linear import fit_linear

    linear = fit_linear(splits.train, splits.valid, params.decision_interval)
    start = power_columns.start_policy(splits.train, params, power_table.to_learner_args(config))
    alone = power_columns.verdicts(splits.test, params, {"ridge_quintile": linear}, row["seed"])
    assert alone["ridge_quintile"] == row["ridge_quintile"]
    alone = power_columns.verdicts(splits.test, params, {"start": start}, row["seed"])
    assert alone["start"] == row["start"]


def test_the_refits_alpha_judge_reaches_the_tournament_and_the_settings_key():
    """Named in the key when on (the flag's, or the learner's default); ``--no-refit-alpha`` runs the
    rows written before it, whose key they keep."""
    from agents.args import DirectArgs
    from app.config import to_learner_args

    plain = ["--objective", "excess_sharpe"]  # (the objective of the rows before it)
    default = power_table.parse_args(["--features", "library", *plain])
    on = power_table.parse_args(["--features", "library", "--refit-alpha", *plain])
    off = power_table.parse_args(["--features", "library", "--no-refit-alpha", *plain])
    assert power_table.config_of(on, 5, 0.05).agent.refit_alpha is True
    assert to_learner_args(power_table.config_of(off, 5, 0.05)).refit_alpha is False
    assert power_table.settings_key(on) == power_table.settings_key(off) + ",refit_alpha=1"
    assert "refit_alpha" not in power_table.settings_key(off)
    same = on if DirectArgs().refit_alpha else off
    assert power_table.settings_key(default) == power_table.settings_key(same)


def test_the_learners_objective_reaches_the_pods_and_the_settings_key():
    """``--objective`` sets the champion's pods' ``[agent] objective``; other than excess_sharpe it is
    named in the key (the rows run before the option keep theirs)."""
    from agents.args import DirectArgs
    from app.config import to_learner_args

    default = power_table.parse_args(["--features", "library"])
    active = power_table.parse_args(["--features", "library", "--objective", "active_sharpe"])
    plain = power_table.parse_args(["--features", "library", "--objective", "excess_sharpe"])
    assert to_learner_args(power_table.config_of(active, 5, 0.05)).objective == "active_sharpe"
    assert power_table.settings_key(active) == power_table.settings_key(plain) + ",objective=active_sharpe"
    same = active if DirectArgs().objective == "active_sharpe" else plain
    assert power_table.settings_key(default) == power_table.settings_key(same)
