"""The direct learner's nonlinear start: the ridge start plus a small network of each asset's features.

A linear score of the features cannot use an edge that lives in their interaction (the planted
``nonlinear`` shape: the sign of one move depends on another, ``data.planted``), and the direct
gradient, started from the ridge, mostly moves the network's linear parts. So with
``DirectArgs.nonlinear_start`` a fresh policy's per-asset encoder (``asset_layers = 1``: ``h_a =
relu(W z_a + b)`` on the normalized inputs ``z_a``) is fitted, before any gradient step, as a
regression on the same rows and target as the ridge start (``agents.linear_start.start_panels``):

- **fit**: ``score_a = ridge(x_a) + v . relu(W z_a + b)`` with the ridge fixed (its scores an offset:
  the network fits what the ridge leaves), on the fit rows' tradable names, the target demeaned across
  names and scaled by its standard deviation; full-batch AdamW on the squared error, ``v`` started at
  zero (the first candidate is the ridge itself), ``W`` from the seeded orthogonal init. The
  normalized inputs are the policy's own (its observation statistics, fitted on the train window's fit
  rows before this), so the fitted ``W`` is the encoder's.
- **early stopping**: every few epochs the held-out tail's information coefficient of the combined
  score; the best epoch is kept **only if it beats the ridge's by two standard errors** (the paired
  difference of the two scores' per-row coefficients on the tail, the ridge's 0 for the zero model),
  else the start stays the ridge's (the read-out at zero: the encoder is unused). Why the margin: on
  a tail of a few dozen rows, the best of many epochs beats the ridge on noise about half the time.
- **the policy**: the encoder's weights on the features and bias set to ``W`` and ``b`` (zero on
  the position weight and tradable flag), the actor read-out's bias to ``v`` and its weights to zero
  (so the read-out ignores the context at first), the skip to the ridge, all times one temperature
  chosen as the ridge start's is (``top_mass`` of the book on the top 20% by the combined score), the
  cash logit's bias at the combined scores' average level.

The tournament's validation window is never read. The seed of the fit is the pod's, so fresh pods
start from different fits: a population of starts, not one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from agents.linear_start import DecisionBars, LinearStart, temperature_for
from agents.policy import Policy
from backtests.linear import DecisionRows, demean
from data.errors import ConfigError

#: Epochs between two held-out checks, and checks without a better one before the fit stops.
CHECK_EVERY = 5
PATIENCE = 10


@dataclass(frozen=True)
class NonlinearStart:
    """The fitted network: ``weight (H, F)`` and ``bias (H,)`` on the normalized features, the
    read-out ``v (H,)`` in the ridge score's units, the held-out tail's IC and the epochs run."""

    weight: Tensor
    bias: Tensor
    readout: Tensor
    holdout_ic: float
    epochs: int

    def scores(self, z: Tensor) -> Tensor:
        """The network's part of the score, ``(..., A)``, of normalized features ``(..., A, F)``."""
        return torch.relu(z @ self.weight.T + self.bias) @ self.readout


def normalized_features(policy: Policy, x: Tensor) -> Tensor:
    """Raw features ``(..., A, F)`` as the policy's observation normalizer feeds them to its network."""
    norm = policy.obs_norm
    mean = norm.mean_asset[2:].to(x.device, torch.float32)
    scale = torch.sqrt(norm.var_asset[2:] + norm.eps).to(x.device, torch.float32)
    return ((x.to(torch.float32) - mean) / scale).clamp(-norm.clip, norm.clip)


#: Standard errors by which the network's held-out IC must beat the ridge's to be kept.
MARGIN = 2.0


def row_ics(scores: Tensor, panel: DecisionRows) -> Tensor:
    """Per-row cross-sectional Pearson correlation of ``scores (K, A)`` with ``panel``'s target (as
    ``backtests.linear.information_coefficient``, whose mean it is; 0 for a row without spread)."""
    s = demean(scores.to(torch.float64), panel.ok)
    y = demean(panel.y, panel.ok)
    den = (s.square().sum(dim=1) * y.square().sum(dim=1)).sqrt()
    use = (panel.ok.sum(dim=1) >= 3) & (den > 0)
    return torch.where(use, (s * y).sum(dim=1) / den.clamp(min=1e-300), torch.zeros_like(den))


def beats(candidate: Tensor, ridge: Tensor) -> bool:
    """Whether the per-row ICs ``candidate`` beat ``ridge``'s by :data:`MARGIN` standard errors."""
    diff = candidate - ridge
    if diff.numel() < 3:
        return False
    se = float(diff.std()) / math.sqrt(diff.numel())
    return se > 0 and float(diff.mean()) > MARGIN * se


