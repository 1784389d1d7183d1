"""The population learner is P separate PPO runs, pod by pod, done as one batched program.

Each pod of a population must end a round with the weights, normalization statistics and Adam
state that ``agents.ppo.train`` gives the same pod alone (same seed, hyper-parameters, starting
point), to float rounding: batched matmuls round differently from per-pod ones, nothing else may
differ. Different learning rates, gammas, clips and ``update_epochs`` (the masked one) are mixed in
one population on purpose; so are a shorter round, warm starts, annealing and ``target_kl``.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from agents import ppo
from agents.checkpoint import Checkpoint
from agents.networks import NetworkConfig, PerAssetActorCritic
from agents.normalize import ObsNormalizer
from agents.policy import Policy
from agents.population import sizing
from agents.population.graphs import StepGraph
from agents.population.learner import PodSetup, Population, shape_key
from agents.population.stacked import StackedAdam, StackedNets, StackedNorm
from agents.tournament.pod import score_policies, score_policy
from agents.training import make_optimizer, policy_for_env
from backtests.engine import PolicyBatch
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.errors import ConfigError
from data.toy import toy_market
from envs.execution import FRICTIONLESS
from envs.observation import NUM_GLOBAL, asset_width
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

N = 8
BASE = {"num_steps": 16, "hidden": 8, "embed": 4, "num_minibatches": 2, "total_steps": 3 * 16 * N}
ATOL = 1e-5


TOY_MARKET = {
    "num_steps": 600,
    "num_assets": 3,
    "num_features": 4,
    "bars_per_session": 60,
    "seed": 1,
}  # `market`


def _params(**kw) -> EnvParams:
    return EnvParams(decision_interval=5, episode_len=16, **kw)


def _pods() -> list[ppo.PPOArgs]:
    return [
        ppo.PPOArgs(seed=1, learning_rate=3e-3, update_epochs=1, **BASE),
        ppo.PPOArgs(
            seed=2,
            learning_rate=1e-2,
            update_epochs=3,
            gamma=0.8,
            gae_lambda=0.95,
            clip_coef=0.1,
            ent_coef=0.01,
            max_grad_norm=0.3,
            **BASE,
        ),  # fmt: skip
        ppo.PPOArgs(seed=3, learning_rate=5e-3, update_epochs=2, **{**BASE, "total_steps": 2 * 16 * N}),
    ]


def _population(market, params, config, num_pods) -> Population:
    return Population(
        lambda n: TradingVecEnv(market, params, num_envs=n, seed=0),
        config=config,
        num_pods=num_pods,
        num_envs=N,
        num_steps=BASE["num_steps"],
        num_minibatches=BASE["num_minibatches"],
    )


def _assert_same_run(alone, pod):
    wa, wp = alone.policy.net.state_dict(), pod.policy.net.state_dict()
    for name in wa:
        torch.testing.assert_close(wp[name], wa[name], atol=ATOL, rtol=1e-4, msg=name)
    na, np_ = alone.policy.obs_norm.to_spec(), pod.policy.obs_norm.to_spec()
    assert na["count"] == np_["count"]
    for key in ("mean_global", "var_global", "mean_asset", "var_asset"):
        torch.testing.assert_close(torch.tensor(np_[key]), torch.tensor(na[key]), atol=1e-5, rtol=1e-5)
    sa, sp = alone.optimizer_state["state"], pod.optimizer_state["state"]
    assert sa.keys() == sp.keys()
    for i in sa:
        assert float(sa[i]["step"]) == float(sp[i]["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sp[i][key], sa[i][key], atol=1e-6, rtol=1e-3)
    assert (alone.env_steps, alone.updates) == (pod.env_steps, pod.updates)
    assert [set(r) for r in alone.history] == [set(r) for r in pod.history]
    for key in ("losses/policy_loss", "losses/value_loss", "charts/mean_reward", "losses/clipfrac"):
        assert pod.history[-1][key] == pytest.approx(alone.history[-1][key], rel=1e-3, abs=1e-5)


def test_a_round_equals_separate_runs_pod_by_pod_then_warm_starts_continue_alike(market):
    params = _params()
    make_env = lambda n: TradingVecEnv(market, params, num_envs=n, seed=0)  # noqa: E731
    pods = _pods()
    alone = [ppo.train(args, make_env(N)) for args in pods]
    pop = _population(market, params, alone[0].policy.config, len(pods))
    together = pop.train(pop.fresh_pods(pods))
    for a, p in zip(alone, together, strict=True):
        _assert_same_run(a, p)
    # Masked epochs: each pod's Adam took exactly its own number of steps (updates x epochs x 2).
    assert [float(r.optimizer_state["state"][0]["step"]) for r in together] == [6.0, 18.0, 8.0]

    # Round 2: children of round 1 (weights + optimizer state), with annealing and target_kl.
    children = [
        dataclasses.replace(pods[0], seed=11, anneal_lr=True),
        dataclasses.replace(pods[1], seed=12, target_kl=0.005),
        dataclasses.replace(pods[2], seed=13),
    ]
    parents = [r.checkpoint() for r in alone]
    # (deep copies: a warm start moves the Adam step tensors it is given)
    alone2 = [
        ppo.train(a, make_env(N), init=copy.deepcopy(c)) for a, c in zip(children, parents, strict=True)
    ]
    setups = [
        PodSetup(*pop.starting_policy(a, copy.deepcopy(c)), a) for a, c in zip(children, parents, strict=True)
    ]
    together2 = pop.train(setups)
    for a, p in zip(alone2, together2, strict=True):
        _assert_same_run(a, p)
    assert together2[0].history[-1]["charts/learning_rate"] == pytest.approx(children[0].learning_rate / 3)


@pytest.mark.parametrize("fast_step", ["auto", "off"])  # the native kernel on a CPU, and the eager step
def test_a_pod_gone_non_finite_fails_alone_and_the_others_train_as_alone(market, fast_step):
    params = _params()
    make_env = lambda n: TradingVecEnv(market, params, num_envs=n, seed=0, fast_step=fast_step)  # noqa: E731
    pods = _pods()
    alone = [ppo.train(args, make_env(N)) for args in pods]
    pop = Population(
        make_env,
        config=alone[0].policy.config,
        num_pods=len(pods),
        num_envs=N,
        num_steps=BASE["num_steps"],
        num_minibatches=BASE["num_minibatches"],
    )
    assert pop.env.step_kernel == ("native" if fast_step == "auto" else "eager")
    setups = pop.fresh_pods(pods)
    with torch.no_grad():
        setups[1].policy.net.actor_cash.weight.fill_(float("nan"))  # its every action is NaN
    together = pop.train(setups)  # no ActionError: the env batch never sees the NaN actions
    assert pop.finite() == [True, False, True]
    _assert_same_run(alone[0], together[0])
    _assert_same_run(alone[2], together[2])


def test_deep_encoders_and_share_actions_too(market):
    params = _params(action_mode="shares")
    pods = [dataclasses.replace(a, asset_layers=2, rebalance_rate=1.0) for a in _pods()[:2]]
    alone = [ppo.train(a, TradingVecEnv(market, params, num_envs=N, seed=0)) for a in pods]
    pop = _population(market, params, alone[0].policy.config, 2)
    together = pop.train(pop.fresh_pods(pods))
    for a, p in zip(alone, together, strict=True):
        _assert_same_run(a, p)


def test_pods_of_other_shapes_do_not_fit(market):
    params = _params()
    args = _pods()[0]
    pop = _population(market, params, _pods_config(market, params, args), 1)
    other = dataclasses.replace(args, num_minibatches=4)
    with pytest.raises(ValueError, match="does not fit"):
        pop.load(0, PodSetup(*pop.starting_policy(other), other))
    assert shape_key(args, pop.config) != shape_key(other, pop.config)
    # A windowed policy (a direct pod's trade window) is not PPO's: refused in one line.
    windowed = dataclasses.replace(pop.config, trade_window=0.05)
    pop_w = _population(market, params, windowed, 1)
    with pytest.raises(ConfigError, match="trade window"):
        pop_w.load(0, PodSetup(Policy(windowed), None, args))
    # Per-pod hyper-parameters do not change the shape.
    assert shape_key(args, pop.config) == shape_key(
        dataclasses.replace(args, learning_rate=0.1, update_epochs=7), pop.config
    )


def _pods_config(market, params, args) -> NetworkConfig:
    return policy_for_env(None, TradingVecEnv(market, params, num_envs=1), args, "ppo")[0].config


def test_the_population_trades_under_the_envs_execution_model(market):
    """Spread, the participation cap and square-root impact act inside the population's env step as in
    each pod's separate run (strong settings, so each of them binds), and they matter: the same pods
    without them trade otherwise (other costs)."""
    params = _params(spread_bps=50.0, max_participation=1e-4, impact_coef=50.0)
    assert params.execution
    pods = _pods()[:2]
    config = _pods_config(market, params, pods[0])
    pop = _population(market, params, config, len(pods))
    together = pop.train(pop.fresh_pods(pods))
    alone = [ppo.train(a, TradingVecEnv(market, params, num_envs=N, seed=0)) for a in pods]
    for single, pod in zip(alone, together, strict=True):
        _assert_same_run(single, pod)
        assert pod.history[-1]["charts/mean_cost"] == pytest.approx(
            single.history[-1]["charts/mean_cost"], rel=1e-4
        )
    free = _population(market, _params(**FRICTIONLESS), config, len(pods))
    without = free.train(free.fresh_pods(pods))
    for pod, frictionless in zip(together, without, strict=True):
        assert pod.history[0]["charts/mean_cost"] != pytest.approx(
            frictionless.history[0]["charts/mean_cost"]
        )


def test_exploit_copies_exactly_the_entrys_weights_and_optimizer_state(market, tmp_path):
    """A leaderboard entry's checkpoint, copied into a slot and read back, is the checkpoint bit for bit."""
    params = _params()
    args = _pods()[1]
    trained = ppo.train(args, TradingVecEnv(market, params, num_envs=N, seed=0))
    trained.checkpoint().save(tmp_path / "entry")
    entry = Checkpoint.load(tmp_path / "entry")
    pop = _population(market, params, entry.policy.config, 3)
    policy, state = pop.starting_policy(args, entry)
    pop.load(2, PodSetup(policy, state, args))
    copied, copied_state = pop.export(2, policy, args.learning_rate)
    want = entry.policy.net.state_dict()
    assert all(torch.equal(copied.net.state_dict()[k], want[k]) for k in want)
    assert copied.obs_norm.to_spec() == entry.policy.obs_norm.to_spec()
    for i, per in entry.optimizer_state["state"].items():
        got = copied_state["state"][i]
        assert float(got["step"]) == float(per["step"]) > 0
        assert torch.equal(got["exp_avg"], per["exp_avg"]) and torch.equal(
            got["exp_avg_sq"], per["exp_avg_sq"]
        )
    # And a torch Adam accepts it (what the next separate round would do with the pod's file).
    make_optimizer(copied, args.learning_rate, copied_state)


