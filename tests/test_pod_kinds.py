"""Pod kinds of the direct tournament (agents.tournament.search_space.DIRECT_KINDS): fresh pods take
the kinds in turn, a child keeps its parent's, the ``open`` kind's window trades at each session's
first decision only, and a tournament's board holds pods of both kinds, each playing its own way."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import SMALL_DIRECT, SMALL_ENV, ppo_market
from test_tournament_run import run_tournament

from agents.args import DirectArgs
from agents.policy import Policy
from agents.tournament.generator import PodSpec
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import PodTask, RoundContext, open_window, pod_args
from agents.tournament.search_space import DIRECT_KINDS, OPEN_WINDOW, Param, SearchSpace, default_search_space
from agents.tournament.settings import TournamentArgs
from backtests.metrics import TRADING_DAYS_PER_YEAR

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from benchmarks.power_columns import ScoreSoftmax, champion_root_args  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

ENV = dict(SMALL_ENV)
AGENT = dict(SMALL_DIRECT)


def test_fresh_pods_take_the_kinds_in_turn_and_children_keep_theirs():
    space = default_search_space("direct")
    plain = SearchSpace(params=space.params)
    fresh = [space.sample(np.random.default_rng(7), seq) for seq in range(4)]
    assert [h["kind"] for h in fresh] == ["intraday", "open", "intraday", "open"]
    assert {k: fresh[1][k] for k in DIRECT_KINDS[1][1]} == dict(DIRECT_KINDS[1][1])
    # the kinds draw nothing: the sampled hyper-parameters are the plain space's
    assert {k: fresh[0][k] for k in plain.names} == plain.sample(np.random.default_rng(7))
    for parent in fresh:
        child = space.mutate(parent, np.random.default_rng(3))
        assert {k: v for k, v in child.items() if k not in space.names} == {
            k: v for k, v in parent.items() if k not in space.names
        }
    assert "kind" not in SearchSpace(params=(Param("x", 0, 1),)).sample(np.random.default_rng(0), 1)


def test_the_open_window_holds_the_first_decision_of_every_session_and_no_other():
    market = ppo_market()  # 60-bar sessions
    for interval in (1, 5, 15):
        window = open_window(market.time_of_day, interval)
        first = market.time_of_day[0]  # a session's first bar
        assert float(first) <= window < float(market.time_of_day[interval])
    shorter = 1.0 / 35  # a 35-bar session's first bar (an early close) is inside too
    assert shorter <= open_window(market.time_of_day, 5)


def test_pod_args_resolve_the_open_kind(tmp_path):
    market = ppo_market()
    train, valid, _ = market.split_sessions(0.6, 0.2)
    ctx = RoundContext(
        train=train, valid=valid, annualization=252, env=ENV, agent={**AGENT, "linear_start": True}
    )
    hparams = {"kind": "open", **dict(DIRECT_KINDS[1][1])}
    assert hparams["trade_window"] == OPEN_WINDOW
    spec = PodSpec(pod_id="p0", seq=1, seed=1, algo="direct", hparams=hparams)
    args = pod_args(DirectArgs, PodTask(spec=spec, round_steps=10, checkpoint_dir=str(tmp_path)), ctx)
    assert args.trade_window == open_window(train.time_of_day, 5) < 1.0
    assert args.nonlinear_start and args.asset_layers == 1 and args.rebalance_rate == 1.0
    no_start = RoundContext(
        train=train, valid=valid, annualization=252, env=ENV, agent={**AGENT, "linear_start": False}
    )
    spec = PodSpec(pod_id="p0", seq=1, seed=1, algo="direct", hparams=hparams)
    args = pod_args(DirectArgs, PodTask(spec=spec, round_steps=10, checkpoint_dir=str(tmp_path)), no_start)
    assert not args.nonlinear_start


def test_a_direct_tournament_ranks_pods_of_both_kinds(tmp_path):
    train, valid, _test = ppo_market().split_sessions(0.6, 0.2)
    args = TournamentArgs(
        pods=2, leaderboard_size=4, p_fresh=0.0, round_steps=256, budget_steps=1200, workers=0, seed=0,
        algo="direct",
    )  # fmt: skip
    result = run_tournament(
        tmp_path / "kinds", train, valid, args=args, env=ENV, agent=AGENT, annualization=TRADING_DAYS_PER_YEAR
    )
    pods = read_pods(result.run_dir)
    assert [p["hparams"]["kind"] for p in pods[:2]] == ["intraday", "open"]
    assert all(p["status"] != "failed" and p["score"] is not None for p in pods)
    # the power table's champion's way: its lineage's root kind and seed
    root = {p["pod_id"]: p for p in pods}[result.champion["pod_id"]]
    while root["parent_id"] is not None:
        root = next(p for p in pods if p["pod_id"] == root["parent_id"])
    way = champion_root_args(DirectArgs(**AGENT), result.run_dir, result.champion, train, 5)
    assert way.seed == root["seed"] and (way.trade_window < 1.0) == (root["hparams"]["kind"] == "open")
    assert champion_root_args(DirectArgs(**AGENT), result.run_dir, None, train, 5) == DirectArgs(**AGENT)
    for pod in pods:
        policy = Policy.load(result.run_dir / pod["checkpoint"])
        is_open = pod["hparams"]["kind"] == "open"
        assert (policy.config.trade_window < 1.0) == is_open
        assert policy.config.asset_layers == (1 if is_open else 0)
        if pod["parent_id"] is not None:  # a child plays its parent's kind
            parent = next(p for p in pods if p["pod_id"] == pod["parent_id"])
            assert pod["hparams"]["kind"] == parent["hparams"]["kind"]


def test_scores_traded_the_champions_way_hold_after_its_window():
    scores = lambda obs: obs[:, 2:].reshape(obs.shape[0], 3, 4)[..., 2]  # noqa: E731 (a feature)
    head = ScoreSoftmax(scores, 2.0, 0.0, 1.0, 3, trade_window=0.1)
    every = ScoreSoftmax(scores, 2.0, 0.0, 1.0, 3)
    obs = torch.rand(2, 2 + 3 * 4)
    obs[:, 2:].view(2, 3, 4)[..., 0] = torch.tensor([[0.2, 0.3, 0.1], [0.5, 0.0, 0.2]])
    obs[:, 1] = torch.tensor([0.05, 0.5])  # time of day: inside the window, after it
    action = head(obs)
    assert torch.equal(action[0], every(obs)[0])
    assert torch.equal(action[1], torch.tensor([0.5, 0.0, 0.2]))
