"""The direct learner on the population backend (agents.population.direct): each pod of a population
is the run ``agents.direct.train`` makes for it (the slow reference), a tournament of direct pods
runs on the population backend on the CPU, and at the same seeds and budget its board and champion
are the local backend's."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from helpers import SMALL_DIRECT, SMALL_ENV, ppo_market
from test_tournament_cli import CONFIG
from test_tournament_run import run_tournament

from agents import direct
from agents.args import OBJECTIVES
from agents.checkpoint import Checkpoint
from agents.policy import Policy
from agents.population.direct import pod_objectives, start_direct_pod, train_population
from agents.population.pods import PodSetup
from agents.population.sizing import CPU_POPULATION, DIRECT_GPU_POPULATION, direct_shape
from agents.tournament.backend_choice import check_backend_args, make_backend, resolve_backend
from agents.tournament.leaderboard import read_pods
from agents.tournament.pod import VALID_RETURNS, learner_round
from agents.tournament.population_backend import PopulationBackend
from agents.tournament.settings import TournamentArgs
from agents.training import policy_for_env
from app.cli import main
from backtests import engine
from data.errors import ConfigError
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

ENV = dict(SMALL_ENV)
#: (The excess Sharpe: its curves agree to 1e-5 between a pod alone and in a population, the tight
#: check of the batching; the active objective's own test below agrees to 1e-3.)
AGENT = {**SMALL_DIRECT, "objective": "excess_sharpe"}
#: Pods differing in what the tournament varies per pod (and one with its own budget, one with no bar
#: for fine-tuning to clear over its start).
PODS = (
    {"seed": 1, "horizon": 8, "learning_rate": 3e-3, "weight_decay": 1e-3},
    {"seed": 2, "horizon": 12, "learning_rate": 1e-2, "weight_decay": 1e-4, "holdout_margin": 0.0},
    {"seed": 3, "horizon": 5, "learning_rate": 2e-2, "weight_decay": 1e-2, "total_steps": 200},
)


def _population_vs_separate(train, params, args, inits):
    """Each pod trained alone by ``direct.train`` and all of them as one population."""
    env = TradingVecEnv(train, params, num_envs=1, seed=0)
    # (a copy each: torch's optimizer takes a loaded state's tensors as they are, and steps them)
    alone = [direct.train(a, env, init=copy.deepcopy(init)) for a, init in zip(args, inits, strict=True)]
    setups = []
    for a, init in zip(args, inits, strict=True):
        policy, state = policy_for_env(init, env, a, "direct")
        if init is None:
            start_direct_pod(policy, a, train, params.decision_interval)
        setups.append(PodSetup(policy, state, a))
    together, stack = train_population(setups, train, params)
    return alone, together, stack


def _same_run(alone, together, objective_abs: float = 1e-5):
    for one, pod in zip(alone, together, strict=True):
        assert (pod.env_steps, pod.updates, len(pod.history)) == (
            one.env_steps,
            one.updates,
            len(one.history),
        )
        mine, theirs = pod.policy.state_dict(), one.policy.state_dict()
        assert all(torch.allclose(mine[k], theirs[k], atol=1e-5) for k in theirs)
        if one.history:
            assert pod.history[-1].keys() == one.history[-1].keys()
            assert pod.history[-1]["losses/objective"] == pytest.approx(
                one.history[-1]["losses/objective"], abs=objective_abs
            )
        assert pod.optimizer_state["state"].keys() == one.optimizer_state["state"].keys()
        for i, entry in one.optimizer_state["state"].items():
            assert float(pod.optimizer_state["state"][i]["step"]) == float(entry["step"])
            assert torch.allclose(pod.optimizer_state["state"][i]["exp_avg"], entry["exp_avg"], atol=1e-5)


def test_each_pod_of_a_population_is_its_own_direct_run():
    """From the ridge start and from a parent's weights and AdamW state (a child), pods of different
    horizons, learning rates, weight decays, seeds and budgets end where ``direct.train`` ends each of
    them: weights, moments, step counts, env-steps and curves."""
    train, _valid, _test = ppo_market().split_sessions(0.6, 0.2)
    params = EnvParams(decision_interval=5)
    args = [direct.DirectArgs(**{**AGENT, "total_steps": 300, **pod}) for pod in PODS]
    alone, together, stack = _population_vs_separate(train, params, args, [None] * 3)
    _same_run(alone, together)
    assert stack.finite() == [True] * 3
    obs = torch.randn(3, alone[0].policy.obs_dim).abs()
    acts = stack.batched_act([2, 0])(obs[:2])
    assert torch.allclose(acts[0], alone[2].policy.act(obs[:1])[0], atol=1e-5)
    # Children: the parents' weights and optimizer states, new hyper-parameters.
    inits = [Checkpoint(r.policy, r.optimizer_state) for r in alone]
    children = [
        direct.DirectArgs(**{**AGENT, "total_steps": 150, **pod, "seed": 10 + i})
        for i, pod in enumerate(PODS)
    ]
    children[2] = dataclasses.replace(children[2], total_steps=1)  # (the held-out run alone: no update)
    alone, together, _ = _population_vs_separate(train, params, children, inits)
    _same_run(alone, together)
    # A round with no update at all (the budget's last, shorter than the held-out run): the pods hand
    # back their parents' optimizer states.
    idle = [dataclasses.replace(c, total_steps=1) for c in children]
    _same_run(*_population_vs_separate(train, params, idle, inits)[:2])


@pytest.mark.parametrize("objective", ["active_sharpe", "invested_sharpe"])
def test_pods_climbing_the_exposure_objectives_are_their_own_direct_runs(objective):
    """Under the objectives whose benchmark follows the book's exposure (``"active_sharpe"``: the
    excess over equal weight at that exposure; ``"invested_sharpe"``: the net return with the cash
    share earning equal weight's) the population's pods end where ``direct.train`` ends each of them."""
    train, _valid, _test = ppo_market().split_sessions(0.6, 0.2)
    params = EnvParams(decision_interval=5)
    args = [direct.DirectArgs(**{**AGENT, "total_steps": 200, **pod, "objective": objective}) for pod in PODS]
    alone, together, _ = _population_vs_separate(train, params, args, [None] * 3)
    # The first update's gradients agree to float rounding (relative 4e-7), but this objective's are
    # about 20 times the excess Sharpe's (a smaller spread of returns), and the curves of a few
    # updates later agree to about 3e-4, not 1e-5; the kept weights still agree to 1e-5.
    _same_run(alone, together, objective_abs=1e-3)
    plain = direct.DirectArgs(**{**AGENT, "total_steps": 200, **PODS[1]})
    other = direct.train(plain, TradingVecEnv(train, params, num_envs=1, seed=0)).policy.state_dict()
    mine = alone[1].policy.state_dict()
    assert not all(torch.equal(mine[k], other[k]) for k in other)  # the objective reached the gradient


def test_fresh_statistics_fold_only_each_pods_own_steps():
    """Without the ridge start a fresh pod fits its observation statistics on its first updates:
    pods of different horizons and ``norm_updates`` fit what each alone fits."""
    train, _valid, _test = ppo_market().split_sessions(0.6, 0.2)
    params = EnvParams(decision_interval=5)
    args = [
        direct.DirectArgs(
            **{**AGENT, "total_steps": 200, **pod, "linear_start": False, "norm_updates": 2 + i}
        )
        for i, pod in enumerate(PODS)
    ]
    alone, together, _ = _population_vs_separate(train, params, args, [None] * 3)
    _same_run(alone, together)
    for one, pod in zip(alone, together, strict=True):
        assert pod.policy.obs_norm.count == one.policy.obs_norm.count > 0
        assert torch.allclose(pod.policy.obs_norm.var_asset, one.policy.obs_norm.var_asset, rtol=1e-5)


def test_pod_objectives_are_the_learners_objective_per_pod():
    gen = torch.Generator().manual_seed(0)
    net, equal = torch.randn(3, 4, 6, generator=gen), torch.randn(3, 4, 6, generator=gen)
    lengths = torch.tensor([6, 2, 5])
    for kind in OBJECTIVES:
        got = pod_objectives(net, equal, kind, lengths)
        want = [
            direct.objective_of(net[p, :, :n], equal[p, :, :n], kind) for p, n in enumerate(lengths.tolist())
        ]
        assert torch.allclose(got, torch.stack(want), atol=1e-6)


def test_auto_runs_the_configured_learner_and_population_refuses_others():
    """``auto`` picks the population backend only for a learner it trains; forcing it with another
    is a one-line config error before anything is written."""
    assert resolve_backend("auto", "cuda", algo="direct") == "population"
    assert resolve_backend("auto", "cuda", algo="ppo") == "population"
    assert resolve_backend("auto", "cuda", algo="sac") == "local"
    assert resolve_backend("auto", "cpu", algo="direct") == "local"
    backend = make_backend("population", workers=0, algo="direct")
    assert isinstance(backend, PopulationBackend) and backend.shape.algo == "direct"
    assert check_backend_args(TournamentArgs(backend="population", algo="direct"), "cpu") == "population"
    for build in (
        lambda: TournamentArgs(backend="population", algo="sac"),
        lambda: make_backend("population", algo="sac"),
    ):
        with pytest.raises(ConfigError, match="trains ppo and direct pods only") as err:
            build()
        assert "\n" not in str(err.value)


def _run(tmp_path, name, windows_ppo, **kw):
    train, valid = windows_ppo
    args = TournamentArgs(
        leaderboard_size=3, round_steps=200, budget_steps=200 * 6, workers=0, seed=5, algo="direct",
        backend="population", pods=3, **kw,
    )  # fmt: skip
    return run_tournament(tmp_path / name, train, valid, args=args, env=ENV, agent=AGENT, **kw_of(name))


def kw_of(name):
    """The reference run: the same backend and schedule, each pod trained alone by the local
    backend's round (``learner_round``, ``direct.train`` per pod)."""
    if name != "per-pod":
        return {}
    return {"round_fn": per_pod_round, "backend": PopulationBackend(3, workers=0, algo="direct")}


