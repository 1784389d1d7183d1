"""Unit tests of the learners' pieces: GAE, PPO losses, distribution, normalizer, checkpoints, determinism."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import toy_env

from agents import ppo, training
from agents.checkpoint import Checkpoint, load_optimizer_state
from agents.networks import NetworkConfig, PerAssetActorCritic, flops_per_sample
from agents.normalize import ObsNormalizer
from agents.policy import Policy, PolicyMeta, gaussian_entropy, gaussian_log_prob, raw_to_action
from agents.rollout import Rollout, RolloutState, collect_rollout, compute_gae
from data.errors import CheckpointError, ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


# --- GAE and losses --------------------------------------------------------------------------------


def test_gae_matches_a_hand_computed_example():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    dones = torch.tensor([[0.0], [1.0], [0.0]])  # the episode ends with step 1
    adv, ret = compute_gae(rewards, values, dones, torch.tensor([2.0]), gamma=0.9, gae_lambda=0.8)
    # t=2: 3 + 0.9*2.0 - 1.5 = 3.3
    # t=1: 2 - 1.0 = 1.0 (done: no bootstrap, no carry)
    # t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4; A = 1.4 + 0.9*0.8*1.0 = 2.12
    assert torch.allclose(adv[:, 0], torch.tensor([2.12, 1.0, 3.3]))
    assert torch.allclose(ret[:, 0], torch.tensor([2.62, 2.0, 4.8]))


def test_gae_with_lambda_one_and_no_dones_is_the_discounted_return_minus_value():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(5, 3, generator=gen)
    values = torch.randn(5, 3, generator=gen)
    next_value = torch.randn(3, generator=gen)
    adv, ret = compute_gae(rewards, values, torch.zeros(5, 3), next_value, gamma=0.9, gae_lambda=1.0)
    expected = next_value.clone()
    for t in reversed(range(5)):
        expected = rewards[t] + 0.9 * expected
        assert torch.allclose(ret[t], expected, atol=1e-5)


def test_clipped_policy_loss_pieces():
    adv = torch.tensor([1.0, -1.0])
    new = torch.log(torch.tensor([1.5, 0.5]))
    old = torch.zeros(2)
    # adv=+1, ratio 1.5: max(-1.5, -1.2) = -1.2; adv=-1, ratio 0.5: max(0.5, 0.8) = 0.8
    assert ppo.policy_loss(new, old, adv, 0.2).item() == pytest.approx(-0.2)
    # inside the clip range the loss is the plain surrogate
    assert ppo.policy_loss(
        torch.log(torch.tensor([1.1])), torch.zeros(1), torch.tensor([2.0]), 0.2
    ).item() == (pytest.approx(-2.2))


def test_value_loss_clipping():
    new, old, ret = torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0])
    assert ppo.value_loss(new, old, ret, 0.2, clip_vloss=False).item() == pytest.approx(0.5)
    # clipped prediction 0.2 is further from the return: pessimistic max 0.5 * 1.8^2
    assert ppo.value_loss(new, old, ret, 0.2, clip_vloss=True).item() == pytest.approx(1.62)


def test_gaussian_log_prob_and_entropy_match_torch_distributions():
    gen = torch.Generator().manual_seed(1)
    mean, raw = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    std = torch.rand(5, generator=gen) + 0.1
    dist = torch.distributions.Normal(mean, std)
    assert torch.allclose(gaussian_log_prob(raw, mean, std), dist.log_prob(raw).sum(-1), atol=1e-5)
    assert torch.allclose(gaussian_entropy(std), dist.entropy()[0].sum(), atol=1e-5)


def test_actions_are_long_only_weights_summing_at_most_one():
    raw = torch.randn(7, 5) * 3
    w = raw_to_action(raw, "weights", 4)
    assert w.shape == (7, 4)
    assert bool((w >= 0).all()) and bool((w.sum(1) <= 1 + 1e-6).all())
    s = raw_to_action(raw, "shares", 4)
    assert s.shape == (7, 4) and float(s.abs().max()) <= 1.0


def test_flops_count_matches_the_network_and_grows_with_assets():
    small = flops_per_sample(NetworkConfig(10, 8, asset_layers=1))
    big = flops_per_sample(NetworkConfig(100, 8, asset_layers=1))
    assert big["encoder"] == 10 * small["encoder"]
    assert big["context"] == small["context"]  # pooled: independent of the number of assets
    enc = PerAssetActorCritic(NetworkConfig(100, 8, asset_layers=1)).encoder[0]
    assert small["encoder"] == 10 * enc.in_features * enc.out_features
    # the factored linear encoder costs far less per asset than an (A, E) embedding
    linear = flops_per_sample(NetworkConfig(100, 8, asset_layers=0))
    assert linear["total"] < big["total"] / 2


@pytest.mark.parametrize("asset_layers", [0, 1, 2])
def test_linear_encoder_factored_form_equals_the_plain_per_asset_computation(asset_layers):
    torch.manual_seed(0)
    config = NetworkConfig(5, 3, asset_layers=asset_layers)
    net = PerAssetActorCritic(config)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.5 * torch.randn_like(p))
    obs = torch.randn(4, config.obs_dim)
    logits, value = net(obs)
    # reference: build the per-asset embeddings explicitly
    per_asset = obs[:, 2:].reshape(4, 5, 5)
    emb = net.encoder(per_asset)
    held = (per_asset[:, :, :1] * emb).sum(1)
    ctx = net.context(torch.cat([emb.mean(1), held, obs[:, :2]], 1))
    ref_logits = (emb * net.actor_readout(ctx).unsqueeze(1)).sum(-1)
    assert torch.allclose(logits[:, :5], ref_logits, atol=1e-5)
    assert torch.allclose(logits[:, 5], net.actor_cash(ctx).squeeze(-1), atol=1e-5)
    assert torch.allclose(value, net.critic(ctx).squeeze(-1), atol=1e-5)


@pytest.mark.parametrize("asset_layers", [0, 1])
def test_network_is_permutation_equivariant_over_assets(asset_layers):
    torch.manual_seed(0)
    config = NetworkConfig(5, 3, asset_layers=asset_layers)
    net = PerAssetActorCritic(config)
    obs = torch.randn(2, config.obs_dim)
    perm = torch.tensor([3, 0, 4, 1, 2])
    per_asset = obs[:, 2:].reshape(2, 5, 5)
    obs_perm = torch.cat([obs[:, :2], per_asset[:, perm].reshape(2, -1)], dim=1)
    logits, value = net(obs)
    logits_p, value_p = net(obs_perm)
    assert torch.allclose(logits_p[:, :5], logits[:, :5][:, perm], atol=1e-5)
    assert torch.allclose(logits_p[:, 5], logits[:, 5], atol=1e-5)
    assert torch.allclose(value_p, value, atol=1e-5)


# --- normalizer ------------------------------------------------------------------------------------


def test_normalizer_matches_batch_statistics_and_is_frozen_in_normalize():
    gen = torch.Generator().manual_seed(2)
    norm = ObsNormalizer(2, 3)
    batches = [torch.randn(50, 2 + 4 * 3, generator=gen) * 3 + 1 for _ in range(4)]
    for b in batches:
        norm.update(b)
    allx = torch.cat(batches)
    glob = allx[:, :2]
    per = allx[:, 2:].reshape(-1, 3)
    assert torch.allclose(norm.mean_global, glob.mean(0), atol=1e-4)
    assert torch.allclose(norm.var_global, glob.var(0, unbiased=False), atol=1e-3)
    assert torch.allclose(norm.mean_asset, per.mean(0), atol=1e-4)
    assert torch.allclose(norm.var_asset, per.var(0, unbiased=False), atol=1e-3)
    before = norm.to_spec()
    out = norm.normalize(allx)
    assert norm.to_spec() == before
    assert abs(float(out[:, 2:].reshape(-1, 3).mean())) < 1e-3


# --- persistence -----------------------------------------------------------------------------------


def _trained_like_policy(num_assets=4, num_features=8, seed=0):
    torch.manual_seed(seed)
    policy = Policy(
        NetworkConfig(num_assets, num_features), PolicyMeta(tickers=tuple(f"T{i}" for i in range(num_assets)))
    )
    with torch.no_grad():  # make the weights and statistics non-trivial
        for p in policy.net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    policy.obs_norm.update(torch.randn(64, policy.obs_dim) * 2 + 0.5)
    return policy


def test_save_load_gives_identical_actions(tmp_path):
    policy = _trained_like_policy()
    policy.save(tmp_path / "p")
    loaded = Policy.load(tmp_path / "p")
    obs = torch.randn(9, policy.obs_dim)
    assert torch.equal(policy.act(obs), loaded.act(obs))
    assert torch.equal(policy(obs), loaded(obs))  # plain-callable form used by backtests
    spec = json.loads((tmp_path / "p" / "spec.json").read_text())
    assert spec["num_assets"] == 4 and spec["num_features"] == 8 and spec["obs_dim"] == policy.obs_dim
    assert spec["tickers"] == ["T0", "T1", "T2", "T3"] and spec["algo"] == "ppo"
    assert "torch" in spec["versions"] and len(spec["normalization"]["mean_asset"]) == 2 + 8
    assert not list((tmp_path / "p").glob("*.pkl")) and not list((tmp_path / "p").glob("*.pt"))


@pytest.mark.parametrize(
    "damage, match",
    [
        ("no_spec", "spec.json missing"),
        ("no_weights", "missing"),
        ("truncated", "sha256"),
        ("not_json", "not valid JSON"),
        ("garbage_weights_unhashed", "safetensors"),
        ("mismatched_arch", "shape"),
        ("wrong_format", "not a podracer policy"),
        ("missing_key", "invalid policy spec"),
    ],
)
def test_corrupt_checkpoint_is_a_clear_one_line_error(tmp_path, damage, match):
    directory = tmp_path / "p"
    _trained_like_policy().save(directory)
    spec_path, weights = directory / "spec.json", directory / "policy.safetensors"
    spec = json.loads(spec_path.read_text())
    if damage == "no_spec":
        spec_path.unlink()
    elif damage == "no_weights":
        weights.unlink()
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "not_json":
        spec_path.write_text("{not json")
    elif damage == "garbage_weights_unhashed":
        spec["weights_sha256"] = ""
        spec_path.write_text(json.dumps(spec))
        weights.write_bytes(b"\x00" * 64)
    elif damage == "mismatched_arch":
        spec["architecture"]["embed"] = 32  # weights were saved with embed=16
        spec_path.write_text(json.dumps(spec))
    elif damage == "wrong_format":
        spec["format"] = "something-else"
        spec_path.write_text(json.dumps(spec))
    elif damage == "missing_key":
        del spec["normalization"]
        spec_path.write_text(json.dumps(spec))
    with pytest.raises(CheckpointError, match=match) as err:
        Policy.load(directory)
    assert "\n" not in str(err.value)


def test_optimizer_state_round_trips_through_safetensors_and_json(tmp_path, toy):
    env = toy_env(toy, episode_len=16)
    result = ppo.train(ppo.PPOArgs(total_steps=4 * 8, num_steps=8, num_minibatches=2, update_epochs=1), env)
    Checkpoint(result.policy, result.optimizer_state).save(tmp_path / "c")
    loaded = Checkpoint.load(tmp_path / "c")
    assert loaded.optimizer_state is not None
    opt = torch.optim.Adam(loaded.policy.net.parameters(), lr=1e-3)
    opt.load_state_dict(loaded.optimizer_state)
    original = result.optimizer_state["state"]
    for key, per_param in original.items():
        for name, value in per_param.items():
            assert torch.equal(torch.as_tensor(opt.state_dict()["state"][key][name]), torch.as_tensor(value))
    (tmp_path / "c" / "optimizer.json").write_text("[]")
    with pytest.raises(CheckpointError):
        load_optimizer_state(tmp_path / "c")


# --- training loop -----------------------------------------------------------------------------------


def _weights(policy):
    return {k: v.clone() for k, v in policy.net.state_dict().items()}


def test_same_seed_gives_identical_weights_after_n_updates(toy):
    args = ppo.PPOArgs(seed=3, total_steps=4 * 8 * 3, num_steps=8, num_minibatches=2, update_epochs=2)
    a = ppo.train(args, toy_env(toy, seed=3, episode_len=16))
    b = ppo.train(args, toy_env(toy, seed=3, episode_len=16))
    c = ppo.train(ppo.PPOArgs(**{**args.__dict__, "seed": 4}), toy_env(toy, seed=3, episode_len=16))
    assert a.updates == 3
    wa, wb, wc = _weights(a.policy), _weights(b.policy), _weights(c.policy)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert a.policy.obs_norm.to_spec() == b.policy.obs_norm.to_spec()


def test_training_does_not_touch_the_global_rng(toy):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ppo.train(ppo.PPOArgs(total_steps=32, num_steps=8, update_epochs=1), toy_env(toy, episode_len=16))
    assert torch.equal(torch.rand(3), expected)


def test_truncated_episodes_bootstrap_from_final_obs(toy):
    env = toy_env(toy, episode_len=1)  # every step is a time-limit truncation
    seen = {}
    step = env.step

    def recording_step(action):
        out = step(action)
        seen["reward"], seen["truncated"], seen["final_obs"] = out[1], out[3], out[4]["final_obs"]
        return out

    env.step = recording_step
    policy = training.make_policy(env, NetworkConfig(env.num_assets, env.num_features), PolicyMeta(), seed=0)
    rollout = Rollout.empty(1, env.num_envs, policy, torch.device("cpu"))
    obs, _ = env.reset(seed=0)
    zeros = torch.zeros(env.num_envs)
    collect_rollout(
        policy, env, rollout, RolloutState(obs, zeros, zeros), torch.Generator().manual_seed(0), gamma=0.9
    )
    assert bool(seen["truncated"].all())
    with torch.no_grad():
        boot = 0.9 * policy.net.value(policy.obs_norm.normalize(seen["final_obs"]))
    assert torch.allclose(rollout.rewards[0], seen["reward"] + boot, atol=1e-5)
    assert bool((rollout.dones[0] == 1).all())


def test_a_callback_returning_false_stops_training_and_eval_metrics_are_logged(toy):
    events = []

    def stop_after_two(event):
        events.append(event)
        return sum(e["event"] == "update" for e in events) < 2

    calls = []

    def eval_fn(policy):
        calls.append(policy.training)
        return {"score": 1.5}

    args = ppo.PPOArgs(total_steps=4 * 8 * 10, num_steps=8, update_epochs=1, eval_every=32)
    result = ppo.train(args, toy_env(toy, episode_len=16), callbacks=[stop_after_two], eval_fn=eval_fn)
    assert result.updates == 2 and result.stopped_by_callback and result.env_steps == 64
    assert calls and not any(calls)  # evaluated in eval mode
    assert result.history[-1]["eval/score"] == 1.5
    assert all(
        k.split("/")[0] in ("charts", "losses", "eval", "env_steps", "update") for k in result.history[0]
    )
    frame = result.curve()
    assert len(frame) == 2 and "losses/policy_loss" in frame.columns


def test_warm_start_copies_weights_and_optimizer_state_and_carries_over_universes(toy):
    from data.toy import toy_market

    first = ppo.train(ppo.PPOArgs(total_steps=32, num_steps=8, update_epochs=1), toy_env(toy, episode_len=16))
    bigger = toy_market(num_steps=780, num_assets=6, num_features=8, seed=1)
    env = toy_env(bigger, episode_len=16)
    policy, opt_state = training.policy_for_env(first.checkpoint(), env, ppo.PPOArgs(), "ppo")
    assert policy.num_assets == 6 and opt_state is first.optimizer_state
    w0, w1 = first.policy.net.state_dict(), policy.net.state_dict()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    again = ppo.train(
        ppo.PPOArgs(total_steps=32, num_steps=8, update_epochs=1, learning_rate=1e-3),
        env,
        init=first.checkpoint(),
    )
    assert again.env_steps == 32
    other_features = toy_market(num_steps=780, num_assets=4, num_features=5, seed=1)
    with pytest.raises(ConfigError, match="features"):
        ppo.train(
            ppo.PPOArgs(total_steps=32, num_steps=8),
            toy_env(other_features, episode_len=16),
            init=first.policy,
        )


def test_invalid_args_are_config_errors():
    with pytest.raises(ConfigError, match="num_steps"):
        ppo.PPOArgs(num_steps=0)
    with pytest.raises(ConfigError, match="gamma"):
        ppo.PPOArgs(gamma=1.5)


def test_policy_rejects_wrong_observation_shape():
    policy = Policy(NetworkConfig(3, 2))
    with pytest.raises(ValueError, match="observations"):
        policy.act(torch.zeros(2, policy.obs_dim + 1))
    assert math.isfinite(float(policy.act(torch.zeros(2, policy.obs_dim)).sum()))


def test_partial_rebalancing_moves_a_fraction_of_the_way_from_current_weights(tmp_path):
    torch.manual_seed(0)
    policy = Policy(NetworkConfig(4, 2, rebalance_rate=0.25))
    with torch.no_grad():
        for p in policy.net.parameters():
            p.add_(0.5 * torch.randn_like(p))
    obs = torch.randn(3, policy.obs_dim)
    current = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.1]])
    obs[:, 2:].view(3, 4, 4)[..., 0] = current
    target = torch.softmax(policy.net.actor_mean(policy.obs_norm.normalize(obs)), dim=1)[:, :4]
    action = policy.act(obs)
    assert torch.allclose(action, current + 0.25 * (target.detach() - current), atol=1e-6)
    assert bool((action >= 0).all()) and bool((action.sum(1) <= 1 + 1e-6).all())
    with pytest.raises(ValueError, match="current weights"):
        policy.to_action(torch.zeros(3, 5))
    policy.save(tmp_path / "p")
    loaded = Policy.load(tmp_path / "p")
    assert loaded.config.rebalance_rate == 0.25 and torch.equal(loaded.act(obs), action)


def test_clone_is_an_independent_copy_with_the_same_statistics():
    policy = _trained_like_policy()
    other = policy.clone()
    obs = torch.randn(5, policy.obs_dim)
    assert torch.equal(other.act(obs), policy.act(obs))
    assert other.obs_norm.to_spec() == policy.obs_norm.to_spec()
    with torch.no_grad():
        other.net.log_std.add_(1.0)
    assert not torch.equal(other.net.log_std, policy.net.log_std)