def _scaled_target(panel: DecisionRows) -> Tensor:
    y = demean(panel.y, panel.ok).to(torch.float32)
    sd = y[panel.ok].std() if int(panel.ok.sum()) > 1 else torch.tensor(0.0)
    return y / sd if float(sd) > 0 else y


def fit_nonlinear_start(
    policy: Policy,
    fit: DecisionRows,
    tail: DecisionRows,
    ridge: LinearStart,
    *,
    seed: int,
    epochs: int = 300,
    learning_rate: float = 3e-3,
    weight_decay: float = 1e-3,
) -> NonlinearStart | None:
    """The network fitted to the ridge's residual on ``fit``, early-stopped on ``tail``; None when the
    best epoch's held-out IC does not beat the ridge's by :data:`MARGIN` standard errors."""
    hidden = int(policy.config.embed)
    num_features = fit.x.shape[-1]
    if int(fit.ok.sum()) <= num_features or int(tail.ok.sum()) == 0:
        return None
    y = _scaled_target(fit)
    y_sd = float(demean(fit.y, fit.ok)[fit.ok].std())
    if not y_sd > 0:
        return None
    z_fit, z_tail = normalized_features(policy, fit.x), normalized_features(policy, tail.x)
    offset_fit = ridge.scores(fit.x.to(torch.float32)) / y_sd
    offset_tail = ridge.scores(tail.x.to(torch.float32))
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    weight = torch.empty(hidden, num_features)
    torch.nn.init.orthogonal_(weight, math.sqrt(2), generator=gen)
    layer = torch.nn.Parameter(weight.to(z_fit.device))
    bias = torch.nn.Parameter(torch.zeros(hidden, device=z_fit.device))
    readout = torch.nn.Parameter(torch.zeros(hidden, device=z_fit.device))
    opt = torch.optim.AdamW([layer, bias, readout], lr=learning_rate, weight_decay=weight_decay)
    mask = fit.ok.to(torch.float32)
    ridge_rows = row_ics(offset_tail, tail)
    best_ic, best, stale = float(ridge_rows.mean()), None, 0
    for epoch in range(1, epochs + 1):
        opt.zero_grad()
        pred = offset_fit + torch.relu(z_fit @ layer.T + bias) @ readout
        ((pred - y).square() * mask).sum().div(mask.sum()).backward()
        opt.step()
        if epoch % CHECK_EVERY:
            continue
        with torch.no_grad():
            rows = row_ics(offset_tail + torch.relu(z_tail @ layer.T + bias) @ readout * y_sd, tail)
        if float(rows.mean()) > best_ic:
            best_ic, stale = float(rows.mean()), 0
            best = (layer.detach().clone(), bias.detach().clone(), readout.detach() * y_sd, epoch, rows)
        elif (stale := stale + 1) >= PATIENCE:
            break
    if best is None or not beats(best[4], ridge_rows):
        return None
    return NonlinearStart(weight=best[0], bias=best[1], readout=best[2], holdout_ic=best_ic, epochs=best[3])


@torch.no_grad()
def apply_nonlinear_start(
    policy: Policy, ridge: LinearStart, start: NonlinearStart, d: DecisionBars, rows: Tensor, mass: float
) -> float:
    """Set ``policy``'s encoder, read-out, skip and cash logit to ridge + network (module docstring;
    its observation statistics fitted already), the temperature and level read on decision ``rows``
    (the fit rows it trades at); returns the temperature."""
    net, norm = policy.net, policy.obs_norm
    if policy.config.asset_layers != 1 or not policy.config.linear_skip:
        raise ConfigError("the nonlinear start needs asset_layers = 1 and the linear start")
    x = d.features[rows]
    combined = ridge.scores(x) + start.scores(normalized_features(policy, x))
    temperature = temperature_for(combined, d.tradable[rows], mass)
    if temperature <= 0.0:
        return 0.0
    sd = torch.sqrt(norm.var_asset[2:] + norm.eps)
    skip = torch.zeros_like(net.asset_skip.weight)
    skip[0, 2:] = temperature * ridge.coef.to(sd.device) * sd
    net.asset_skip.weight.copy_(skip)
    encoder = net.encoder[0]
    encoder.weight.zero_()
    encoder.weight[:, 2:] = start.weight
    encoder.bias.copy_(start.bias)
    net.actor_readout.weight.zero_()
    net.actor_readout.bias.copy_(temperature * start.readout)
    net.actor_cash.weight.zero_()
    # the network's asset logit: T * (coef . (x - mean) + v . h); the cash logit at its average level
    level = combined.mean() - (ridge.coef.to(sd.device) * norm.mean_asset[2:]).sum()
    net.actor_cash.bias.fill_(float(temperature * level))
    return temperature