def per_pod_round(task, ctx):
    """``learner_round`` under another name: the population backend then runs it pod by pod."""
    return learner_round(task, ctx)


def test_a_population_tournament_of_direct_pods_reads_as_the_local_one(tmp_path, windows_ppo):
    """Two populations of 3 pods (fresh pods, then children of the board), batched and pod by pod
    through the local backend's round under the same schedule: the boards agree pod for pod
    (hyper-parameters, parents, env-steps) and the champion is the same pod. Tolerance 1e-3 on the
    annualized validation Sharpe: the weights agree to float rounding (~1e-6, the tests above),
    which moves the Sharpe of ~40 validation decisions by far less; another pod or another learner
    differs by more than 0.1. (The local backend's own schedule draws later pods from other boards:
    the demo's comparison at one budget is in docs/benchmarks.md.)"""
    batched, alone = _run(tmp_path, "batched", windows_ppo), _run(tmp_path, "per-pod", windows_ppo)
    pods_batched, pods_alone = read_pods(batched.run_dir), read_pods(alone.run_dir)
    assert len(pods_batched) == len(pods_alone) >= 4
    assert any(p["parent_id"] is not None for p in pods_batched)
    keys = ("pod_id", "parent_id", "hparams", "env_steps")
    for a, b in zip(pods_batched, pods_alone, strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        assert a["score"] == pytest.approx(b["score"], abs=1e-3)
    assert batched.champion["pod_id"] == alone.champion["pod_id"]
    assert batched.champion["score"] == pytest.approx(alone.champion["score"], abs=1e-3)
    _check_champion(batched.run_dir, windows_ppo[1])
    for pod in pods_batched:
        names = {f.name for f in (batched.run_dir / "pods" / pod["pod_id"]).iterdir()}
        assert {"policy.safetensors", "optimizer.safetensors", "curve.parquet", VALID_RETURNS} <= names


def _check_champion(run_dir, valid):
    champion = Policy.load(run_dir / "champion")
    assert champion.meta.algo == "direct" and champion.config.linear_skip
    result = engine.run_backtest(valid, EnvParams(decision_interval=5), {"champion": champion})
    assert torch.isfinite(result.equity).all() and math.isfinite(float(result.equity[-1, 0]))


def test_a_config_forcing_the_population_backend_on_sac_is_one_line(home, tmp_path, capsys):
    path = tmp_path / "sac.toml"
    path.write_text(CONFIG.replace('algo = "ppo"', 'algo = "sac"') + 'backend = "population"\n')
    assert main(["train", "--tournament", "--config", str(path), "--run", "s", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pods only" in err and "sac" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not any(home.rglob("leaderboard.sqlite"))


def test_a_direct_population_is_sized_without_a_probe():
    cpu, gpu = direct_shape(torch.device("cpu"), 8), direct_shape(torch.device("cuda"), 8)
    assert (cpu.num_pods, gpu.num_pods) == (CPU_POPULATION, DIRECT_GPU_POPULATION) and not cpu.probe
    assert "direct learner's default" in gpu.describe() and "CPU default" in cpu.describe()
    pinned = direct_shape(torch.device("cuda"), 8, pods=5)
    assert pinned.num_pods == 5 and pinned.describe().endswith("(set: pods)")
