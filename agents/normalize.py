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
        """Fold a batch of raw observations ``(N, obs_dim)`` into the running statistics.

        Batch moments come from column sums of ``d = obs - shift`` over the full, contiguous width,
        folded per kind afterwards. Written by hand because it runs on every rollout step, where
        these sums are several times faster than ``Tensor.var`` over the leading dims of the
        ``(N, A, 2 + F)`` view (docs/benchmarks.md). Shifting by the running mean (the first
        batch: by its own mean) keeps ``E[d^2] - E[d]^2`` free of the cancellation raw sums suffer.
        """
        n, g = obs.shape[0], self.num_global
        a = (obs.shape[1] - g) // self.num_asset_inputs
        if self.count == 0:
            cols = obs.sum(dim=0) / n
            shift_g, shift_a = cols[:g], cols[g:].view(a, -1).mean(dim=0)
        else:
            shift_g, shift_a = self.mean_global, self.mean_asset
        d = obs - torch.cat([shift_g, shift_a.repeat(a)])
        s1 = d.sum(dim=0)
        s2 = d.square_().sum(dim=0)  # (in place: one (N, obs_dim) temporary, not two)
        batch_n = float(n)
        total = self.count + batch_n
        # Per-asset rows are A times as many as observations; weighting both by observation count
        # keeps the two groups' statistics on the same (observation) time scale.
        groups = (
            ("global", shift_g, s1[:g] / n, s2[:g] / n),
            (
                "asset",
                shift_a,
                s1[g:].view(a, -1).sum(dim=0) / (n * a),
                s2[g:].view(a, -1).sum(dim=0) / (n * a),
            ),
        )
        for name, shift, m1, m2_batch in groups:
            mean = getattr(self, f"mean_{name}")
            var = getattr(self, f"var_{name}")
            b_mean, b_var = shift + m1, (m2_batch - m1.square()).clamp_min(0.0)
            delta = b_mean - mean
            old_n = self.count
            new_mean = mean + delta * (batch_n / total)
            m2 = var * old_n + b_var * batch_n + delta.square() * (old_n * batch_n / total)
            mean.copy_(new_mean)
            var.copy_(m2 / total)
        self.count = total

    def normalize(self, obs: Tensor) -> Tensor:
        """Normalized and clipped observations; the statistics are not changed."""
        # One pass per op over the full width (statistics tiled per asset) instead of splitting,
        # normalizing the parts and concatenating: element for element the same arithmetic,
        # (x - mean) / sqrt(var + eps) then the clip, so the result is bitwise the same, in ~half
        # the time on the rollout's (256, 1002) batches.
        num_assets = (obs.shape[1] - self.num_global) // self.num_asset_inputs
        mean = torch.cat([self.mean_global, self.mean_asset.repeat(num_assets)])
        scale = torch.cat(
            [torch.sqrt(self.var_global + self.eps), torch.sqrt(self.var_asset + self.eps).repeat(num_assets)]
        )
        return torch.sub(obs, mean).div_(scale).clamp_(-self.clip, self.clip)

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
