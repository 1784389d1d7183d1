"""Running observation normalization, on the device, shared across assets.

The statistics are kept per *kind* of input, not per observation column: two for the global part
(cash fraction, time of day) and ``2 + F`` for the per-asset part (position weight, tradable flag, features), pooled
over all assets. That keeps the policy permutation-equivariant over tickers (every asset is
normalized alike), keeps the spec small, and lets a policy survive a change of universe size.

``update`` is called by the learners on raw observations during collection; evaluation, backtests and
export use the frozen statistics (``normalize`` never updates them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


def _shifted_moments(x: Tensor, shift: Tensor, dims: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Batch mean and (biased) variance of ``x`` over ``dims``, from sums of ``d = x - shift``.

    Written by hand because it is on every rollout step: ``Tensor.var`` over the leading dims of a
    ``(N, A, 2 + F)`` batch measured ~570 µs at 256 x 100 x 10 on a 2-core CPU, two plain sums of
    the shifted values ~80 µs. Shifting by the running mean (close to the batch mean once a few
    batches are in; the first batch uses its own mean) keeps ``E[d^2] - E[d]^2`` free of the cancellation
    that raw sums would suffer.
    """
    d = x - shift
    n = float(d.numel() // d.shape[-1])
    m1 = d.sum(dim=dims) / n
    m2 = d.square().sum(dim=dims) / n
    return shift + m1, (m2 - m1.square()).clamp_min_(0.0)


class ObsNormalizer(nn.Module):
    """Running mean/variance (Chan et al. parallel update) of global and per-asset inputs."""

    def __init__(
        self,
        num_global: int,
        num_asset_inputs: int,
        *,
        clip: float = 10.0,
        eps: float = 1e-8,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        self.num_global = num_global
        self.num_asset_inputs = num_asset_inputs
        self.clip = float(clip)
        self.eps = float(eps)
        # Buffers (not parameters): the optimizer never touches them; they move with .to(device).
        self.register_buffer("mean_global", torch.zeros(num_global, device=device))  # (2,)
        self.register_buffer("var_global", torch.ones(num_global, device=device))  # (2,)
        self.register_buffer("mean_asset", torch.zeros(num_asset_inputs, device=device))  # (2+F,)
        self.register_buffer("var_asset", torch.ones(num_asset_inputs, device=device))  # (2+F,)
        # A host-side Python float (float64): a float32 count stops incrementing exactly at millions
        # of samples, and some devices (MPS) have no float64 tensors.
        self.count = 0.0

    def _split(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        glob = obs[:, : self.num_global]
        per_asset = obs[:, self.num_global :].reshape(obs.shape[0], -1, self.num_asset_inputs)
        return glob, per_asset

    @torch.no_grad()
    def update(self, obs: Tensor) -> None:
        """Fold a batch of raw observations ``(N, obs_dim)`` into the running statistics."""
        glob, per_asset = self._split(obs)
        batch_n = float(obs.shape[0])
        total = self.count + batch_n
        # Per-asset rows are A times as many as observations; weighting both by observation count
        # keeps the two groups' statistics on the same (observation) time scale.
        for name, x, dims in (("global", glob, (0,)), ("asset", per_asset, (0, 1))):
            mean = getattr(self, f"mean_{name}")
            var = getattr(self, f"var_{name}")
            # The first batch is shifted by its own mean (the running one is still 0).
            shift = x.mean(dim=dims) if self.count == 0 else mean
            b_mean, b_var = _shifted_moments(x, shift, dims)
            delta = b_mean - mean
            old_n = self.count
            new_mean = mean + delta * (batch_n / total)
            m2 = var * old_n + b_var * batch_n + delta.square() * (old_n * batch_n / total)
            mean.copy_(new_mean)
            var.copy_(m2 / total)
        self.count = total

    def normalize(self, obs: Tensor) -> Tensor:
        """Normalized and clipped observations; the statistics are not changed."""
        glob, per_asset = self._split(obs)
        g = (glob - self.mean_global) / torch.sqrt(self.var_global + self.eps)
        a = (per_asset - self.mean_asset) / torch.sqrt(self.var_asset + self.eps)
        out = torch.cat([g, a.reshape(obs.shape[0], -1)], dim=1)
        return out.clamp(-self.clip, self.clip)

    def forward(self, obs: Tensor) -> Tensor:
        return self.normalize(obs)

    def to_spec(self) -> dict[str, Any]:
        """JSON-able statistics (saved in ``spec.json``; read by export)."""
        return {
            "kind": "running_mean_std_shared_across_assets",
            "mean_global": self.mean_global.cpu().tolist(),
            "var_global": self.var_global.cpu().tolist(),
            "mean_asset": self.mean_asset.cpu().tolist(),
            "var_asset": self.var_asset.cpu().tolist(),
            "count": float(self.count),
            "clip": self.clip,
            "eps": self.eps,
        }

    @torch.no_grad()
    def load_spec(self, spec: dict[str, Any]) -> None:
        """Restore statistics written by :meth:`to_spec` (shapes checked by the caller)."""
        device = self.mean_global.device
        for name in ("mean_global", "var_global", "mean_asset", "var_asset"):
            values = torch.as_tensor(spec[name], dtype=torch.float32, device=device)
            buf = getattr(self, name)
            if values.shape != buf.shape:
                raise ValueError(
                    f"normalization {name} has shape {tuple(values.shape)}, expected {tuple(buf.shape)}"
                )
            buf.copy_(values)
        self.count = float(spec["count"])
        self.clip = float(spec["clip"])
        self.eps = float(spec["eps"])

    @torch.no_grad()
    def copy_from(self, other: ObsNormalizer) -> None:
        """Copy another normalizer's statistics (warm starts)."""
        self.load_spec(other.to_spec())
