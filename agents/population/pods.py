"""What a pod brings to a population and what the pods of one population share.

- :class:`PodSetup`: one pod's starting point for a round (policy, optimizer state, hyper-parameters,
  deadline), what ``agents.ppo.train`` would start that pod's separate run from;
- :func:`shape_key`: the program's shapes and switches, equal across one population's pods (the
  tournament groups its pods by it, one ``agents.population.learner.Population`` per group);
- :func:`concat_states`: the pods' env states, each its own reset, as one env batch's state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agents.networks import NetworkConfig
from agents.policy import Policy
from agents.ppo import PPOArgs
from envs.trading import EnvState


def shape_key(args: PPOArgs, config: NetworkConfig) -> tuple[Any, ...]:
    """What pods of one population must share: the program's shapes and switches (the rest of their
    hyper-parameters may differ per pod). ``rebalance_rate`` and ``init_log_std`` are per pod."""
    arch = dataclasses.replace(config, rebalance_rate=1.0, init_log_std=0.0)
    return (arch, args.num_steps, args.num_minibatches, args.norm_adv, args.clip_vloss, args.norm_obs)


@dataclass
class PodSetup:
    """One pod's starting point for a round: what ``ppo.train(args, env, init=...)`` would start from."""

    policy: Policy  # the starting policy (fresh, or a copy of the parent's); its config fixes the shapes
    optimizer_state: dict | None  # the parent's Adam state (None: a fresh optimizer)
    args: PPOArgs  # the pod's hyper-parameters, seed and total_steps (this round's env-steps)
    deadline: float | None = None  # time.monotonic() after which the pod stops after its update


def concat_states(states: Sequence[EnvState]) -> EnvState:
    """Several pods' env states (each its own reset) as the state of one env batch, pod-major."""
    return EnvState(
        **{f.name: torch.cat([getattr(s, f.name) for s in states]) for f in dataclasses.fields(EnvState)}
    )
