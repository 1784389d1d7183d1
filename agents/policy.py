"""``Policy``: the one trained artifact used everywhere (training eval, backtests, export, paper).

A policy is a :class:`~agents.networks.PerAssetActorCritic` plus its frozen observation normalizer
and the action post-processing of the env's action space:

- ``"weights"``: a diagonal Gaussian over ``A + 1`` logits (assets + cash) with a learned log-std;
  the action is ``softmax(raw)[:, :A]`` (long-only target weights, the rest cash). Learners keep the
  raw pre-softmax sample for log-probabilities; the deterministic action uses the mean logits.
- ``"shares"``: a Gaussian over ``A`` values, clamped to ``[-1, 1]`` (delta shares in units of
  ``max_shares``), the cash logit unused.

``policy(obs)`` (a plain callable) is ``act(obs, deterministic=True)``, so backtests can take it as
``Callable[[Tensor], Tensor]``.

On disk (no pickle anywhere): ``policy.safetensors`` (weights) + ``spec.json`` (architecture, dims,
tickers, normalization statistics, versions, and the weights' sha256, so a truncated or swapped
weights file is caught). Any missing, truncated, non-JSON or mismatched file raises
:class:`data.errors.CheckpointError`. A policy with its optimizer state: :mod:`agents.checkpoint`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import platform
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from agents.networks import NUM_GLOBAL, NetworkConfig, PerAssetActorCritic
from agents.normalize import ObsNormalizer
from data.artifact import Artifact
from data.atomic import atomic_write_bytes
from data.errors import ArtifactError, CheckpointError
from envs.observation import TIME_OF_DAY, asset_width

SPEC_FORMAT = "podracer-policy"
SPEC_VERSION = 1
ACTION_MODES = ("weights", "shares")


def _versions() -> dict[str, str]:
    return dict(_installed_versions())


@functools.cache  # (a metadata lookup scans the installed distributions: milliseconds, once per process)
def _installed_versions() -> tuple[tuple[str, str], ...]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("podracer", "safetensors", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return tuple(out.items())


# --- action distribution ---------------------------------------------------------------------------


def gaussian_log_prob(raw: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """``(N,)`` log-density of the raw sample under a diagonal Gaussian (summed over dims)."""
    var = std.square()
    return (-((raw - mean).square()) / (2 * var) - std.log() - 0.5 * math.log(2 * math.pi)).sum(dim=-1)


def gaussian_entropy(std: Tensor) -> Tensor:
    """Entropy of a diagonal Gaussian with per-dim ``std`` (the same for every sample)."""
    return (0.5 + 0.5 * math.log(2 * math.pi) + std.log()).sum(dim=-1)


def current_weights(obs: Tensor, num_assets: int) -> Tensor:
    """Position weights ``(N, A)`` in a raw observation (layout of ``envs.observation.split_obs``)."""
    return obs[:, NUM_GLOBAL:].reshape(obs.shape[0], num_assets, -1)[..., 0]


def raw_to_action(
    raw: Tensor,
    action_mode: str,
    num_assets: int,
    current: Tensor | None = None,
    rebalance_rate: float | Tensor = 1.0,
) -> Tensor:
    """Map a raw sample (or the mean) to the env's action space, ``(N, A)``.

    ``"weights"``: the target is ``softmax(raw)[:, :A]``; with ``rebalance_rate < 1`` the action moves
    only that fraction of the way from the ``current`` weights to the target (a convex combination of
    two long-only weight vectors, so still long-only with sum <= 1). Why: trading costs are paid on
    every change, and a target that jitters with fast features would be paid for at every decision;
    partial rebalancing smooths the target (an exponential average over decisions), and a persistent
    signal is still followed.
    """
    if action_mode == "weights":
        target = torch.softmax(raw, dim=-1)[..., :num_assets]
        if not isinstance(rebalance_rate, Tensor) and rebalance_rate >= 1.0:
            return target  # (a tensor rate blends even at 1: its gradient flows there too)
        if current is None:
            raise ValueError("partial rebalancing needs the current weights (pass the observation)")
        return current + rebalance_rate * (target - current)
    return raw[..., :num_assets].clamp(-1.0, 1.0)


# --- policy ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyMeta:
    """What the policy was trained for (saved in the spec; tickers/features may be empty)."""

    algo: str = "ppo"
    action_mode: str = "weights"
    tickers: tuple[str, ...] = ()
    feature_names: tuple[str, ...] = ()


class Policy(nn.Module):
    """Network + observation normalizer + action post-processing; ``policy(obs) -> action``."""

    def __init__(
        self,
        config: NetworkConfig,
        meta: PolicyMeta | None = None,
        device: str | torch.device = "cpu",
        *,
        init: bool = True,
    ) -> None:
        """``init=False``: the network's weights are left uninitialised, for a caller that loads every
        one of them next (a checkpoint, a copy): building it on the meta device skips the
        initialisation's work, most of the cost of a policy made once per pod per round."""
        super().__init__()
        meta = meta or PolicyMeta()
        if meta.action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {meta.action_mode!r}")
        self.config = config
        self.meta = meta
        if init:
            self.net = PerAssetActorCritic(config).to(device)
        else:
            with torch.device("meta"):
                net = PerAssetActorCritic(config)
            self.net = net.to_empty(device=device)
        self.obs_norm = ObsNormalizer(NUM_GLOBAL, asset_width(config.num_features), device=device)

    # sizes
    @property
    def num_assets(self) -> int:
        return self.config.num_assets

    @property
    def obs_dim(self) -> int:
        return self.config.obs_dim

    @property
    def raw_dim(self) -> int:
        """Dimensions of the Gaussian sample: ``A + 1`` (weights, with cash) or ``A`` (shares)."""
        return self.num_assets + 1 if self.meta.action_mode == "weights" else self.num_assets

    @property
    def device(self) -> torch.device:
        return self.net.log_std.device

    # distribution pieces used by the learners (observations already normalized)
    def dist_params(self, norm_obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(mean (N, raw_dim), std (raw_dim,), value (N,))`` for normalized observations."""
        mean, value = self.net(norm_obs)
        return mean[:, : self.raw_dim], self.net.std()[: self.raw_dim], value

    def dist_params_packed(self, packed: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`dist_params` on ``net.pack(norm_obs)`` (the learners' form; see ``agents.networks``)."""
        mean, value = self.net.forward_packed(*packed)
        return mean[:, : self.raw_dim], self.net.std()[: self.raw_dim], value

    def to_action(self, raw: Tensor, obs: Tensor | None = None, rate: float | Tensor | None = None) -> Tensor:
        """The env action for a raw sample (or mean); ``obs`` (raw observations) is needed when
        ``config.rebalance_rate < 1`` (the move starts from the current weights) or
        ``config.trade_window < 1`` (a decision later in its session than the window holds the
        current weights: the target is the book as it stands, so nothing but the drift from the
        decision bar's close to the fill is traded). ``rate``: a rebalance rate in place of the
        config's (a tensor the gradient runs through: the direct learner's ``finetune = "rule"``)."""
        cfg = self.config
        rate = cfg.rebalance_rate if rate is None else rate
        weights = self.meta.action_mode == "weights"
        window = weights and cfg.trade_window < 1.0
        current = None
        if obs is not None and weights and (isinstance(rate, Tensor) or rate < 1.0 or window):
            current = current_weights(obs, self.num_assets).to(raw.dtype)
        action = raw_to_action(raw, self.meta.action_mode, self.num_assets, current, rate)
        if not window:
            return action
        if current is None:
            raise ValueError("a trade window needs the observation (its time of day and weights)")
        hold = obs[:, TIME_OF_DAY] > cfg.trade_window
        return torch.where(hold.unsqueeze(-1), current, action)

    @torch.no_grad()
    def prefers_no_asset(self, probes: int = 16) -> bool:
        """True when the policy's mean logits are the same for every asset and every observation:
        the zero model (``agents.linear_start``'s start where no feature ranked the fit rows), whose
        book is equal weight over the tradable names with a fixed cash share, whatever it observes.

        Probed, not read off the weights, so it holds for any network: ``probes`` normalized
        observations drawn from a fixed seed (independent normal slots, so every input of every
        asset differs) through the network; the logits must agree to float rounding. A network
        whose outputs depend on any input at all (a weight off zero on a live path) fails it. The
        ``"shares"`` action mode is never this model (a static order there is not a book)."""
        if self.meta.action_mode != "weights":
            return False
        generator = torch.Generator(device="cpu").manual_seed(0)
        z = torch.randn(probes, self.obs_dim, generator=generator).to(self.device)
        logits = self.net.actor_mean(z)[:, : self.raw_dim].double()
        scale = 1.0 + float(logits.abs().max())
        same_inputs = float((logits - logits[:1]).abs().max()) <= 1e-6 * scale
        assets = logits[:, : self.num_assets]
        same_assets = float((assets - assets[:, :1]).abs().max()) <= 1e-6 * scale
        return same_inputs and same_assets

    def _check_obs(self, obs: Tensor) -> None:
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(f"policy expects observations (N, {self.obs_dim}), got {tuple(obs.shape)}")

    @torch.no_grad()
    def act(
        self, obs: Tensor, deterministic: bool = True, generator: torch.Generator | None = None
    ) -> Tensor:
        """Actions ``(N, A)`` in the env's action space for raw observations ``(N, obs_dim)``."""
        self._check_obs(obs)
        obs = obs.to(self.device, torch.float32)
        norm = self.obs_norm.normalize(obs)
        mean = self.net.actor_mean(norm)[:, : self.raw_dim]
        if deterministic:
            return self.to_action(mean, obs)
        std = self.net.std()[: self.raw_dim]
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return self.to_action(mean + std * noise, obs)

    def frozen_act(self) -> Callable[[Tensor], Tensor] | None:
        """A function ``obs -> act(obs, deterministic=True)`` for a loop of small inference calls
        while the weights and normalization statistics stay fixed (backtests).

        The same tensor ops on the same operands as :meth:`act` (bit-identical results; with a linear
        skip, equal to float rounding), minus the
        per-call overhead: module calls, shape checks, and the normalizer's constants
        (``sqrt(var + eps)`` and the per-asset statistics tiled to the observation width), which are
        computed once here. Observations must already be float32 ``(N, obs_dim)`` on the policy's
        device; the actions are ``(N, A)`` float32 on that device. ``None`` for configurations
        without this path (other than the linear encoder in ``"weights"`` mode with full
        rebalancing at every decision, or a subclass that changes ``act``): call :meth:`act`.
        """
        cfg = self.config
        if (
            cfg.asset_layers != 0
            or self.meta.action_mode != "weights"
            or cfg.rebalance_rate < 1.0
            or cfg.trade_window < 1.0
            or type(self).act is not Policy.act
            or type(self.net).actor_mean is not PerAssetActorCritic.actor_mean
        ):
            return None
        a, x = cfg.num_assets, asset_width(cfg.num_features)
        norm = self.obs_norm
        with torch.no_grad():
            mean = torch.cat([norm.mean_global, norm.mean_asset.repeat(a)]).detach()
            scale = torch.cat(
                [torch.sqrt(norm.var_global + norm.eps), torch.sqrt(norm.var_asset + norm.eps).repeat(a)]
            ).detach()
        clip = norm.clip
        lin = self.net.encoder[0]
        w, b = lin.weight.detach(), lin.bias.detach()
        w_t, b_col = w.T, b.unsqueeze(1)
        ctx_lin = self.net.context[0]
        wc, bc = ctx_lin.weight.detach(), ctx_lin.bias.detach()
        wr, br = self.net.actor_readout.weight.detach(), self.net.actor_readout.bias.detach()
        wk, bk = self.net.actor_cash.weight.detach(), self.net.actor_cash.bias.detach()
        w_skip = self.net.asset_skip.weight.detach().T if cfg.linear_skip else None
        linear = torch.nn.functional.linear
        pad = torch.nn.functional.pad

        def act(obs: Tensor) -> Tensor:
            n = obs.shape[0]
            # ObsNormalizer.normalize: per element (x - mean) / sqrt(var + eps), then the clip.
            z = torch.sub(obs, mean).div_(scale).clamp_(-clip, clip)
            # PerAssetActorCritic._trunk (linear encoder) and actor_from, op for op.
            # (narrow: the same views as the slices, with less indexing overhead)
            per_asset = z.narrow(1, NUM_GLOBAL, a * x).reshape(n, a, x)
            weight = per_asset.narrow(2, 0, 1)
            mean_emb = linear(per_asset.mean(dim=1), w, b)
            held = (weight * per_asset).sum(dim=1) @ w_t + weight.sum(dim=1) * b
            ctx = torch.tanh(linear(torch.cat([mean_emb, held, z.narrow(1, 0, NUM_GLOBAL)], dim=1), wc, bc))
            readout = linear(ctx, wr, br)
            asset_logits = (per_asset * (readout @ w).unsqueeze(1)).sum(dim=-1) + readout @ b_col
            logits = torch.cat([asset_logits, linear(ctx, wk, bk)], dim=1)
            if w_skip is not None:  # PerAssetActorCritic.with_skip
                logits = logits + pad((per_asset @ w_skip).squeeze(-1), (0, 1))
            return torch.softmax(logits, dim=-1).narrow(-1, 0, a)

        return act

    def forward(self, obs: Tensor) -> Tensor:
        """Deterministic action: lets the policy be passed wherever a callable is expected."""
        return self.act(obs, deterministic=True)

    def clone(self) -> Policy:
        """An independent copy (same device)."""
        other = Policy(self.config, self.meta, device=self.device, init=False)
        other.load_state_dict(self.state_dict())
        other.obs_norm.copy_from(self.obs_norm)  # count, clip and eps are not in the state dict
        return other

    # --- persistence ---------------------------------------------------------------------------------
    def spec(self, weights_sha256: str = "") -> dict[str, Any]:
        """The JSON spec written next to the weights."""
        return {
            "format": SPEC_FORMAT,
            "format_version": SPEC_VERSION,
            "algo": self.meta.algo,
            "architecture": {"class": "PerAssetActorCritic", **self.config.to_dict()},
            "obs_dim": self.obs_dim,
            "action_dim": self.num_assets,
            "action_mode": self.meta.action_mode,
            "num_assets": self.num_assets,
            "num_features": self.config.num_features,
            "tickers": list(self.meta.tickers),
            "feature_names": list(self.meta.feature_names),
            "normalization": self.obs_norm.to_spec(),
            "distribution": "diag_gaussian_over_logits"
            if self.meta.action_mode == "weights"
            else "diag_gaussian_clamped",
            "versions": _versions(),
            "weights_file": "policy.safetensors",
            "weights_sha256": weights_sha256,
        }

    def save(self, directory: str | Path) -> Path:
        """Write ``policy.safetensors`` and ``spec.json`` atomically into ``directory``."""
        directory = Path(directory)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.net.state_dict().items()}
        payload = st_save(tensors, metadata={"format": SPEC_FORMAT})
        atomic_write_bytes(directory / "policy.safetensors", payload)
        PolicySpec.model_validate(self.spec(hashlib.sha256(payload).hexdigest())).write(
            directory / "spec.json"
        )
        return directory

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> Policy:
        """Load a saved policy; any missing, corrupt or mismatched file raises ``CheckpointError``."""
        directory = Path(directory)
        spec = read_spec(directory)
        tensors = read_safetensors(directory / "policy.safetensors", spec.get("weights_sha256", ""))
        return cls.from_spec(spec, tensors, where=f"{directory}/spec.json", device=device)

    @classmethod
    def from_spec(
        cls,
        spec: dict[str, Any],
        tensors: dict[str, Tensor],
        *,
        where: str,
        device: str | torch.device = "cpu",
    ) -> Policy:
        """A policy from a parsed spec and its weight tensors (``where`` names the source in errors).

        The one builder behind :meth:`load` and ``agents.ensemble`` (whose members are specs + tensors
        inside one file); any mismatch raises ``CheckpointError``.
        """
        directory = where.removesuffix("/spec.json")
        try:
            arch = spec["architecture"]
            config = NetworkConfig(
                num_assets=int(arch["num_assets"]),
                num_features=int(arch["num_features"]),
                embed=int(arch["embed"]),
                hidden=int(arch["hidden"]),
                asset_layers=int(arch["asset_layers"]),
                init_log_std=float(arch["init_log_std"]),
                rebalance_rate=float(arch.get("rebalance_rate", 1.0)),
                linear_skip=bool(arch.get("linear_skip", False)),
                trade_window=float(arch.get("trade_window", 1.0)),
                demean_features=bool(arch.get("demean_features", False)),
            )
            meta = PolicyMeta(
                algo=str(spec["algo"]),
                action_mode=str(spec["action_mode"]),
                tickers=tuple(spec.get("tickers") or ()),
                feature_names=tuple(spec.get("feature_names") or ()),
            )
            if int(spec["obs_dim"]) != config.obs_dim or int(spec["action_dim"]) != config.num_assets:
                raise CheckpointError(
                    f"{directory}/spec.json: obs_dim/action_dim do not match the architecture"
                )
            if meta.tickers and len(meta.tickers) != config.num_assets:
                raise CheckpointError(
                    f"{directory}/spec.json: {len(meta.tickers)} tickers for {config.num_assets} assets"
                )
            policy = cls(config, meta, device=device, init=False)  # (every weight is loaded below)
            policy.obs_norm.load_spec(spec["normalization"])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"{directory}/spec.json: invalid policy spec ({type(err).__name__}: {err})"
            ) from None
        expected = policy.net.state_dict()
        missing = sorted(set(expected) - set(tensors))
        extra = sorted(set(tensors) - set(expected))
        if missing or extra:
            raise CheckpointError(
                f"{directory}: weights do not match the spec (missing {missing[:3]}, unexpected {extra[:3]})"
            )
        for name, value in tensors.items():
            if value.shape != expected[name].shape:
                raise CheckpointError(
                    f"{directory}: weight {name} has shape {tuple(value.shape)}, "
                    f"the spec implies {tuple(expected[name].shape)}"
                )
        policy.net.load_state_dict({k: v.to(device) for k, v in tensors.items()})
        return policy.eval()


