"""Walk-forward's parts: the fold layout (hand-computed), each fold's features (causal, normalized on its
train window only), and the stitched account (one continuous account across policy switches)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from app.walkforward.account import champion_spans
from app.walkforward.judging import PROVISIONAL_SHARE, report_level
from app.walkforward.record import FoldRecord
from backtests.engine import run_backtest
from backtests.folds import Fold, fold_layout, fold_of_session, span
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.stitched import SwitchingPolicy, run_stitched, segment_figures
from data.errors import ConfigError
from data.features import compute_features
from data.fold_market import fold_market, raw_features
from data.loader import synthetic_market
from envs.trading import EnvParams

pytestmark = pytest.mark.usefixtures("one_thread")


# --- layout ----------------------------------------------------------------------------------------


def test_rolling_layout_by_hand():
    folds = fold_layout(20, train_sessions=5, valid_sessions=3, step_sessions=4, embargo_sessions=2)
    # first test = 5 + 3 + 2 = 10; tests [10, 14), [14, 18), [18, 20) (the last one cut by the data)
    assert folds == [
        Fold(0, train=(0, 5), valid=(5, 8), test=(10, 14)),
        Fold(1, train=(4, 9), valid=(9, 12), test=(14, 18)),
        Fold(2, train=(8, 13), valid=(13, 16), test=(18, 20)),
    ]
    assert [f.embargo for f in folds] == [(8, 10), (12, 14), (16, 18)]
    assert span(folds) == (10, 20)
    assert fold_of_session(folds, 13).index == 0 and fold_of_session(folds, 9) is None


def test_expanding_layout_first_test_and_max_folds():
    folds = fold_layout(
        30,
        train_sessions=4,
        valid_sessions=2,
        step_sessions=5,
        window="expanding",
        first_test=12,
        max_folds=2,
    )
    assert folds == [
        Fold(0, train=(0, 9), valid=(9, 11), test=(12, 17)),
        Fold(1, train=(0, 14), valid=(14, 16), test=(17, 22)),
    ]


def test_a_gate_window_after_the_validation_window():
    (fold,) = fold_layout(
        20, train_sessions=5, valid_sessions=3, step_sessions=10, gate_sessions=2, max_folds=1
    )
    # train 5 + valid 3 + gate 2 + embargo 1: the first test session is 11
    assert fold == Fold(0, train=(0, 5), valid=(5, 8), test=(11, 20), gate=(8, 10))
    assert fold.gate_window == (8, 10) and fold.embargo == (10, 11)
    plain = fold_layout(20, train_sessions=5, valid_sessions=3, step_sessions=10)[0]
    assert plain.gate is None and plain.gate_window == plain.valid and plain.to_dict()["gate"] == [5, 8]


def test_test_windows_tile_the_span_and_every_window_ends_before_its_test():
    folds = fold_layout(200, train_sessions=30, valid_sessions=10, step_sessions=7, embargo_sessions=3)
    for before, after in zip(folds, folds[1:], strict=False):
        assert before.test[1] == after.test[0]
    for f in folds:
        assert f.train[1] == f.valid[0] and f.valid[1] + 3 == f.test[0]
        assert f.train[1] - f.train[0] == 30 and f.valid[1] - f.valid[0] == 10
    assert sum(f.test[1] - f.test[0] for f in folds) == 200 - 43


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"embargo_sessions": 0}, "embargo_sessions must be >= 1"),
        ({"window": "sliding"}, "window must be one of"),
        ({"first_test": 5}, "need 9"),
        ({"first_test": 40}, "hold no fold"),
        ({"step_sessions": 0}, "step_sessions must be >= 1"),
    ],
)
def test_bad_layouts_are_one_line_errors(kwargs, message):
    settings = {"train_sessions": 5, "valid_sessions": 3, "step_sessions": 2, **kwargs}
    with pytest.raises(ConfigError, match=message):
        fold_layout(40, **settings)


# --- a fold's features -----------------------------------------------------------------------------


SYNTHETIC_MARKET = {"num_tickers": 5, "num_sessions": 8, "seed": 3}  # the `market` fixture (conftest.py)


def test_fold_features_are_the_whole_history_features_cut_to_the_window(market, monkeypatch):
    whole = compute_features(market.close.to(torch.float64), market.volume)
    monkeypatch.setattr("data.features.BLOCK_VALUES", 2_000)  # a block of assets at a time: exact
    assert torch.equal(compute_features(market.close.to(torch.float64), market.volume), whole)
    assert torch.equal(raw_features(market, 0, market.num_steps), whole)
    # From `lookback` bars before the window on: the finite windows give the same values (to the
    # float32 rounding of a few of them: sums that start elsewhere round differently).
    assert torch.allclose(raw_features(market, 900, 2500), whole[900:2500], rtol=1e-6, atol=1e-9)


def test_fold_features_are_causal_and_normalized_on_the_fit_window_only(market):
    fold = fold_market(market, 390, 2730, fit=(390, 1560))
    raw = fold.raw[: 1560 - 390].reshape(-1, fold.raw.shape[-1]).to(torch.float64)
    assert np.allclose(fold.spec["mean"], raw.mean(0).numpy())
    # Changing every bar after the fit window changes no feature before it, nor the normalization.
    close = market.close.clone()
    close[1560:] *= 1.5
    moved = fold_market(dataclasses.replace(market, close=close), 390, 2730, fit=(390, 1560))
    assert moved.spec["mean"] == fold.spec["mean"] and moved.spec["std"] == fold.spec["std"]
    assert torch.equal(moved.market.features[: 1560 - 390], fold.market.features[: 1560 - 390])
    # Another policy's statistics: the same raw features, its own normalization.
    other = fold_market(market, 390, 2730, fit=(1560, 2340))
    view = fold.with_spec(1950, 2340, other.spec)
    assert torch.allclose(view.features, other.window(1950, 2340).features)
    assert view.timestamps[0] == market.timestamps[1950]


def test_the_fit_window_must_lie_inside_the_fold(market):
    with pytest.raises(Exception, match="not inside"):
        fold_market(market, 390, 1000, fit=(0, 500))


# --- the stitched account --------------------------------------------------------------------------


def _weights(value: float, assets: int):
    return lambda obs: torch.full((obs.shape[0], assets), value)


def test_switching_policy_hands_each_decision_to_the_policy_in_charge():
    seen = []
    policies = [lambda o, i=i: seen.append(i) or o for i in range(3)]
    switcher = SwitchingPolicy(policies, [0, 30, 45], decision_interval=15)
    for _ in range(5):
        switcher(torch.zeros(1))
    assert seen == [0, 0, 1, 2, 2] and switcher.calls == 5
    with pytest.raises(Exception, match="rise from 0"):
        SwitchingPolicy(policies, [0, 45, 30], decision_interval=15)


def test_the_account_is_continuous_across_a_switch(market):
    params = EnvParams(decision_interval=15)
    assets = market.num_assets
    cash, invested = _weights(0.0, assets), _weights(0.9 / assets, assets)
    switch = 3 * 390  # the first bar of session 3
    result = run_stitched(market, params, [cash, invested], [0, switch])
    equity = result.equity[:, result.index("champion")]
    k = switch // 15
    assert bool((equity[:k] == params.initial_cash).all())  # in cash until the switch
    # From an all-cash account the second policy trades exactly as it would from a fresh start there.
    fresh = run_backtest(market.slice(switch, market.num_steps), params, {"p": invested}, baselines=())
    assert torch.allclose(equity[k:], fresh.equity[:, 0], rtol=1e-9)
    # Buy-and-hold bought from the span's first bar, as fast as the volume cap lets it, and never again.
    traded = (result.trades[:, result.index("buy_and_hold")] != 0).any(dim=-1)
    build = int(traded.nonzero().max()) + 1
    assert bool(traded[:build].all()) and not bool(traded[build:].any()) and build < k


def test_a_switch_rebalances_from_the_holdings_it_finds(market):
    """Policy B takes over positions A built: it trades only the difference, so a switch between two
    policies with the same targets costs nothing, and the run equals one policy all along."""
    params = EnvParams(decision_interval=15)
    same = _weights(0.9 / market.num_assets, market.num_assets)
    other = _weights(0.9 / market.num_assets, market.num_assets)
    stitched = run_stitched(market, params, [same, other], [0, 4 * 390], baselines=())
    single = run_backtest(market, params, {"champion": same}, baselines=())
    assert torch.equal(stitched.equity, single.equity) and torch.equal(stitched.costs, single.costs)


def test_segment_figures_compound_to_the_whole(market):
    params = EnvParams(decision_interval=15)
    result = run_stitched(market, params, [_weights(0.15, market.num_assets)], [0])
    dates = [str(d) for d in np.unique(result.session_dates)]
    parts = [
        segment_figures(result, dates[a], dates[b - 1], annualization=TRADING_DAYS_PER_YEAR)
        for a, b in ((0, 3), (3, 5), (5, len(dates)))
    ]
    whole = segment_figures(result, dates[0], dates[-1], annualization=TRADING_DAYS_PER_YEAR)
    assert np.prod([1 + p["return"] for p in parts]) - 1 == pytest.approx(whole["return"], rel=1e-9)
    assert sum(p["costs_paid"] for p in parts) == pytest.approx(whole["costs_paid"])
    assert sum(p["sessions"] for p in parts) == whole["sessions"] == len(dates)
    assert whole["return"] == pytest.approx(float(result.equity[-1, 0]) / result.initial_value - 1)


def test_champion_spans_merge_consecutive_folds_of_one_champion():
    records = [
        {"index": 0, "windows": {"test": ["d0", "d1"]}, "in_charge": None, "before_champion": "benchmark", "test": {"sessions": 2}},
        {"index": 1, "windows": {"test": ["d2", "d3"]}, "in_charge": None, "before_champion": "benchmark", "test": {"sessions": 2}},
        {"index": 2, "windows": {"test": ["d4", "d5"]}, "in_charge": {"fold": 2, "run": "fold-002"}, "test": {"sessions": 2}},
        {"index": 3, "windows": {"test": ["d6", "d7"]}, "in_charge": {"fold": 2, "run": "fold-002"}, "test": {"sessions": 2}},
    ]  # fmt: skip
    assert [s.model_dump() for s in champion_spans([FoldRecord.parse(r) for r in records])] == [
        {"champion": "benchmark (no qualified champion)", "first": "d0", "last": "d3", "sessions": 4, "folds": [0, 1]},
        {"champion": "fold-002", "first": "d4", "last": "d7", "sessions": 4, "folds": [2, 3]},
    ]  # fmt: skip


def test_a_record_from_before_the_setting_held_cash_with_no_champion():
    legacy = FoldRecord.parse({"index": 0, "windows": {"test": ["d0", "d1"]}, "in_charge": None})
    assert legacy.holding() == "cash" and legacy.in_charge_label() == "cash (no qualified champion)"


# --- the layout on a market's calendar -------------------------------------------------------------


def test_plan_folds_in_bars_and_dates_and_the_per_fold_settings():
    from app.config import parse_config
    from app.walkforward.plan import fold_config, plan_folds
    from app.walkforward.run import bars_only

    full = bars_only(synthetic_market(num_tickers=2, num_sessions=30, seed=1).full)
    raw = {
        "walkforward": {
            "train_sessions": 8,
            "valid_sessions": 10,
            "gate_sessions": 0,
            "step_sessions": 4,
            "start": "2024-02-01",
        }
    }
    config = parse_config(raw)
    plans = plan_folds(full, config.walkforward)
    days = [str(d) for d in np.unique(full.session_dates())]
    first = days.index("2024-02-01")
    assert [p.fold.test for p in plans] == [(first, first + 4), (first + 4, first + 8), (first + 8, 30)]
    for p in plans:
        (a, b), (c, d) = p.bars["test"], p.fold.test
        assert full.session_id[a] == c and full.session_id[b - 1] == d - 1 and b - a == 390 * (d - c)
        assert p.dates["test"] == (days[c], days[d - 1])
        assert p.dates["embargo"] == (days[c - 1], days[c - 1])  # one session, the default
    assert full.num_features == 0  # the folds compute their own features
    tuned = fold_config(parse_config({**raw, "walkforward": {**raw["walkforward"], "budget_minutes": 3}}), 2)
    assert (tuned.tournament.seed, tuned.tournament.budget_minutes, tuned.tournament.budget_steps) == (
        2,
        3,
        None,
    )
    assert fold_config(config, 1).tournament.budget_steps == config.tournament.budget_steps
    with pytest.raises(ConfigError, match="at least 10"):
        plan_folds(full, parse_config({"walkforward": {"valid_sessions": 5, "gate_sessions": 0}}).walkforward)


@pytest.mark.parametrize("planned", [1, 3, 12])
def test_a_span_spends_its_level_once_over_all_its_reports(planned):
    """Each fold's provisional report and the final one together spend the configured level (the
    union bound), the final keeps most of it: a 12-fold run's final test is adjusted once, not 12 times."""
    level = 0.05
    provisional = [report_level(level, final=False, planned_folds=planned) for _ in range(planned)]
    final = report_level(level, final=True, planned_folds=planned)
    assert sum(provisional) + final == pytest.approx(level)
    assert final == pytest.approx(level * (1 - PROVISIONAL_SHARE)) and final > 0.5 * level
    assert report_level(level, final=True, planned_folds=None) == level


@pytest.mark.parametrize(
    ("flags", "rule", "holding"),
    [
        (["--gate", "nightly", "--before-champion", "cash"], "window", "cash"),  # the earlier name
        (["--gate", "always"], "always", "benchmark"),
        ([], "book", "benchmark"),
    ],
)
def test_the_command_s_gate_flags_set_the_gate_section(tmp_path, monkeypatch, flags, rule, holding):
    """``--gate`` and ``--before-champion`` set ``[gate] rule`` and ``before_champion``: the run reads
    the promotion rule where nightly reads it."""
    from app import cli
    from app.walkforward import run as wf_run

    seen = []

    def stop(config, home, **kwargs):
        seen.append(config.gate)
        raise ConfigError("stopped before the folds")

    monkeypatch.setattr(wf_run, "run_walkforward", stop)
    rc = cli.main(["--home", str(tmp_path), "walkforward", "--json", *flags])
    assert rc == 2 and [(g.rule, g.before_champion) for g in seen] == [(rule, holding)]
