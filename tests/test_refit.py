"""The champion refitted on the train and validation windows once chosen (agents.tournament.refit):
a direct champion that is its start is made again from its lineage's kind and seed on both windows;
one whose weights moved stays only if it beats its start on the validation window by the learner's
margin (else the start takes its place, refitted); a PPO champion and an ensemble stay as chosen; the
chosen one is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import SMALL_DIRECT, SMALL_ENV, ppo_market
from test_tournament_run import run_tournament

from agents.policy import Policy
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import score_policy
from agents.tournament.refit import CHOSEN, lineage_root, refit_champion, root_args, same_policy, start_of
from agents.tournament.settings import TournamentArgs
from app.runs import RunDir
from app.workflows.backtest import _champion_for
from backtests.engine import run_backtest
from backtests.metrics import TRADING_DAYS_PER_YEAR
from envs.params import EnvParams

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

ENV = dict(SMALL_ENV)
# An unreachable held-out margin: no fine-tuning step replaces a start, so the champion is its start.
AGENT = {**SMALL_DIRECT, "holdout_margin": 1e9}
PARAMS = EnvParams(decision_interval=5, episode_len=16)


@pytest.fixture(scope="module")
def tournament(tmp_path_factory):
    train, valid, _test = ppo_market().split_sessions(0.6, 0.2)
    args = TournamentArgs(
        pods=2, leaderboard_size=4, p_fresh=0.0, round_steps=256, budget_steps=1200, workers=0, seed=0,
        algo="direct",
    )  # fmt: skip
    home = tmp_path_factory.mktemp("refit")
    result = run_tournament(
        home / "run", train, valid, args=args, env=ENV, agent=AGENT, annualization=TRADING_DAYS_PER_YEAR
    )
    return result, train, valid


def _copy_run(result, tmp_path: Path) -> Path:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(result.run_dir, run_dir)
    return run_dir


def test_a_champion_that_is_its_start_is_made_again_on_both_windows(tournament, tmp_path):
    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    root = lineage_root(run_dir, result.champion["pod_id"])
    assert root is not None and root["parent_id"] is None
    chosen = Policy.load(run_dir / "champion")
    assert same_policy(chosen, start_of(train, PARAMS, root_args(AGENT, root, train, 5)))
    both = train.join(valid)
    outcome = refit_champion(run_dir, result.champion, train, valid, PARAMS, AGENT)
    assert outcome.refitted and outcome.root_id == root["pod_id"], outcome
    # (its start, made again, equals it: no comparison on the validation window was needed)
    assert outcome.reason == "refitted on the train and validation windows" and outcome.start_t is None
    refitted = Policy.load(run_dir / "champion")
    assert same_policy(refitted, start_of(both, PARAMS, root_args(AGENT, root, both, 5)))
    assert not same_policy(refitted, chosen)  # (more sessions: another ridge)
    assert same_policy(Policy.load(run_dir / CHOSEN), chosen)
    assert _champion_for(RunDir.at(run_dir), "valid") == run_dir / CHOSEN
    assert _champion_for(RunDir.at(run_dir), "test") == run_dir / "champion"


def _moved_champion(run_dir: Path, scale: float = 1e-3) -> Policy:
    moved = Policy.load(run_dir / "champion")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in moved.net.parameters():
            param.add_(scale * torch.randn(param.shape, generator=gen))
    moved.save(run_dir / "champion")
    return moved


def _recording(monkeypatch, t: float, alpha_t: float | None = None) -> list:
    """``versus_start`` replaced by one that returns ``t`` (and ``alpha_t``, ``t`` unless given) and
    records what it was given."""
    from agents.tournament import refit

    calls: list = []

    def record(chosen, start, window, params, annualization):
        calls.append((chosen, start, window))
        _, _, returns = score_policy(start, window, params, annualization=annualization)
        return refit.StartLook(t, t if alpha_t is None else alpha_t, 0.5, returns)

    monkeypatch.setattr(refit, "versus_start", record)
    return calls


@pytest.mark.parametrize("t", [2.5, 2.0])
def test_a_moved_champion_is_judged_against_its_start_on_the_validation_window(
    tournament, tmp_path, monkeypatch, t
):
    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    moved = _moved_champion(run_dir)
    (run_dir / CHOSEN).mkdir()  # (one kept by an earlier refit, before a resume chose again: stale)
    calls = _recording(monkeypatch, t)
    agent = {**AGENT, "holdout_margin": 2.0}
    outcome = refit_champion(run_dir, result.champion, train, valid, PARAMS, agent)
    ((chosen, start, window),) = calls
    root = lineage_root(run_dir, result.champion["pod_id"])
    assert same_policy(chosen, moved) and same_policy(
        start, start_of(train, PARAMS, root_args(agent, root, train, 5))
    )
    assert window is valid
    assert (outcome.start_t, outcome.start_alpha_t, outcome.start_sharpe) == (t, t, 0.5)
    if t > 2.0:  # beats its start by more than the margin: stays
        assert not outcome.refitted and "beats its start" in outcome.reason
        assert same_policy(Policy.load(run_dir / "champion"), moved)
        assert not (run_dir / CHOSEN).exists()
        assert _champion_for(RunDir.at(run_dir), "valid") == run_dir / "champion"
    else:  # at the margin is not over it: the start, refitted
        assert outcome.refitted and "the start, refitted" in outcome.reason
        assert same_policy(Policy.load(run_dir / CHOSEN), moved)


@pytest.mark.parametrize("refit_alpha", [True, False])
def test_the_alpha_judges_a_moved_champion_unless_refit_alpha_is_off(
    tournament, tmp_path, monkeypatch, refit_alpha
):
    """A fine-tuning whose raw daily returns beat its start's (t 2.5) with no alpha over it (alpha t
    0.5), as one that sold its book in a falling window does: the alpha gives the place to the start;
    with ``refit_alpha`` off the raw returns keep the fine-tuned weights."""
    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    _moved_champion(run_dir)
    _recording(monkeypatch, 2.5, alpha_t=0.5)
    agent = {**AGENT, "holdout_margin": 2.0, "refit_alpha": refit_alpha}
    outcome = refit_champion(run_dir, result.champion, train, valid, PARAMS, agent)
    assert (outcome.start_t, outcome.start_alpha_t) == (2.5, 0.5)
    if refit_alpha:
        assert outcome.refitted and "(alpha t 0.50)" in outcome.reason, outcome
    else:
        assert not outcome.refitted and "(t 2.50 > 2)" in outcome.reason, outcome


def test_the_difference_alpha_takes_out_what_buy_and_hold_explains():
    """A chosen policy that holds a fifth of its start's book in a falling market beats the start's
    raw returns by more than two standard errors and has less alpha than it; a difference that is all alpha keeps
    its t; a benchmark that does not move leaves the plain (HAC) t; no difference, 0."""
    import numpy as np

    from agents.tournament.refit import difference_alpha_t
    from backtests.bootstrap_t import t_statistic

    rng = np.random.default_rng(0)
    bench = -0.006 + 0.008 * rng.standard_normal(45)
    start = 0.0005 + bench + 0.002 * rng.standard_normal(45)
    chosen = 0.2 * start + 0.0005 * rng.standard_normal(45)
    diff = chosen - start
    assert float(t_statistic(diff)) > 2.0
    assert difference_alpha_t(diff, bench) < 0.0  # (it gave up four fifths of the start's alpha)
    alpha = 0.001 + 0.002 * rng.standard_normal(45)
    assert difference_alpha_t(alpha, bench) == pytest.approx(_reference_alpha_t(alpha, bench))
    assert difference_alpha_t(alpha, np.full(45, 0.01)) == pytest.approx(float(t_statistic(alpha)))
    assert difference_alpha_t(np.zeros(45), bench) == 0.0


def _reference_alpha_t(diff, bench) -> float:
    """The slow reference: OLS of ``diff`` on a constant and ``bench`` by lstsq, the Newey-West
    variance of ``diff - beta bench`` term by term (Bartlett weights, lags floor(4 (n/100)^(2/9)))."""
    import math

    import numpy as np

    n = len(diff)
    (_, beta), *_ = np.linalg.lstsq(np.column_stack([np.ones(n), bench]), diff, rcond=None)
    a = diff - beta * bench
    d = a - a.mean()
    lags = max(1, math.floor(4 * (n / 100) ** (2 / 9)))
    lrv = sum(d[i] * d[i] for i in range(n)) / n
    for lag in range(1, lags + 1):
        lrv += 2 * (1 - lag / (lags + 1)) * sum(d[i] * d[i - lag] for i in range(lag, n)) / n
    return float(a.mean() / math.sqrt(lrv / n))


def test_no_bar_at_a_zero_margin_and_warm_started_lineages_stay(tournament, tmp_path, monkeypatch):
    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    moved = _moved_champion(run_dir)
    calls = _recording(monkeypatch, -5.0)
    zero = refit_champion(run_dir, result.champion, train, valid, PARAMS, {**AGENT, "holdout_margin": 0.0})
    assert not zero.refitted and "holdout_margin = 0" in zero.reason
    root = lineage_root(run_dir, result.champion["pod_id"])
    warm = refit_champion(run_dir, result.champion, train, valid, PARAMS, AGENT, warm_pods=root["seq"] + 1)
    assert not warm.refitted and "warm-started" in warm.reason
    assert calls == [] and same_policy(Policy.load(run_dir / "champion"), moved)


def test_a_moved_champion_that_does_not_beat_its_start_gives_way_to_the_start_refitted(tournament, tmp_path):
    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    moved = _moved_champion(run_dir)
    outcome = refit_champion(run_dir, result.champion, train, valid, PARAMS, {**AGENT, "holdout_margin": 2.0})
    assert outcome.refitted and outcome.start_t is not None and outcome.start_t <= 2.0, outcome
    assert "not 2 SE" in outcome.reason
    root = lineage_root(run_dir, result.champion["pod_id"])
    both = train.join(valid)
    assert same_policy(
        Policy.load(run_dir / "champion"), start_of(both, PARAMS, root_args(AGENT, root, both, 5))
    )
    assert same_policy(Policy.load(run_dir / CHOSEN), moved)


def test_versus_start_is_the_paired_t_of_the_daily_validation_returns(tournament, tmp_path):
    import numpy as np

    from agents.tournament.refit import versus_start
    from backtests.bootstrap_t import t_statistic

    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    start = Policy.load(run_dir / "champion")
    moved = _moved_champion(run_dir, scale=1.0)
    same = versus_start(start, start, valid, PARAMS, TRADING_DAYS_PER_YEAR)
    assert (same.t, same.alpha_t) == (0.0, 0.0)
    (_, _, a), (_, metrics, b) = (
        score_policy(p, valid, PARAMS, annualization=TRADING_DAYS_PER_YEAR) for p in (moved, start)
    )
    diff = np.asarray(a.daily) - np.asarray(b.daily)
    assert diff.std() > 0
    expected = diff.mean() / (diff.std(ddof=1) / np.sqrt(len(diff)))
    look = versus_start(moved, start, valid, PARAMS, TRADING_DAYS_PER_YEAR)
    assert look.t == pytest.approx(expected, rel=1e-4) and look.sharpe == metrics["sharpe_ratio"]
    assert np.array_equal(np.asarray(look.returns.daily), np.asarray(b.daily))
    # (two validation sessions: no beta to take out, the HAC t of the mean; eight, the alpha's t)
    assert look.alpha_t == pytest.approx(float(t_statistic(diff)), rel=1e-6)
    both = train.join(valid)
    look = versus_start(moved, start, both, PARAMS, TRADING_DAYS_PER_YEAR)
    (_, _, a), (_, _, b) = (
        score_policy(p, both, PARAMS, annualization=TRADING_DAYS_PER_YEAR) for p in (moved, start)
    )
    bench = run_backtest(both, PARAMS, baselines=("buy_and_hold",)).daily_returns()[1][:, 0].numpy()
    assert len(bench) == 8
    diff = np.asarray(a.daily) - np.asarray(b.daily)
    assert look.alpha_t == pytest.approx(_reference_alpha_t(diff, bench), rel=1e-6)


def test_ppo_champions_and_ensembles_are_not_refitted(tournament, tmp_path):
    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    ppo = refit_champion(run_dir, result.champion, train, valid, PARAMS, {**AGENT, "algo": "ppo"})
    assert not ppo.refitted and "ppo" in ppo.reason
    ensemble = refit_champion(run_dir, {"pod_id": "ensemble"}, train, valid, PARAMS, AGENT)
    assert not ensemble.refitted and "ensemble" in ensemble.reason
    assert not refit_champion(run_dir, None, train, valid, PARAMS, AGENT).refitted
    assert not (run_dir / CHOSEN).exists()
    assert {p["pod_id"] for p in read_pods(run_dir)} == {p["pod_id"] for p in read_pods(result.run_dir)}


def test_joined_windows_are_the_markets_bars_in_order(tournament):
    _, train, valid = tournament
    market = ppo_market()
    both = train.join(valid)
    assert torch.equal(both.close, market.close[: both.num_steps])
    assert torch.equal(both.features, market.features[: both.num_steps])
    with pytest.raises(Exception, match="does not start after"):
        valid.join(train)


def test_the_refit_writes_where_the_run_folder_reads():
    from agents.tournament import refit
    from app import runs

    assert (refit.CHAMPION, refit.CHOSEN) == (runs.CHAMPION, runs.CHAMPION_CHOSEN)


def test_refit_off_leaves_the_chosen_champion_and_says_so(tournament, tmp_path):
    from app.config import Config
    from app.refit import refit_step

    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    before = Policy.load(run_dir / "champion")
    config = Config()
    config = config.model_copy(update={"tournament": config.tournament.model_copy(update={"refit": False})})
    run = RunDir.at(run_dir)
    out = refit_step(run, result, train, valid, config)
    assert out.champion["refit"] is False and out.champion["pod_id"] == result.champion["pod_id"]
    assert run.info().extra["refit"]["reason"] == "[tournament] refit = false"
    assert same_policy(Policy.load(run_dir / "champion"), before) and not (run_dir / CHOSEN).exists()


def test_the_comparison_with_the_start_is_recorded_in_the_run(tournament, tmp_path, monkeypatch):
    from app.config import Config
    from app.refit import refit_step

    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    _moved_champion(run_dir)
    _recording(monkeypatch, 0.3)
    config = Config().with_updates(agent=AGENT, env=ENV)
    run = RunDir.at(run_dir)
    out = refit_step(run, result, train, valid, config)
    assert out.champion["refit"] is True and out.pods_tried == result.pods_tried + 1
    refit = run.info().extra["refit"]
    assert (refit["start_t"], refit["start_sharpe"], refit["refitted"]) == (0.3, 0.5, True)
    assert "start_returns" not in refit
    # the champion's column in the selection statistics is the start's look it gave way to
    from app.evaluation import selection_inputs

    inputs = selection_inputs(run, valid, PARAMS, out.champion["pod_id"])
    assert inputs.ids[inputs.champion] == "champion_start"
    # again (a resume's refit): counted once, over the tournament's own count
    again = refit_step(run, result, train, valid, config)
    assert again.pods_tried == result.pods_tried + 1 == run.info().pods_tried


def test_a_champion_that_beats_its_start_still_counts_the_look(tournament, tmp_path, monkeypatch):
    from app.config import Config
    from app.refit import refit_step

    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    _moved_champion(run_dir)
    _recording(monkeypatch, 3.0)
    run = RunDir.at(run_dir)
    config = Config().with_updates(agent={**AGENT, "holdout_margin": 2.0}, env=ENV)
    out = refit_step(run, result, train, valid, config)
    assert out.champion["refit"] is False and out.pods_tried == result.pods_tried + 1
    assert (run.champion_start / "valid_returns.parquet").is_file()


def test_refit_off_clears_an_earlier_start_look(tournament, tmp_path):
    from app.config import Config
    from app.evaluation import trial_returns
    from app.refit import refit_step

    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    _moved_champion(run_dir)
    run = RunDir.at(run_dir)
    config = Config().with_updates(agent={**AGENT, "holdout_margin": 2.0}, env=ENV)
    refit_step(run, result, train, valid, config)
    assert "champion_start" in trial_returns(run)[2]
    off = config.model_copy(update={"tournament": config.tournament.model_copy(update={"refit": False})})
    out = refit_step(run, result, train, valid, off)
    assert out.pods_tried == result.pods_tried and not run.champion_start.exists()
    assert "champion_start" not in trial_returns(run)[2]


def test_the_start_scored_on_validation_is_one_more_trial_everywhere(tournament, tmp_path):
    """The start's look is counted where the DSR reads trials (``pods_tried``, ``trial_sharpes``) and
    where the SPA test and the PBO read them (the trial matrix of ``app.evaluation.trial_returns``)."""
    import numpy as np

    from app.config import Config
    from app.evaluation import trial_returns
    from app.refit import refit_step

    result, train, valid = tournament
    run_dir = _copy_run(result, tmp_path)
    _moved_champion(run_dir)
    run = RunDir.at(run_dir)
    before = trial_returns(run)
    config = Config().with_updates(agent={**AGENT, "holdout_margin": 2.0}, env=ENV)
    out = refit_step(run, result, train, valid, config)
    refit = run.info().extra["refit"]
    assert refit["start_t"] is not None
    assert out.pods_tried == result.pods_tried + 1
    assert out.trial_sharpes == [*result.trial_sharpes, refit["start_sharpe"]]
    info = run.info()
    assert info.pods_tried == out.pods_tried and list(info.trial_sharpes) == out.trial_sharpes
    when, returns, ids = trial_returns(run)
    assert ids == [*before[2], "champion_start"] and returns.shape[1] == before[1].shape[1] + 1
    root = lineage_root(run_dir, result.champion["pod_id"])
    start = start_of(train, PARAMS, root_args(AGENT, root, train, 5))
    _, _, expected = score_policy(start, valid, PARAMS, annualization=TRADING_DAYS_PER_YEAR)
    assert np.allclose(returns[:, -1], np.asarray(expected.daily)) and len(when) == len(expected.daily)
