"""PPO for a population: P pods trained in lockstep, one program, one env batch of P x N envs.

Pod ``p`` of a :class:`Population` is the same run as ``agents.ppo.train(args_p, env_p, init=init_p)``
with its own seed, hyper-parameters and starting point: the same rollout, GAE, minibatch loss,
grad-norm clip and Adam, pod by pod, to float rounding (tests/test_population.py). What differs is
the shape of the work: every step of the P pods is one batched op over a leading pod axis.

- **Env.** One env of ``P * N`` envs over the same market tensors, started from each pod's own reset
  (its seed's ``envs.trading.reset``); envs never interact, so pod ``p``'s slice is its own run's.
- **Per-pod scalars** (learning rate, gamma, GAE lambda, clip, entropy and value coefficients, max
  grad norm, rebalance rate) are ``(P,)`` tensors; advantage normalization, grad-norm clipping,
  observation statistics and the Adam step count are per pod (:mod:`agents.population.stacked`).
- **Randomness.** Each pod owns the ``torch.Generator`` its separate run would own, seeded alike, and
  draws what that run draws in the same order (its rollout's action noise, one ``(P, T, N, R)``
  buffer row per rollout: ``agents.rollout.rollout_noise``; its minibatch order per epoch, one
  ``(P, B)`` row: ``agents.ppo.shuffle``): a pod's samples do not depend on the others, in ``P`` calls
  per rollout and per epoch, not ``P`` per step.
- **Shape-changing hyper-parameters.** ``update_epochs`` varies by masking (the update runs the
  largest count; a pod past its own, or whose round is shorter, has its step masked: no parameter,
  moment or step-count change, no permutation drawn). ``num_steps``, ``num_minibatches``,
  ``num_envs`` and the network's sizes are fixed per population
  (:func:`~agents.population.pods.shape_key`).
- **Launch overhead.** No host synchronisation inside the rollout or the update (metrics stay on the
  device until the round ends; with ``target_kl`` set, one read per epoch). The policy step, its
  bookkeeping, the advantage estimate and the minibatch update run through
  :class:`~agents.population.graphs.StepGraph` (one CUDA graph replay each on a GPU, eager elsewhere).
  The env's step skips its action check (actions are made finite in the policy step, so a pod gone
  non-finite fails alone after the round) and keeps its autoreset branch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from agents.networks import NetworkConfig
from agents.policy import Policy, gaussian_log_prob
from agents.population import history as h
from agents.population.formulas import pod_actions, pod_gae, pod_ppo_loss
from agents.population.graphs import StepGraph
from agents.population.pods import PodSetup, concat_states, shape_key
from agents.population.stacked import (
    StackedAdam,
    StackedNets,
    StackedNorm,
    clip_grad_norms,
    finite_rows,
    fused_adam_param_groups,
)
from agents.ppo import PPOArgs, shuffle
from agents.rollout import rollout_noise
from agents.training import TrainResult, policy_for_env
from data.errors import ConfigError
from envs import trading


class Population:
    """``num_pods`` PPO pods of one :func:`shape_key` on one device (module docstring). ``make_env(n)``
    builds the env batch of ``n`` envs; ``graphs``: CUDA graphs for the hot steps (None: on CUDA).
    Buffers are allocated once; :meth:`train` copies each round's pods into their rows in place."""

    def __init__(
        self,
        make_env: Callable[[int], Any],
        *,
        config: NetworkConfig,
        num_pods: int,
        num_envs: int,
        num_steps: int,
        num_minibatches: int,
        norm_adv: bool = True,
        clip_vloss: bool = True,
        norm_obs: bool = True,
        graphs: bool | None = None,
    ) -> None:
        self.num_pods, self.num_envs, self.num_steps = int(num_pods), int(num_envs), int(num_steps)
        self.num_minibatches = int(num_minibatches)
        self.norm_adv, self.clip_vloss, self.norm_obs = norm_adv, clip_vloss, norm_obs
        self.env = make_env(self.num_pods * self.num_envs)
        self.device = torch.device(self.env.device)
        self.config = config
        self.action_mode = getattr(self.env.params, "action_mode", "weights")
        self.num_assets = config.num_assets
        self.raw_dim = self.num_assets + 1 if self.action_mode == "weights" else self.num_assets
        p, n, t, dev = self.num_pods, self.num_envs, self.num_steps, self.device
        self.nets = StackedNets(config, p, dev)
        self.norm = StackedNorm(p, config.num_features, dev)
        self.adam = StackedAdam(self.nets)
        self.batch_size = t * n
        self.minibatch_size = max(1, self.batch_size // self.num_minibatches)
        self._allocate_hyperparameters()
        self._allocate_rollout()
        self._allocate_step_buffers()
        self._build_graphs(graphs)

    def _allocate_hyperparameters(self) -> None:
        """Per-pod hyper-parameters and masks, filled by each round's pods."""
        p, dev = self.num_pods, self.device
        z = {"device": dev, "dtype": torch.float32}
        # Per-pod hyper-parameters, (P,) (or (P, 1) to broadcast over envs/samples).
        self.lr = torch.zeros(p, dtype=self.adam.wide, device=dev)
        self.base_lr = torch.zeros(p, dtype=self.adam.wide, device=dev)
        self.num_updates = torch.ones(p, dtype=self.adam.wide, device=dev)
        self.gamma = torch.zeros(p, 1, **z)
        self.gamma_lambda = torch.zeros(p, 1, **z)
        self.clip = torch.zeros(p, 1, **z)
        self.ent_coef = torch.zeros(p, **z)
        self.vf_coef = torch.zeros(p, **z)
        self.max_grad_norm = torch.zeros(p, **z)
        self.rebalance = torch.ones(p, 1, 1, **z)
        self.epochs = torch.zeros(p, dtype=torch.long, device=dev)
        # Masks: pods still training this update, and pods taking this epoch's minibatch steps.
        self.training = torch.zeros(p, dtype=torch.bool, device=dev)
        self.kl_stop = torch.zeros(p, dtype=torch.bool, device=dev)
        self.mb_active = torch.zeros(p, dtype=torch.bool, device=dev)

    def _allocate_rollout(self) -> None:
        """The rollout storage: a pod's (T, N) batch and what the update derives from it."""
        p, n, t, dev = self.num_pods, self.num_envs, self.num_steps, self.device
        z = {"device": dev, "dtype": torch.float32}
        # Rollout storage, pod-major (P, T, N, ...): a pod's batch is a contiguous (T * N) block,
        # flattened in the order ppo.update flattens its (T, N) rollout.
        with torch.no_grad():
            probe = self.nets.pack(torch.zeros(p, 1, self.config.obs_dim, device=dev))
        self.packed = tuple(torch.zeros(p, t, n, *q.shape[2:], **z) for q in probe)
        self.raw = torch.zeros(p, t, n, self.raw_dim, **z)
        self.logprobs = torch.zeros(p, t, n, **z)
        self.values = torch.zeros(p, t, n, **z)
        self.rewards = torch.zeros(p, t, n, **z)
        self.dones = torch.zeros(p, t, n, **z)
        self.next_value = torch.zeros(p, n, **z)
        self.advantages = torch.zeros(p, t, n, **z)
        self.returns = torch.zeros(p, t, n, **z)

    def _allocate_step_buffers(self) -> None:
        """The static buffers the graphed rollout steps read and write."""
        p, n, t, dev = self.num_pods, self.num_envs, self.num_steps, self.device
        z = {"device": dev, "dtype": torch.float32}
        # Static buffers of the graphed steps.
        self.obs = torch.zeros(p * n, self.config.obs_dim, **z)
        self.noises = torch.zeros(p, t, n, self.raw_dim, **z)  # each pod's rollout noise, drawn at its start
        self.noise = torch.zeros(p, n, self.raw_dim, **z)  # this step's
        self.act_packed = tuple(torch.zeros(p, n, *q.shape[3:], **z) for q in self.packed)
        self.act_raw = torch.zeros(p, n, self.raw_dim, **z)
        self.act_logprob = torch.zeros(p, n, **z)
        self.act_value = torch.zeros(p, n, **z)
        self.action = torch.zeros(p * n, self.num_assets, **z)
        self.step_reward = torch.zeros(p * n, **z)
        self.step_terminated = torch.zeros(p * n, dtype=torch.bool, device=dev)
        self.step_truncated = torch.zeros(p * n, dtype=torch.bool, device=dev)
        self.step_cost = torch.zeros(p * n, dtype=torch.float64, device=dev)
        self.final_obs = torch.zeros(p * n, self.config.obs_dim, **z)
        self.row_reward = torch.zeros(p, n, **z)
        self.row_done = torch.zeros(p, n, **z)
        self.episode_return = torch.zeros(p, n, **z)
        self.episode_length = torch.zeros(p, n, **z)
        self.stats = torch.zeros(len(h.METRICS), p, dtype=self.adam.wide, device=dev)
        self.perms = torch.zeros(p, self.batch_size, dtype=torch.long, device=dev)
        self.offsets = (torch.arange(p, device=dev) * self.batch_size).unsqueeze(1)

    def _build_graphs(self, graphs: bool | None) -> None:
        """The hot steps, each a CUDA graph where ``graphs`` allows (StepGraph), one per minibatch size."""
        p, dev = self.num_pods, self.device
        self.act_step = StepGraph(self._act, dev, graphs, "the rollout's policy step")
        self.post_step = StepGraph(self._post, dev, graphs, "the rollout's post-step")
        self.advantage_step = StepGraph(self._advantages, dev, graphs, "the advantage estimate")
        self.mb_index: dict[int, Tensor] = {}
        self.mb_steps: dict[int, StepGraph] = {}
        for start in range(0, self.batch_size, self.minibatch_size):
            size = min(self.minibatch_size, self.batch_size - start)
            if size not in self.mb_steps:
                self.mb_index[size] = torch.zeros(p, size, dtype=torch.long, device=dev)
                step = StepGraph(lambda s=size: self._minibatch(s), dev, graphs, "the minibatch update")
                self.mb_steps[size] = step
        self._graphs = graphs

    # --- slots ----------------------------------------------------------------------------------
    def starting_policy(self, args: PPOArgs, init: Any = None) -> tuple[Policy, dict | None]:
        """The pod's starting policy and optimizer state, exactly as ``ppo.train`` builds them."""
        return policy_for_env(init, self.env, args, "ppo")

    def fresh_pods(self, args: Sequence[PPOArgs]) -> list[PodSetup]:
        """One fresh pod per entry of ``args`` (its seed's weights, no optimizer state)."""
        return [PodSetup(*self.starting_policy(a), a) for a in args]

    def _check(self, setup: PodSetup) -> None:
        args, cfg = setup.args, setup.policy.config
        if shape_key(args, cfg) != shape_key(self._shape_args(), self.config):
            raise ValueError(f"pod (seed {args.seed}) does not fit this population's shapes")
        if args.target_kl is not None and args.target_kl <= 0:
            raise ValueError("target_kl must be > 0")
        if cfg.demean_features:  # (the stacked encoder reads the features as they are)
            raise ConfigError(
                f"pod (seed {args.seed}): a policy whose encoder demeans its features is not "
                "trained by the population backend's PPO; use the local backend"
            )
        if cfg.trade_window < 1.0:  # (formulas.pod_actions trades at every decision)
            raise ConfigError(
                f"pod (seed {args.seed}): a policy with a trade window ({cfg.trade_window}) is not "
                "trained by the population backend's PPO; use the local backend"
            )

    def _shape_args(self) -> PPOArgs:
        return PPOArgs(
            num_steps=self.num_steps,
            num_minibatches=self.num_minibatches,
            norm_adv=self.norm_adv,
            clip_vloss=self.clip_vloss,
            norm_obs=self.norm_obs,
        )

    @torch.no_grad()
    def load(self, slot: int, setup: PodSetup) -> None:
        """Copy a pod's weights, statistics, Adam state and hyper-parameters into row ``slot``."""
        self._check(setup)
        args = setup.args
        self.nets.load(slot, setup.policy.net)
        self.norm.load(slot, setup.policy.obs_norm)
        self.adam.load(slot, setup.optimizer_state)
        self.base_lr[slot] = args.learning_rate
        self.num_updates[slot] = args.num_updates(self.num_envs)
        self.gamma[slot] = args.gamma
        self.gamma_lambda[slot] = args.gamma * args.gae_lambda  # in float64, then float32, as ppo
        self.clip[slot] = args.clip_coef
        self.ent_coef[slot] = args.ent_coef
        self.vf_coef[slot] = args.vf_coef
        self.max_grad_norm[slot] = args.max_grad_norm
        self.rebalance[slot] = setup.policy.config.rebalance_rate
        self.epochs[slot] = args.update_epochs

    def export(self, slot: int, template: Policy, learning_rate: float) -> tuple[Policy, dict]:
        """Row ``slot`` as a policy (``template``'s config and meta) and a ``torch.optim.Adam`` state."""
        policy = Policy(template.config, template.meta, device=self.device, init=False)
        policy.net.load_state_dict(self.nets.state_dict(slot))
        self.norm.export(slot, policy.obs_norm)
        groups = fused_adam_param_groups(self.nets, learning_rate)
        return policy.eval(), self.adam.state_dict(slot, groups)

    # --- the graphed steps (functions of the static buffers) --------------------------------------
    def _act(self) -> None:
        p, n = self.num_pods, self.num_envs
        obs = self.obs.view(p, n, -1)
        if self.norm_obs:
            self.norm.update(obs, self.training)
        packed = self.nets.pack(self.norm.normalize(obs))
        mean, value = self.nets.forward_packed(*packed)
        mean = mean[..., : self.raw_dim]
        std = self.nets.std()[:, : self.raw_dim].unsqueeze(1)
        raw = mean + std * self.noise
        for buffer, part in zip(self.act_packed, packed, strict=True):
            buffer.copy_(part)
        self.act_raw.copy_(raw)
        self.act_logprob.copy_(gaussian_log_prob(raw, mean, std))
        self.act_value.copy_(value)
        # A pod whose weights went non-finite acts NaN: its envs get zeros instead, so the env batch
        # stays sound for the other pods (and needs no per-step NaN check); the pod itself fails after
        # the round (``finite``). Finite actions are unchanged.
        action = pod_actions(raw, obs, self.rebalance, self.action_mode, self.num_assets)
        self.action.copy_(torch.nan_to_num(action.reshape(p * n, -1), nan=0.0, posinf=0.0, neginf=0.0))

    def _post(self) -> None:
        p, n = self.num_pods, self.num_envs
        reward = self.step_reward.view(p, n)
        terminated, truncated = self.step_terminated.view(p, n), self.step_truncated.view(p, n)
        done = terminated | truncated
        # A time limit is not a terminal state: bootstrap from the pre-reset observation.
        cut = truncated & ~terminated
        final = self.nets.value_packed(*self.nets.pack(self.norm.normalize(self.final_obs.view(p, n, -1))))
        boot = torch.where(cut, self.gamma * final, 0.0)
        self.row_reward.copy_(reward + boot)
        self.row_done.copy_(done.to(torch.float32))
        stats = self.stats
        stats[h.REWARD_SUM] += reward.sum(dim=1)
        stats[h.COST_SUM] += self.step_cost.view(p, n).sum(dim=1)
        ret = self.episode_return + reward
        length = self.episode_length + 1
        stats[h.FINISHED_RETURN] += torch.where(done, ret, 0.0).sum(dim=1)
        stats[h.FINISHED_LENGTH] += torch.where(done, length, 0.0).sum(dim=1)
        stats[h.FINISHED] += done.sum(dim=1)
        self.episode_return.copy_(torch.where(done, 0.0, ret))
        self.episode_length.copy_(torch.where(done, 0.0, length))

    def _minibatch(self, size: int) -> None:
        p, b = self.num_pods, self.batch_size
        flat = (self.mb_index[size] + self.offsets).reshape(-1)

        def gather(src: Tensor) -> Tensor:
            return src.reshape(p * b, *src.shape[3:]).index_select(0, flat).reshape(p, size, *src.shape[3:])

        with torch.enable_grad():
            mean, new_value = self.nets.forward_packed(*(gather(part) for part in self.packed))
            loss, pg_loss, v_loss, entropy, logratio, ratio = pod_ppo_loss(
                mean[..., : self.raw_dim],
                self.nets.std()[:, : self.raw_dim],
                new_value,
                gather(self.raw),
                gather(self.logprobs),
                gather(self.values),
                gather(self.advantages),
                gather(self.returns),
                self.clip,
                self.ent_coef,
                self.vf_coef,
                norm_adv=self.norm_adv,
                clip_vloss=self.clip_vloss,
            )
            # Pods' parameters are disjoint: the gradient of the sum is each pod's own gradient.
            grads = torch.autograd.grad(loss.sum(), self.nets.tensors())
        with torch.no_grad():
            grads = clip_grad_norms(grads, self.max_grad_norm)
            self.adam.update(grads, self.lr, self.mb_active)
            on = self.mb_active
            stats = self.stats
            for row, value in ((h.POLICY_LOSS, pg_loss), (h.VALUE_LOSS, v_loss), (h.ENTROPY, entropy)):
                stats[row] = torch.where(on, value.detach().to(stats.dtype), stats[row])
            approx_kl = ((ratio - 1) - logratio).mean(dim=1).detach()
            stats[h.APPROX_KL] = torch.where(on, approx_kl.to(stats.dtype), stats[h.APPROX_KL])
            clipfrac = ((ratio - 1.0).abs() > self.clip).float().mean(dim=1)
            stats[h.CLIPFRAC_SUM] += torch.where(on, clipfrac.to(stats.dtype), 0.0)
            stats[h.MINIBATCHES] += on.to(stats.dtype)

    # --- a round ----------------------------------------------------------------------------------
    def _reset(self, seeds: Sequence[int]) -> None:
        env, n = self.env, self.num_envs
        resets = [
            trading.reset(env.market, env.params, n, torch.Generator().manual_seed(int(s))) for s in seeds
        ]
        # The env batch starts where each pod's own env would: its reset, concatenated.
        env.state = concat_states([state for state, _ in resets])
        self.obs.copy_(torch.cat([obs for _, obs in resets]))
        self.episode_return.zero_()
        self.episode_length.zero_()

    @torch.no_grad()
    def _rollout(self, generators: Sequence[torch.Generator], training: Sequence[bool]) -> None:
        p, n, t = self.num_pods, self.num_envs, self.num_steps
        for slot in range(p):
            if training[slot]:  # the pod's own draw, as its run draws it (agents.rollout.collect_rollout)
                rollout_noise(generators[slot], t, n, self.raw_dim, out=self.noises[slot])
        for step in range(t):
            self.noise.copy_(self.noises[:, step])
            self.act_step()
            for buffer, part in zip(self.packed, self.act_packed, strict=True):
                buffer[:, step].copy_(part)
            self.raw[:, step].copy_(self.act_raw)
            self.logprobs[:, step].copy_(self.act_logprob)
            self.values[:, step].copy_(self.act_value)
            # (as the env's own check would hand it over: in the env's asset dtype; a no-op in float32)
            action = self.action.to(self.env.params.asset_dtype)
            obs, reward, terminated, truncated, info = self.env.step(action, validate=False)
            self.step_reward.copy_(reward)
            self.step_terminated.copy_(terminated)
            self.step_truncated.copy_(truncated)
            self.step_cost.copy_(info["cost"])
            self.final_obs.copy_(info["final_obs"])
            self.post_step()
            self.rewards[:, step].copy_(self.row_reward)
            self.dones[:, step].copy_(self.row_done)
            self.obs.copy_(obs)

    @torch.no_grad()
    def _advantages(self) -> None:
        """Bootstrap value, ``agents.rollout.compute_gae`` for every env of every pod (per-pod gamma and
        lambda), explained variance."""
        p, n = self.num_pods, self.num_envs
        obs = self.obs.view(p, n, -1)
        self.next_value.copy_(self.nets.value_packed(*self.nets.pack(self.norm.normalize(obs))))
        pod_gae(
            self.rewards,
            self.values,
            self.dones,
            self.next_value,
            self.gamma,
            self.gamma_lambda,
            out=self.advantages,
        )
        torch.add(self.advantages, self.values, out=self.returns)
        b_returns = self.returns.reshape(p, -1)
        var_y = b_returns.var(dim=1)
        explained = 1 - (b_returns - self.values.reshape(p, -1)).var(dim=1) / var_y
        self.stats[h.EXPLAINED_VARIANCE] = torch.where(var_y == 0, math.nan, explained).to(self.stats.dtype)

    def _update(
        self, generators: Sequence[torch.Generator], training: Sequence[bool], args: Sequence[PPOArgs]
    ) -> None:
        self.advantage_step()
        p = self.num_pods
        self.kl_stop.zero_()
        stopped = [False] * p
        kl_limits = [a.target_kl for a in args]
        for epoch in range(max(a.update_epochs for a in args)):
            active = [training[s] and epoch < args[s].update_epochs and not stopped[s] for s in range(p)]
            if not any(active):
                break
            torch.logical_and(self.training, self.epochs > epoch, out=self.mb_active)
            self.mb_active &= ~self.kl_stop
            for slot in range(p):
                if active[slot]:  # the pod's own order, as its run draws it (agents.ppo.update)
                    shuffle(generators[slot], self.batch_size, out=self.perms[slot])
            for start in range(0, self.batch_size, self.minibatch_size):
                size = min(self.minibatch_size, self.batch_size - start)
                self.mb_index[size].copy_(self.perms[:, start : start + size])
                self.mb_steps[size]()
            if any(limit is not None for limit in kl_limits):
                # ppo.update: the epochs stop once the last minibatch's approximate KL exceeds target_kl
                # (one host read per epoch, only when some pod sets target_kl).
                kl = self.stats[h.APPROX_KL].tolist()
                for slot in range(p):
                    limit = kl_limits[slot]
                    if active[slot] and limit is not None and kl[slot] > limit:
                        stopped[slot] = True
                        self.kl_stop[slot] = True
        with torch.no_grad():
            self.stats[h.LOG_STD] = self.nets.params["log_std"].detach().mean(dim=1).to(self.stats.dtype)

    def train(self, setups: Sequence[PodSetup]) -> list[TrainResult]:
        """One round: pod ``p`` trains from ``setups[p]`` for its ``total_steps`` (or to its deadline)."""
        if len(setups) != self.num_pods:
            raise ValueError(f"{len(setups)} pods for a population of {self.num_pods}")
        p, n = self.num_pods, self.num_envs
        for slot, setup in enumerate(setups):
            self.load(slot, setup)
        args = [s.args for s in setups]
        generators = [torch.Generator(device=self.device).manual_seed(a.seed) for a in args]
        self._reset([a.seed for a in args])
        num_updates = [a.num_updates(n) for a in args]
        running = [True] * p
        env_steps, updates, stopped_early = [0] * p, [0] * p, [False] * p
        logs: list[h.UpdateLog] = []
        start = time.perf_counter()
        for update_idx in range(1, max(num_updates) + 1):
            training = [running[s] and update_idx <= num_updates[s] for s in range(p)]
            if not any(training):
                break
            self.training.copy_(torch.tensor(training, device=self.device))
            frac = torch.where(
                torch.tensor([a.anneal_lr for a in args], device=self.device),
                1.0 - (update_idx - 1) / self.num_updates,
                1.0,
            )
            self.lr.copy_(frac * self.base_lr)
            self.stats.zero_()
            t0 = time.perf_counter()
            self._rollout(generators, training)
            t1 = time.perf_counter()
            self._update(generators, training, args)
            t2 = time.perf_counter()
            now = time.monotonic()
            for slot in range(p):
                if training[slot]:
                    env_steps[slot] += args[slot].batch_size(n)
                    updates[slot] = update_idx
                    deadline = setups[slot].deadline
                    if deadline is not None and now >= deadline:  # ppo.train's wall-time callback
                        running[slot], stopped_early[slot] = False, True
            timing = {"rollout_s": t1 - t0, "update_s": t2 - t1, "elapsed_s": time.perf_counter() - start}
            logs.append(h.UpdateLog(training, self.stats.clone(), timing))
        return self._results(setups, logs, env_steps, updates, stopped_early)

    def _results(
        self,
        setups: Sequence[PodSetup],
        logs: list[h.UpdateLog],
        env_steps: list[int],
        updates: list[int],
        stopped_early: list[bool],
    ) -> list[TrainResult]:
        values = torch.stack([log.stats for log in logs]).cpu().tolist() if logs else []  # the one read
        results = []
        for slot, setup in enumerate(setups):
            history = h.pod_history(logs, values, slot, setup.args, self.num_envs)
            last_lr = history[-1]["charts/learning_rate"] if history else setup.args.learning_rate
            policy, opt_state = self.export(slot, setup.policy, last_lr)
            results.append(
                TrainResult(
                    policy=policy,
                    optimizer_state=opt_state,
                    env_steps=env_steps[slot],
                    history=history,
                    updates=updates[slot],
                    stopped_by_callback=stopped_early[slot],
                )
            )
        return results

    # --- inference for the validation backtests ---------------------------------------------------
    def finite(self) -> list[bool]:
        """Per pod: whether all its parameters are finite."""
        return finite_rows(self.nets).cpu().tolist()

    def batched_act(self, slots: Sequence[int]) -> Callable[[Tensor], Tensor]:
        """``act(obs (S, obs_dim)) -> (S, A)``: the deterministic action of pod ``slots[i]`` on row ``i``
        (each with its own normalization), one stacked forward for all: what ``Policy.act`` gives pod
        by pod, to float rounding."""
        nets = self.nets.select(slots)
        index = torch.as_tensor(list(slots), dtype=torch.long, device=self.device)
        norm = self.norm.select(index)
        rebalance = self.rebalance.index_select(0, index)
        raw_dim, action_mode, a = self.raw_dim, self.action_mode, self.num_assets

        def act(obs: Tensor) -> Tensor:
            obs3 = obs.to(self.device, torch.float32).unsqueeze(1)  # (S, 1, obs_dim)
            mean, _ = nets.forward_packed(*nets.pack(norm.normalize(obs3)))
            return pod_actions(mean[..., :raw_dim], obs3, rebalance, action_mode, a).squeeze(1)

        return act
