"""The training fast paths pinned against slow, plain references: the packed network form,
the normalizer's sum-based statistics, the PPO update with gathered minibatches and fused Adam, and
the compiled minibatch loss."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agents import ppo, training
from agents.networks import NetworkConfig, PerAssetActorCritic
from agents.normalize import ObsNormalizer
from agents.policy import PolicyMeta, gaussian_entropy, gaussian_log_prob
from agents.rollout import Rollout, RolloutState, collect_rollout, compute_gae
from data.toy import toy_market
from envs.vec_env import TradingVecEnv

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("asset_layers", [0, 1])
def test_packed_forward_equals_forward_with_gradients(asset_layers):
    torch.manual_seed(0)
    net = PerAssetActorCritic(NetworkConfig(7, 3, asset_layers=asset_layers))
    obs = torch.randn(33, net.config.obs_dim)
    logits, value = net(obs)
    packed = net.pack(obs)
    p_logits, p_value = net.forward_packed(*packed)
    assert torch.allclose(p_logits, logits, atol=1e-5) and torch.allclose(p_value, value, atol=1e-5)
    params = [p for name, p in net.named_parameters() if name != "log_std"]  # (log_std: not in forward)
    grads = torch.autograd.grad((logits.square().sum() + value.sum()), params)
    p_grads = torch.autograd.grad((p_logits.square().sum() + p_value.sum()), params)
    for g, pg in zip(grads, p_grads, strict=True):
        assert torch.allclose(pg, g, atol=1e-4, rtol=1e-4)
    if asset_layers == 0:  # per-asset inputs asset-minor, pooled inputs weight-free
        assets, pooled = packed
        assert assets.shape == (33, 5, 7) and pooled.shape == (33, 2 * 5 + 1 + 2)
    else:
        assert packed == (obs,)


def test_normalizer_statistics_hold_for_large_offsets():
    # Shifted sums must not lose the variance of a feature far from 0 (cancellation): the first batch
    # is shifted by its own mean, later ones by the running mean. Reference: float64 two-pass.
    gen = torch.Generator().manual_seed(3)
    norm = ObsNormalizer(2, 3)
    batches = [torch.randn(64, 2 + 5 * 3, generator=gen) * 0.5 + 1000.0 for _ in range(5)]
    for b in batches:
        norm.update(b)
    allx = torch.cat(batches).double()
    per = allx[:, 2:].reshape(-1, 3)
    assert torch.allclose(norm.mean_asset.double(), per.mean(0), rtol=1e-6)
    assert torch.allclose(norm.var_asset.double(), per.var(0, unbiased=False), rtol=2e-3)
    assert torch.allclose(norm.var_global.double(), allx[:, :2].var(0, unbiased=False), rtol=2e-3)


def _reference_update(policy, optimizer, obs, rollout, args, generator):
    """The PPO update written plainly (CleanRL's loop): full observations, advanced indexing, the
    network's ordinary forward, per-parameter Adam."""
    adv, ret = compute_gae(
        rollout.rewards, rollout.values, rollout.dones, rollout.next_value, args.gamma, args.gae_lambda
    )
    b_obs = obs.reshape(-1, obs.shape[-1])
    b_raw = rollout.raw.reshape(-1, rollout.raw.shape[-1])
    b_lp, b_val = rollout.logprobs.reshape(-1), rollout.values.reshape(-1)
    b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
    n = b_obs.shape[0]
    size = n // args.num_minibatches
    for _ in range(args.update_epochs):
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, size):
            mb = perm[start : start + size]
            mean, std, value = policy.dist_params(b_obs[mb])
            new_lp = gaussian_log_prob(b_raw[mb], mean, std)
            mb_adv = b_adv[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg = ppo.policy_loss(new_lp, b_lp[mb], mb_adv, args.clip_coef)
            vl = ppo.value_loss(value, b_val[mb], b_ret[mb], args.clip_coef, args.clip_vloss)
            loss = pg - args.ent_coef * gaussian_entropy(std) + args.vf_coef * vl
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.net.parameters(), args.max_grad_norm)
            optimizer.step()