def test_batched_validation_scores_equal_score_policy(market):
    params = _params()
    pods = _pods()
    pop = _population(market, params, _pods_config(market, params, pods[0]), 3)
    results = pop.train(pop.fresh_pods(pods))
    valid = toy_market(num_steps=240, num_assets=3, num_features=4, bars_per_session=60, seed=7)
    names = ("a", "b", "c")
    batched = score_policies(
        PolicyBatch(names, pop.batched_act([0, 1, 2])),
        valid,
        params,
        fitness="sharpe",
        annualization=TRADING_DAYS_PER_YEAR,
    )
    for result, (score, metrics, series) in zip(results, batched, strict=True):
        want_score, want_metrics, want_series = score_policy(
            result.policy, valid, params, fitness="sharpe", annualization=TRADING_DAYS_PER_YEAR
        )
        assert score == pytest.approx(want_score, rel=1e-4, abs=1e-6)
        assert metrics.keys() == want_metrics.keys()
        for key, value in want_metrics.items():
            assert (metrics[key] is None) == (value is None)
            if value is not None:
                assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key
        torch.testing.assert_close(
            torch.tensor(series.daily), torch.tensor(want_series.daily), atol=1e-7, rtol=1e-4
        )
    # A subset of the pods: rows in the order asked for.
    (one,) = score_policies(
        PolicyBatch(("c",), pop.batched_act([2])), valid, params, annualization=TRADING_DAYS_PER_YEAR
    )
    assert one[0] == pytest.approx(batched[2][0], rel=1e-6)


