"""Networks over the trading observation: a per-asset encoder shared across assets + pooled context.

Why this shape: a flat MLP on the ``2 + A * (2 + F)``-wide observation spends
nearly all of its FLOPs in the first layer and learns a separate weight for every ticker. Here one
small encoder is applied to every asset (its position weight + its features), so the cost grows as
``A * (2 + F) * embed``, every ticker is treated alike, and the same weights work for any universe
size. Mean- and max-pooled embeddings plus cash fraction and time of day form the portfolio context.

Outputs (``PerAssetActorCritic``):
- actor: ``A + 1`` logits (one per asset, the last one for cash). In ``"weights"`` mode the action is
  ``softmax(logits)[:, :A]`` (long-only, sums to at most 1, the rest is cash).
- critic: one state value from the context.

:func:`flops_per_sample` counts the multiply-adds of one forward pass, so the size can be chosen
against the throughput budget.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from envs.observation import NUM_GLOBAL, asset_width  # obs[:, :NUM_GLOBAL]: cash fraction, time of day


@dataclass(frozen=True)
class NetworkConfig:
    """Sizes of :class:`PerAssetActorCritic` (saved in the policy spec)."""

    num_assets: int  # A
    num_features: int  # F (per asset, excluding the position weight)
    embed: int = 16  # per-asset embedding width
    hidden: int = 64  # width of the pooled-context and critic layers
    asset_layers: int = 0  # depth of the shared per-asset encoder (0: linear, evaluated factored)
    init_log_std: float = -0.5  # initial log-std of the Gaussian over logits
    # "weights" mode: move this fraction of the way from the current weights to the softmax target
    # at each decision (1.0 = full rebalance). See agents.policy.raw_to_action.
    rebalance_rate: float = 1.0
    # "weights" mode: a decision whose time of day (``envs.observation.TIME_OF_DAY``: the fraction of
    # its session elapsed at the decision bar's close) is above this holds the current weights instead
    # of trading (1.0: every decision trades; at 15-minute decisions of 390-minute sessions, 0.03
    # trades at each session's first decision only and holds the book through the session). See
    # agents.policy.Policy.to_action. Policies saved without the key trade at every decision.
    trade_window: float = 1.0
    # asset_layers >= 1: the encoder reads each asset's features minus their mean across the assets
    # (its position weight and tradable flag as they are): a cross-sectional network, whose units see
    # a name's move against the others' and not the market's (agents.nonlinear_start fits it so).
    demean_features: bool = False
    # A linear read-out of each asset's own normalized inputs added to its logit (``asset_skip``):
    # the direct learner sets it from a ridge fit (agents.linear_start). Policies saved without the
    # key have none.
    linear_skip: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.trade_window <= 1.0:
            raise ValueError(f"trade_window must be in (0, 1], got {self.trade_window}")
        if self.demean_features and self.asset_layers < 1:
            raise ValueError("demean_features needs asset_layers >= 1")

    @property
    def obs_dim(self) -> int:
        return NUM_GLOBAL + self.num_assets * asset_width(self.num_features)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _layer(in_dim: int, out_dim: int, std: float = math.sqrt(2)) -> nn.Linear:
    """Orthogonal init, zero bias (as in the PPO implementation-details study)."""
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class PerAssetActorCritic(nn.Module):
    """Actor (``A + 1`` logits + a learned log-std) and critic over normalized observations.

    - encoder (shared by all assets): ``h_a = relu(W x_a + b)``, ``x_a`` = (weight, features) of a.
    - context: ``c = tanh(W_c [mean_a h_a, sum_a w_a h_a, cash, time of day])``; the weighted sum
      tells the critic and actor what the current portfolio holds.
    - actor: asset logit ``l_a = q(c) . h_a`` (a context-dependent read-out of the asset's own
      embedding), cash logit from ``c``.
    - critic: an MLP on ``c``.
    - skip (``config.linear_skip``): ``l_a += s . x_a``, a linear score of the asset's own inputs.

    The per-asset part is one small matmul and one ReLU over ``(N, A, E)``: on a CPU the element-wise
    work over that tensor (activations, their backward, broadcast adds, max-pool masks) costs more
    than the matmuls, so the design keeps it to a minimum (measured; see docs/agents.md).
    """

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.config = config
        e, h = config.embed, config.hidden
        if config.asset_layers < 0:
            raise ValueError(f"asset_layers must be >= 0, got {config.asset_layers}")
        layers: list[nn.Module] = [_layer(asset_width(config.num_features), e)]
        if config.asset_layers > 0:
            layers.append(nn.ReLU())
        for _ in range(config.asset_layers - 1):
            layers += [_layer(e, e), nn.ReLU()]
        self.encoder = nn.Sequential(*layers)  # shared by every asset
        self.context = nn.Sequential(_layer(2 * e + NUM_GLOBAL, h), nn.Tanh())
        # Small init of the read-out and the cash logit: the first policy is near equal weights.
        self.actor_readout = _layer(h, e, std=0.01)
        self.actor_cash = _layer(h, 1, std=0.01)
        self.critic = nn.Sequential(_layer(h, h), nn.Tanh(), _layer(h, 1, std=1.0))
        if config.linear_skip:  # l_a += s . x_a (zero at init: the network's own logits alone)
            self.asset_skip = nn.Linear(asset_width(config.num_features), 1, bias=False)
            nn.init.zeros_(self.asset_skip.weight)
        # One log-std for all asset logits and one for cash: keeps the net universe-size independent.
        self.log_std = nn.Parameter(torch.full((2,), float(config.init_log_std)))

    def _trunk(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(per-asset representation, context (N, H))``: embeddings ``(N, A, E)``, or with a
        linear encoder the inputs ``(N, A, 2 + F)`` themselves (see :meth:`actor_from`)."""
        n = obs.shape[0]
        glob = obs[:, :NUM_GLOBAL]  # (N, 2)
        per_asset = obs[:, NUM_GLOBAL:].reshape(
            n, self.config.num_assets, asset_width(self.config.num_features)
        )
        weight = per_asset[:, :, :1]  # (N, A, 1) normalized position weights
        if self.config.asset_layers == 0:
            # Linear encoder h_a = W x_a + b: pool the inputs first, then project (exactly the same
            # function, but no (N, A, E) tensor is ever built).
            lin = self.encoder[0]
            mean_emb = lin(per_asset.mean(dim=1))  # (N, E) = mean_a h_a
            held = (weight * per_asset).sum(dim=1) @ lin.weight.T + weight.sum(
                dim=1
            ) * lin.bias  # sum_a w_a h_a
            return per_asset, self.context(torch.cat([mean_emb, held, glob], dim=1))
        if self.config.demean_features:
            feats = per_asset[:, :, 2:]
            per_asset = torch.cat([per_asset[:, :, :2], feats - feats.mean(dim=1, keepdim=True)], dim=-1)
        emb = self.encoder(per_asset)  # (N, A, E)
        # Element-wise products + sums: batched tiny matmuls (bmm) are far slower on a CPU.
        held = (weight * emb).sum(dim=1)  # (N, E): sum_a w_a h_a
        pooled = torch.cat([emb.sum(dim=1) * (1.0 / emb.shape[1]), held, glob], dim=1)  # (N, 2E + 2)
        return emb, self.context(pooled)  # (N, A, E), (N, H)

    # --- the packed form (training) -------------------------------------------------------------
    # PPO evaluates the network many times on the same observations (a rollout, then 4 epochs). The
    # linear encoder's pooled inputs do not depend on the weights, so they are computed once per
    # observation (``pack``) and the per-asset inputs are stored asset-minor, ``(N, 2 + F, A)``: the
    # one per-asset product left, ``l_a = u . x_a``, is then a batched (1 x X) @ (X x A) matmul whose
    # backward is another, instead of broadcast products and reductions over a size-10 innermost
    # dim, several times slower forward + backward (docs/benchmarks.md).
    # ``forward_packed(*pack(obs))`` equals ``forward(obs)`` to float rounding (tests check it).

    def pack(self, obs: Tensor) -> tuple[Tensor, ...]:
        """Weight-free inputs of :meth:`forward_packed` for normalized observations ``(N, obs_dim)``:
        ``(assets (N, 2 + F, A), pooled (N, 2 * (2 + F) + 1 + NUM_GLOBAL))`` with a linear encoder
        (``pooled`` = mean over assets, position-weighted sum, sum of weights, global inputs), else
        ``(obs,)`` unchanged."""
        if self.config.asset_layers != 0:
            return (obs,)
        n, a, x = obs.shape[0], self.config.num_assets, asset_width(self.config.num_features)
        assets = obs[:, NUM_GLOBAL:].reshape(n, a, x).transpose(1, 2).contiguous()  # (N, X, A)
        weight = assets[:, 0, :]  # (N, A) normalized position weights
        held = torch.bmm(assets, weight.unsqueeze(-1)).squeeze(-1)  # (N, X): sum_a w_a x_a
        pooled = torch.cat(
            [assets.mean(dim=-1), held, weight.sum(dim=-1, keepdim=True), obs[:, :NUM_GLOBAL]], dim=1
        )
        return assets, pooled

    def forward_packed(self, *packed: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`forward` on the output of :meth:`pack`."""
        if self.config.asset_layers != 0:
            return self.forward(*packed)
        assets, pooled = packed
        x = assets.shape[1]
        lin = self.encoder[0]
        mean_in, held_in, weight_sum, glob = pooled.split([x, x, 1, NUM_GLOBAL], dim=1)
        mean_emb = lin(mean_in)  # mean_a h_a
        held = held_in @ lin.weight.T + weight_sum * lin.bias  # sum_a w_a h_a
        ctx = self.context(torch.cat([mean_emb, held, glob], dim=1))
        readout = self.actor_readout(ctx)  # (N, E)
        # q . (W x_a + b) = (W^T q) . x_a + q . b, for every asset in one batched matmul
        asset_logits = torch.bmm((readout @ lin.weight).unsqueeze(1), assets).squeeze(1)
        asset_logits = asset_logits + readout @ lin.bias.unsqueeze(1)
        if self.config.linear_skip:  # s . x_a for every asset: (1, X) @ (N, X, A)
            asset_logits = asset_logits + (self.asset_skip.weight @ assets).squeeze(1)
        logits = torch.cat([asset_logits, self.actor_cash(ctx)], dim=1)
        return logits, self.critic(ctx).squeeze(-1)

    def actor_from(self, rep: Tensor, ctx: Tensor) -> Tensor:
        readout = self.actor_readout(ctx)  # (N, E)
        if self.config.asset_layers == 0:
            # q . (W x_a + b) = (W^T q) . x_a + q . b: fold the read-out into the input space.
            lin = self.encoder[0]
            asset_logits = (rep * (readout @ lin.weight).unsqueeze(1)).sum(
                dim=-1
            ) + readout @ lin.bias.unsqueeze(1)
        else:
            asset_logits = (rep * readout.unsqueeze(1)).sum(dim=-1)  # (N, A)
        return torch.cat([asset_logits, self.actor_cash(ctx)], dim=1)  # (N, A + 1)

    def with_skip(self, logits: Tensor, obs: Tensor) -> Tensor:
        """``logits (N, A + 1)`` plus the linear skip's asset scores (unchanged without one)."""
        if not self.config.linear_skip:
            return logits
        n, a = obs.shape[0], self.config.num_assets
        per_asset = obs[:, NUM_GLOBAL:].reshape(n, a, asset_width(self.config.num_features))
        skip = (per_asset @ self.asset_skip.weight.T).squeeze(-1)  # (N, A)
        return logits + torch.nn.functional.pad(skip, (0, 1))

    def std(self) -> Tensor:
        """``(A + 1,)`` standard deviation of the Gaussian over logits."""
        a = self.config.num_assets
        return torch.cat([self.log_std[:1].expand(a), self.log_std[1:]]).exp()

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean logits (N, A + 1), value (N,))`` for normalized observations ``(N, obs_dim)``."""
        emb, ctx = self._trunk(obs)
        return self.with_skip(self.actor_from(emb, ctx), obs), self.critic(ctx).squeeze(-1)

    def actor_mean(self, obs: Tensor) -> Tensor:
        emb, ctx = self._trunk(obs)
        return self.with_skip(self.actor_from(emb, ctx), obs)

    def value(self, obs: Tensor) -> Tensor:
        _, ctx = self._trunk(obs)
        return self.critic(ctx).squeeze(-1)


def flops_per_sample(config: NetworkConfig) -> dict[str, int]:
    """Multiply-adds of one forward pass per observation, by part (a backward pass costs ~2x)."""
    a, f, e, h = config.num_assets, config.num_features, config.embed, config.hidden
    x = asset_width(f)
    if config.asset_layers == 0:  # linear encoder, evaluated in factored form (see _trunk)
        parts = {
            "encoder": 2 * x * e,  # two pooled (2 + F)-vectors projected to E
            "pooling": 2 * a * x,  # mean and weighted sum of the per-asset inputs
            "context": (2 * e + NUM_GLOBAL) * h,
            "actor": h * e + e * x + a * x + h,  # read-out folded into input space, then A dot products
            "critic": h * h + h,
        }
    else:
        parts = {
            "encoder": a * (x * e + (config.asset_layers - 1) * e * e),
            "pooling": 2 * a * e,
            "context": (2 * e + NUM_GLOBAL) * h,
            "actor": a * e + h * e + h,
            "critic": h * h + h,
        }
    if config.linear_skip:
        parts["actor"] += a * x  # the skip's dot product per asset
    parts["total"] = sum(parts.values())
    return parts


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