def test_update_matches_the_plain_reference():
    market = toy_market(300, 6, 3)
    env = TradingVecEnv(market, num_envs=8, seed=0)
    args = ppo.PPOArgs(seed=0, num_steps=8, num_minibatches=4, update_epochs=2, ent_coef=0.01, compile="off")
    config = NetworkConfig(env.num_assets, env.num_features, rebalance_rate=0.2)
    policy = training.make_policy(env, config, PolicyMeta(), seed=0)
    rollout = Rollout.empty(args.num_steps, env.num_envs, policy, torch.device("cpu"))
    obs0, _ = env.reset(seed=0)
    zeros = torch.zeros(env.num_envs)
    # Record the normalized observations the rollout acted on (the reference needs them unpacked).
    seen = []
    pack = policy.net.pack

    def recording_pack(norm_obs):
        seen.append(norm_obs.clone())
        return pack(norm_obs)

    policy.net.pack = recording_pack
    collect_rollout(
        policy,
        env,
        rollout,
        RolloutState(obs0, zeros, zeros.clone()),
        torch.Generator(),
        gamma=args.gamma,
    )
    del policy.net.pack
    obs = torch.stack(seen[: args.num_steps])
    reference = policy.clone()
    fast_opt = training.make_optimizer(policy, args.learning_rate, None)
    ref_opt = torch.optim.Adam(reference.net.parameters(), lr=args.learning_rate, eps=1e-5, foreach=False)
    ppo.update(policy, fast_opt, rollout, args, torch.Generator().manual_seed(5))
    _reference_update(reference, ref_opt, obs, rollout, args, torch.Generator().manual_seed(5))
    for (name, p), q in zip(policy.net.named_parameters(), reference.net.parameters(), strict=True):
        assert torch.allclose(p, q, atol=2e-5, rtol=1e-4), name
    start = training.make_policy(env, config, PolicyMeta(), seed=0)
    assert any(
        not torch.equal(p, q) for p, q in zip(policy.net.parameters(), start.net.parameters(), strict=True)
    )


def test_compile_auto_depends_on_the_run_settings_only():
    # 1,000 minibatch steps: 4 epochs x 4 minibatches x 63 updates of 32 x 256 samples
    long_run = ppo.PPOArgs(total_steps=63 * 32 * 256)
    short_run = ppo.PPOArgs(total_steps=62 * 32 * 256)
    assert ppo.compiles(long_run, 256) and not ppo.compiles(short_run, 256)
    assert ppo.compiles(ppo.PPOArgs(total_steps=1, compile="on"), 8)
    assert not ppo.compiles(ppo.PPOArgs(compile="off", total_steps=10**9), 256)
    assert ppo._loss_fn(False, ("cpu",)) is ppo.minibatch_loss
    assert ppo._loss_fn(True, ("cpu", (2, 9))) is ppo._loss_fn(True, ("cpu", (2, 9)))  # once per process
    with pytest.raises(Exception, match="compile must be one of"):
        ppo.PPOArgs(compile="always")


@pytest.mark.slow
def test_compiled_loss_matches_eager():
    torch.manual_seed(1)
    net = PerAssetActorCritic(NetworkConfig(12, 4))
    obs = torch.randn(64, net.config.obs_dim)
    packed = net.pack(obs)
    sample = torch.randn(64, 13 + 4)
    coefs = torch.tensor([0.2, 0.01, 0.5])
    fn = ppo._loss_fn(True, ("test", tuple(sample.shape)))
    out = fn(net, packed, sample, coefs, True, True)
    assert fn.active, fn.failure
    ref = ppo.minibatch_loss(net, packed, sample, coefs, True, True)
    for a, b in zip(out, ref, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out[0], list(net.parameters()))
    ref_grads = torch.autograd.grad(ref[0], list(net.parameters()))
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.allclose(g, r, atol=1e-5, rtol=1e-4)


def test_a_tournament_decides_compile_once_from_its_budget():
    from agents.tournament.settings import TournamentArgs, learner_compile

    env = {"num_envs": 256}
    # 2M env-steps = 244 updates of 8,192 samples = 3,906 minibatch steps, ~1,953 per worker (2)
    assert learner_compile(TournamentArgs(budget_steps=2_000_000, workers=2), env, {}) == "on"
    assert learner_compile(TournamentArgs(budget_steps=200_000, workers=2), env, {}) == "off"
    assert learner_compile(TournamentArgs(budget_steps=200_000), env, {"compile": "on"}) == "on"
    assert learner_compile(TournamentArgs(budget_steps=10**9), env, {"compile": "off"}) == "off"
    minutes = TournamentArgs(budget_steps=None, budget_minutes=6.0)
    assert learner_compile(minutes, env, {}) == "on"
    assert learner_compile(dataclasses.replace(minutes, budget_minutes=1.0), env, {}) == "off"
    assert learner_compile(TournamentArgs(budget_steps=10**9, algo="sac"), env, {}) == "off"