# --- the stacked pieces, against the modules they batch ------------------------------------------------
def test_stacked_networks_match_each_pods_network():
    for layers in (0, 1, 2):
        config = NetworkConfig(num_assets=3, num_features=4, embed=4, hidden=8, asset_layers=layers)
        nets = []
        for seed in range(3):
            torch.manual_seed(seed)
            nets.append(PerAssetActorCritic(config))
        stacked = StackedNets(config, 3, "cpu")
        for slot, net in enumerate(nets):
            stacked.load(slot, net)
        obs = torch.randn(3, 5, config.obs_dim)
        with torch.no_grad():
            mean, value = stacked.forward_packed(*stacked.pack(obs))
            v_only = stacked.value_packed(*stacked.pack(obs))
            for slot, net in enumerate(nets):
                want_mean, want_value = net(obs[slot])
                torch.testing.assert_close(mean[slot], want_mean, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(value[slot], want_value, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(v_only[slot], want_value, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(stacked.std()[slot], net.std())
                assert all(torch.equal(stacked.state_dict(slot)[k], v) for k, v in net.state_dict().items())


def test_stacked_normalizers_match_obs_normalizer_and_masked_pods_keep_theirs():
    x = asset_width(4)
    norms = [ObsNormalizer(NUM_GLOBAL, x) for _ in range(3)]
    stacked = StackedNorm(3, 4, "cpu")
    gen = torch.Generator().manual_seed(0)
    for step in range(4):
        obs = torch.randn(3, 16, NUM_GLOBAL + 3 * x, generator=gen) * 3 + step
        active = torch.tensor([True, step % 2 == 0, True])
        stacked.update(obs, active)
        for slot, norm in enumerate(norms):
            if bool(active[slot]):
                norm.update(obs[slot])
    probe = torch.randn(3, 5, NUM_GLOBAL + 3 * x, generator=gen) * 5
    out = stacked.normalize(probe)
    for slot, norm in enumerate(norms):
        assert float(stacked.count[slot]) == norm.count
        torch.testing.assert_close(out[slot], norm.normalize(probe[slot]), atol=1e-5, rtol=1e-5)
    assert norms[1].count == 32.0  # the masked pod only took its active steps


def test_stacked_adam_matches_torch_adam_per_pod_and_masked_pods_stay_bitwise():
    config = NetworkConfig(num_assets=3, num_features=4, embed=4, hidden=8)
    policies = [Policy(config) for _ in range(3)]
    lrs = [1e-3, 3e-2, 5e-3]
    optimizers = [make_optimizer(p, lr, None) for p, lr in zip(policies, lrs, strict=True)]
    stacked = StackedNets(config, 3, "cpu")
    for slot, policy in enumerate(policies):
        stacked.load(slot, policy.net)
    adam = StackedAdam(stacked)
    gen = torch.Generator().manual_seed(1)
    for step in range(3):
        grads = [torch.randn(t.shape, generator=gen) for t in stacked.tensors()]
        active = torch.tensor([True, True, step != 1])
        before = [t.detach().clone() for t in stacked.tensors()]
        adam.update(grads, torch.tensor(lrs, dtype=torch.float64), active)
        for slot, (policy, opt) in enumerate(zip(policies, optimizers, strict=True)):
            if not bool(active[slot]):
                assert all(
                    torch.equal(t[slot], b[slot]) for t, b in zip(stacked.tensors(), before, strict=True)
                )
                continue
            for param, grad in zip(policy.net.parameters(), grads, strict=True):
                param.grad = grad[slot].clone()
            opt.step()
    for slot, policy in enumerate(policies):
        for name, value in policy.net.named_parameters():
            torch.testing.assert_close(
                stacked.params[name][slot].detach(), value.detach(), atol=1e-7, rtol=1e-6
            )
    assert adam.step.tolist() == [3.0, 3.0, 2.0]


def _ops_outside_graphs(pop, setups) -> dict[str, int]:
    """Tensor ops ``pop.train`` dispatches in its rollout and update outside the graphed steps."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"rollout": 0, "update": 0}
    where = [None]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if where[-1] is not None:
                counts[where[-1]] += 1
            return func(*args, **(kwargs or {}))

    def under(label, fn):
        def wrapped(*a, **k):
            where.append(label)
            try:
                return fn(*a, **k)
            finally:
                where.pop()

        return wrapped

    for step in (pop.act_step, pop.post_step, pop.advantage_step, *pop.mb_steps.values()):
        step.fn = under(None, step.fn)
    pop._rollout = under("rollout", pop._rollout)
    pop._update = under("update", pop._update)
    pop.env.step = under(None, pop.env.step)
    with Count():
        pop.train(setups)
    return counts


def test_per_pod_work_outside_the_graphs_is_per_rollout_and_epoch_not_per_step(market):
    """What a GPU pays as launches: each pod's draws are one per rollout (noise) and one per epoch
    (its minibatch order), so a population of more pods dispatches only a few more ops, however many
    steps its rollout has (docs/benchmarks.md, "Population backend": benchmarks/population_launches.py)."""
    params = _params()
    args = ppo.PPOArgs(seed=0, update_epochs=2, **{**BASE, "total_steps": 16 * N})  # one update
    config = _pods_config(market, params, args)
    counts = {}
    for num_pods in (2, 6):
        pop = _population(market, params, config, num_pods)
        setups = pop.fresh_pods([dataclasses.replace(args, seed=s) for s in range(num_pods)])
        counts[num_pods] = _ops_outside_graphs(pop, setups)
    extra = {k: counts[6][k] - counts[2][k] for k in ("rollout", "update")}
    # 4 more pods: a noise draw each per rollout (a few ops), an order each per epoch; a per-step loop
    # over the pods would add 4 x 16 steps x a few ops to the rollout.
    assert extra["rollout"] <= 4 * 4, counts
    assert extra["update"] <= 4 * 4 * args.update_epochs, counts


def test_step_graph_is_the_plain_function_on_a_cpu():
    calls = []
    step = StepGraph(lambda: calls.append(1), torch.device("cpu"), enabled=True, name="probe")
    for _ in range(3):
        step()
    assert calls == [1, 1, 1] and step.mode == "eager" and not step.enabled


# Fake timings of (pods, envs per pod): the sizing rule is tested on known answers.
RATES = {
    256: {8: 1.0, 16: 2.0, 32: 3.0, 64: 3.3},  # 64 pods gains 1.1x: stop at 32 (3.0)
    512: {8: 1.5, 16: 3.0, 32: 4.0, 64: 4.2},  # best 4.0 >= 1.15 x 3.0: 512 envs pays
    1024: {8: 2.0, 16: 4.0, 32: 4.5},  # best 4.0 (32 gains 1.125x) < 1.15 x 4.0: 1024 does not
}


def _fake_probe(probed, rates=RATES):
    def probe(pods, envs):
        probed.append((pods, envs))
        return rates[envs][pods] * 1e6

    return probe


def test_the_shape_probe_explores_envs_per_pod_and_pods_by_its_rule(monkeypatch):
    per_pod = lambda envs: envs * 1000  # noqa: E731
    # A CPU: no probe; the run's num_envs and the CPU default (or what is pinned).
    cpu = sizing.choose_shape(torch.device("cpu"), 256, per_pod, lambda p, n: 1 / 0)
    assert (cpu.num_pods, cpu.num_envs) == (sizing.CPU_POPULATION, 256)
    cpu = sizing.choose_shape(torch.device("cpu"), 256, per_pod, lambda p, n: 1 / 0, pods=3, envs=64)
    assert (cpu.num_pods, cpu.num_envs, cpu.fixed) == (3, 64, True)
    # A GPU whose free memory holds 10^8 bytes / 0.6 for pods: 390 pods of 256 envs, 97 of 1024.
    monkeypatch.setattr(sizing, "memory_cap", lambda device, per_pod: 10**8 // per_pod)
    cuda = torch.device("cuda")
    probed = []
    chosen = sizing.choose_shape(cuda, 256, per_pod, _fake_probe(probed))
    assert (chosen.num_pods, chosen.num_envs, chosen.memory_cap) == (32, 512, 195)
    assert probed == [(8, 256), (16, 256), (32, 256), (64, 256)] + [
        (8, 512),
        (16, 512),
        (32, 512),
        (64, 512),
    ] + [
        (8, 1024),
        (16, 1024),
        (32, 1024),
    ]
    line = chosen.describe()
    assert "32 pods x 512 envs" in line and "32x512 4.00M" in line and "memory fits 195" in line
    # Pods pinned: only the envs per pod are explored (each doubling paid here: 2.0, 3.0, 4.0).
    probed.clear()
    pinned = sizing.choose_shape(cuda, 256, per_pod, _fake_probe(probed), pods=16)
    assert (pinned.num_pods, pinned.num_envs) == (16, 1024) and probed == [(16, 256), (16, 512), (16, 1024)]
    assert "set: pods" in pinned.describe()
    # Envs pinned: only the pods are explored.
    probed.clear()
    pinned = sizing.choose_shape(cuda, 256, per_pod, _fake_probe(probed), envs=1024)
    assert (pinned.num_pods, pinned.num_envs) == (16, 1024) and probed == [(8, 1024), (16, 1024), (32, 1024)]
    # Both pinned: no probe at all.
    fixed = sizing.choose_shape(cuda, 256, per_pod, lambda p, n: 1 / 0, pods=8, envs=512)
    assert (fixed.num_pods, fixed.num_envs, fixed.fixed) == (8, 512, True)
    assert "set: pods, envs_per_pod" in fixed.describe()
    # A short round caps the envs per pod: at least MIN_UPDATES_PER_ROUND updates of 32 x N samples.
    assert sizing.max_envs_per_pod(32, 250_000) == sizing.MAX_ENVS_PER_POD
    assert sizing.max_envs_per_pod(32, 40_000) == 312
    assert sizing.envs_choices(256, max_envs=312) == [256] and sizing.envs_choices(256, 512) == [512]
    probed.clear()
    short = sizing.choose_shape(cuda, 256, per_pod, _fake_probe(probed), max_envs=312)
    assert (short.num_pods, short.num_envs) == (32, 256) and {n for _, n in probed} == {256}

    # The memory estimate too kind at 1024 envs: the shape that fit is kept.
    def out_of_memory(pods, envs):
        if envs == 1024:
            raise torch.OutOfMemoryError("probe")
        return RATES[envs][pods]

    assert sizing.choose_shape(cuda, 256, per_pod, out_of_memory).num_envs == 512
    # A small memory caps the pods below the probe's start.
    monkeypatch.setattr(sizing, "memory_cap", lambda device, per_pod: 5)
    small = sizing.choose_shape(cuda, 256, per_pod, lambda p, n: float(n), max_envs=256)
    assert (small.num_pods, small.num_envs) == (5, 256)


def test_the_sizing_probe_times_the_learner_and_changes_nothing(market):
    params = _params()
    args = _pods()[0]
    pop = _population(market, params, _pods_config(market, params, args), 2)
    policy, state = pop.starting_policy(args)
    pop.load(0, PodSetup(policy, state, args))
    before = [t.detach().clone() for t in pop.nets.tensors()]
    rate = sizing.learner_rate(pop, update_epochs=4, repeats=1)
    assert rate > 0 and rate != float("inf")
    assert all(torch.equal(a, b) for a, b in zip(before, pop.nets.tensors(), strict=True))
    assert pop.adam.step.tolist() == [0.0, 0.0]


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: CUDA graphs are recorded only on a GPU"
)
def test_cuda_graphs_replay_the_eager_steps(market):
    """On a GPU the graphed round equals the eager round, and both equal the separate runs."""
    params = _params()
    pods = _pods()
    gpu_market = market.to("cuda")
    config = _pods_config(gpu_market, params, pods[0])
    rounds = []
    for graphs in (False, True):
        pop = Population(
            lambda n: TradingVecEnv(gpu_market, params, num_envs=n, device="cuda", seed=0),
            config=config,
            num_pods=len(pods),
            num_envs=N,
            num_steps=BASE["num_steps"],
            num_minibatches=BASE["num_minibatches"],
            graphs=graphs,
        )
        rounds.append(pop.train(pop.fresh_pods(pods)))
        assert pop.act_step.mode == ("cuda graph" if graphs else "eager")
        assert pop.post_step.mode == pop.advantage_step.mode == pop.act_step.mode
        assert all(step.mode == pop.act_step.mode for step in pop.mb_steps.values())
    alone = [ppo.train(a, TradingVecEnv(gpu_market, params, num_envs=N, device="cuda", seed=0)) for a in pods]
    for eager, graphed, single in zip(*rounds, alone, strict=True):
        _assert_same_run(eager, graphed)
        _assert_same_run(single, graphed)
