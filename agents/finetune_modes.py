"""What a direct fine-tuning moves and what its held-out looks judge (``DirectArgs.finetune`` and
``average_weights``, study settings of :mod:`agents.direct`): the running mean of the iterates
(:class:`Average`), the trading rule of a fixed network (:class:`Rule`), and the tensors a mode
leaves out of the backward pass (:func:`frozen`)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from agents.networks import NetworkConfig
from agents.policy import Policy

#: The linear skip's weight (``agents.networks``): what ``finetune = "skip"`` trains.
SKIP = "asset_skip.weight"
#: The layers every logit is linear in (``agents.networks.PerAssetActorCritic``: the asset read-out,
#: the cash logit and the skip): scaling their weights scales the logits (``finetune = "rule"``).
LOGIT_LAYERS = ("actor_readout.", "actor_cash.", SKIP)
#: ``finetune = "rule"``: the AdamW learning rate of its two numbers, log-offsets of order one where a
#: network's weights are of order 0.01-1 (so not the pod's ``learning_rate``), with no weight decay
#: and torch's default epsilon (the rule's figures in docs/benchmarks.md ran so).
RULE_LR = 0.02


def set_config(policy: Policy, config: NetworkConfig) -> None:
    """Give the policy and its network ``config`` (a rule's rebalance rate lives in it)."""
    policy.config = config
    policy.net.config = config


@contextlib.contextmanager
def _restored(policy: Policy) -> Iterator[None]:
    """The policy's network weights and config as they were, again after the block (what
    :meth:`Average.loaded` and :meth:`Rule.loaded` load is only lent)."""
    own, config = copy.deepcopy(policy.net.state_dict()), policy.config
    try:
        yield
    finally:
        policy.net.load_state_dict(own)
        set_config(policy, config)


class Average:
    """The running mean of a policy's network weights over the iterates added (``average_weights``:
    Polyak averaging by ``torch.optim.swa_utils.AveragedModel``). The observation normalizer lives
    outside the network and is frozen before the first iterate is added, so the mean sees the inputs
    every iterate was trained on."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.mean = torch.optim.swa_utils.AveragedModel(policy.net)

    def add(self) -> None:
        """Fold the network's current weights into the mean."""
        self.mean.update_parameters(self.policy.net)

    @contextlib.contextmanager
    def loaded(self) -> Iterator[None]:
        """The network holds the mean inside the block and its own weights again after it."""
        with _restored(self.policy):
            self.policy.net.load_state_dict(self.mean.module.state_dict())
            yield


class Rule(torch.nn.Module):
    """``finetune = "rule"``: a fixed network's trading rule, two numbers the gradient moves, each a
    log-offset from the start's and zero at the start: the logits' scale (a softmax temperature: how
    much of the book its top names hold) and the rebalance rate (how far a decision moves toward its
    target: the turnover the edge is bought with; at most 1). Where the gradient of thousands of
    weights fits the train window's noise, two numbers that set the edge against its costs might
    carry over to a window they did not see."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.base_rate = float(policy.config.rebalance_rate)
        self.log_scale = torch.nn.Parameter(torch.zeros((), device=policy.device))
        self.log_rate = torch.nn.Parameter(torch.zeros((), device=policy.device))

    def scale(self) -> Tensor:
        return self.log_scale.exp()

    def rate(self) -> Tensor:
        return self.base_rate * self.log_rate.exp()

    @torch.no_grad()
    def project(self) -> None:
        """Keep the rate at most 1 by keeping its log-offset at most ``-log(base rate)`` (after each
        step: a projected gradient, so the rate's gradient flows at 1 too and a start that trades
        the whole way, as an ``open`` pod's does, may learn to trade part of it)."""
        self.log_rate.clamp_(max=-math.log(self.base_rate))

    @contextlib.contextmanager
    def loaded(self, policy: Policy) -> Iterator[None]:
        """Inside the block the policy trades by the rule as a policy of its own (its logits' layers
        scaled, its config's rebalance rate set: what a look judges and a backtest runs); its own
        weights and config after. At zero offsets it is the start bit for bit."""
        scale = math.exp(float(self.log_scale.detach()))
        # (project keeps the offset at most -log(base rate); min holds the product to 1 past rounding)
        rate = min(1.0, self.base_rate * math.exp(float(self.log_rate.detach())))
        with _restored(policy):
            with torch.no_grad():
                for name, tensor in policy.net.named_parameters():
                    if name.startswith(LOGIT_LAYERS):
                        tensor.mul_(scale)
            set_config(policy, dataclasses.replace(policy.config, rebalance_rate=rate))  # (to_action's)
            yield


@contextlib.contextmanager
def frozen(policy: Policy, finetune: str) -> Iterator[None]:
    """The network's tensors the gradient does not move under ``finetune`` ask for no gradient inside
    the block (``"skip"``: all but the skip; ``"rule"``: all), so the backward pass skips their
    work; as they were after."""
    still = [
        t
        for name, t in policy.net.named_parameters()
        if finetune == "rule" or (finetune == "skip" and name != SKIP)
    ]
    flags = [t.requires_grad for t in still]
    for tensor in still:
        tensor.requires_grad_(False)
    try:
        yield
    finally:
        for tensor, flag in zip(still, flags, strict=True):
            tensor.requires_grad_(flag)
