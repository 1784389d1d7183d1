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
    outcome = {"outcome": "significant", "p_value": 0.01}
    row = {"settings_key": key, "level": 0.42, "index": 0, **dict.fromkeys(power_table.STRATEGIES, outcome)}
    power_table.append_row(args.out, row)
    power_table.append_row(args.out, {**row, "settings_key": "other"})
    assert power_table.load_rows(args.out, key) == {(0.42, 0): row}
    (line,) = power_table.table([row])[:1]
    assert (line["markets"], line["significant"], line["power"]) == (1, 1, 1.0)


def test_a_test_window_under_126_sessions_is_refused():
    with pytest.raises(SystemExit):
        power_table.parse_args(["--sessions", "150"])


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
    old = power_table.parse_args([])
    assert power_table.settings_key(old).endswith("cost_rate=None")  # earlier runs' rows still read
    args = power_table.parse_args(
        ["--shape", "nonlinear", "--ic", "0", "0.02", "0.1", "--first-seed", "700000"]
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