class PolicySpec(Artifact):
    """``spec.json`` of a single policy, on the artifact base: its format and versions are checked here
    (a newer ``schema_version`` or an unknown ``format_version`` is refused); the architecture,
    dimensions and normalization are checked against the weights by :meth:`Policy.from_spec`. Files
    written before ``schema_version`` carry ``format_version`` 1 and read as version 1;
    ``format_version`` is still written for readers that check it."""

    FILE: ClassVar[str] = "spec.json"

    format: Literal["podracer-policy"]
    format_version: Literal[1] = 1
    weights_sha256: str = ""


def read_spec(directory: str | Path) -> dict[str, Any]:
    """Read and check the top of a policy ``spec.json`` (format, versions), as the dict
    :meth:`Policy.from_spec` builds from."""
    path = Path(directory) / "spec.json"
    if not path.is_file():
        raise CheckpointError(f"no policy checkpoint at {directory} (spec.json missing)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict) or raw.get("format") != SPEC_FORMAT:
        raise CheckpointError(f"{path}: not a podracer policy spec")
    try:
        return PolicySpec.parse(raw, path).model_dump()
    except ArtifactError as err:
        raise CheckpointError(str(err)) from None


def read_safetensors(
    path: Path, sha256: str, recorded_as: str = "spec.json's weights_sha256"
) -> dict[str, Tensor]:
    """The tensors of a safetensors file whose sha256 must equal ``sha256`` (``CheckpointError``);
    ``recorded_as`` names where the digest lives, for the error."""
    if not isinstance(sha256, str) or len(sha256) != 64:
        # Every writer records it: without it a swapped or corrupt weights file would load.
        raise CheckpointError(f"{path}: no {recorded_as} recorded, so it cannot be verified")
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    payload = path.read_bytes()
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise CheckpointError(f"{path} does not match its recorded sha256 (truncated or modified)")
    try:
        return st_load(payload)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from None
