"""``EnsemblePolicy``: the tournament-based ensemble of the K best leaderboard pods.

The Podracer papers' "tournament-based ensemble": instead of trading the single best pod, trade the
average of the K best. Each member keeps its own frozen observation normalization and its own action
post-processing (softmax over assets + cash, partial rebalancing); the ensemble's action is the mean
of the members' post-processed target weights.

Why average the weights, not the logits: a softmax is shift-invariant, so the members' logits have no
common scale or offset (each was trained with its own normalization and entropy), and the mean of
logits is a renormalized geometric mean of the portfolios in which one confident member outvotes the
rest. The mean of target weights is a convex combination of long-only portfolios (still long-only,
sum <= 1): exactly holding 1/K of the capital in each member's portfolio, with the members' opposite
trades netted before costs are paid.

It satisfies the same protocol as :class:`agents.policy.Policy` (``act(obs, deterministic=True)``,
``policy(obs)``, ``frozen_act()``, ``save(dir)`` / ``load(dir)``, ``meta``, ``config``, ``num_assets``,
``obs_dim``), so backtests, the nightly evaluation and export take either. On disk (no pickle): the same
two file names as a single policy, so every copy of a champion folder works unchanged:

- ``policy.safetensors``: every member's weights, keys prefixed ``m<i>.``;
- ``spec.json``: ``format = "podracer-ensemble"``, ``members`` (each member's full policy spec, with
  its normalization statistics), ``size``, ``source`` (the pods and their validation scores), and
  the weights file's sha256 (a truncated or swapped file is caught).

:func:`load_policy` reads either kind of folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from safetensors.torch import save as st_save
from torch import Tensor, nn

from agents.policy import SPEC_FORMAT, Policy, read_safetensors, read_spec
from data.artifact import Artifact
from data.atomic import atomic_write_bytes
from data.errors import ArtifactError, CheckpointError

ENSEMBLE_FORMAT = "podracer-ensemble"
ENSEMBLE_VERSION = 1
#: The ensemble's folder in a run (``<run>/ensemble/``) and its id among the trials.
ENSEMBLE_POD = "ensemble"


class EnsemblePolicy(nn.Module):
    """The mean of K policies' post-processed actions; ``policy(obs) -> action (N, A)``."""

    def __init__(self, members: Sequence[Policy], source: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        first = members[0]
        for m in members[1:]:
            if (m.obs_dim, m.num_assets, m.meta.action_mode) != (
                first.obs_dim,
                first.num_assets,
                first.meta.action_mode,
            ) or (m.meta.tickers and first.meta.tickers and m.meta.tickers != first.meta.tickers):
                raise CheckpointError("ensemble members differ in observation, tickers or action mode")
        self.members = nn.ModuleList(members)
        self.source = [dict(s) for s in source]
        # What the policy was trained for, as one policy's meta (tickers, features, action mode).
        self.meta = replace(first.meta, algo="ensemble")
        self.config = first.config  # sizes (num_assets, num_features, obs_dim) shared by every member

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def num_assets(self) -> int:
        return self.members[0].num_assets

    @property
    def obs_dim(self) -> int:
        return self.members[0].obs_dim

    @property
    def device(self) -> torch.device:
        return self.members[0].device

    @torch.no_grad()
    def act(
        self, obs: Tensor, deterministic: bool = True, generator: torch.Generator | None = None
    ) -> Tensor:
        """Mean over members of ``member.act(obs)`` (each normalizes ``obs`` with its own statistics)."""
        total = self.members[0].act(obs, deterministic, generator)
        for m in self.members[1:]:
            total = total + m.act(obs, deterministic, generator)
        return total / self.size

    def prefers_no_asset(self) -> bool:
        """Every member prefers no asset (``Policy.prefers_no_asset``): the mean of equal-weight books
        with fixed cash shares is one too."""
        return all(m.prefers_no_asset() for m in self.members)

    def frozen_act(self) -> Callable[[Tensor], Tensor] | None:
        """The members' fast paths averaged (backtests); ``None`` unless every member has one."""
        fns = [m.frozen_act() for m in self.members]
        if any(f is None for f in fns):
            return None
        k = float(len(fns))

        def act(obs: Tensor) -> Tensor:
            total = fns[0](obs)
            for f in fns[1:]:
                total = total + f(obs)
            return total / k

        return act

    def forward(self, obs: Tensor) -> Tensor:
        return self.act(obs, deterministic=True)

    # --- persistence ---------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write ``policy.safetensors`` (all members) and ``spec.json`` atomically into ``directory``."""
        directory = Path(directory)
        tensors: dict[str, Tensor] = {}
        for i, m in enumerate(self.members):
            for k, v in m.net.state_dict().items():
                tensors[f"m{i}.{k}"] = v.detach().to("cpu").contiguous()
        payload = st_save(tensors, metadata={"format": ENSEMBLE_FORMAT})
        atomic_write_bytes(directory / "policy.safetensors", payload)
        spec = {
            "format": ENSEMBLE_FORMAT,
            "format_version": ENSEMBLE_VERSION,
            "algo": "ensemble",
            "combine": "mean_of_target_weights",
            "size": self.size,
            "obs_dim": self.obs_dim,
            "action_dim": self.num_assets,
            "action_mode": self.meta.action_mode,
            "tickers": list(self.meta.tickers),
            "feature_names": list(self.meta.feature_names),
            "members": [m.spec() for m in self.members],
            "source": self.source,
            "weights_file": "policy.safetensors",
            "weights_sha256": hashlib.sha256(payload).hexdigest(),
        }
        EnsembleSpec.model_validate(spec).write(directory / "spec.json")
        return directory

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> EnsemblePolicy:
        """Load a saved ensemble; any missing, corrupt or mismatched file raises ``CheckpointError``."""
        directory = Path(directory)
        raw = _read_json_spec(directory)
        if raw.get("format") != ENSEMBLE_FORMAT:
            raise CheckpointError(f"{directory}/spec.json: not a podracer ensemble spec")
        try:
            spec = EnsembleSpec.parse(raw, directory / "spec.json").model_dump()
        except ArtifactError as err:
            raise CheckpointError(str(err)) from None
        members_spec = spec.get("members")
        if not isinstance(members_spec, list) or not members_spec or spec.get("size") != len(members_spec):
            raise CheckpointError(f"{directory}/spec.json: ensemble members missing or size mismatch")
        tensors = read_safetensors(directory / "policy.safetensors", str(spec.get("weights_sha256") or ""))
        members = []
        for i, member in enumerate(members_spec):
            prefix = f"m{i}."
            own = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
            if not isinstance(member, dict) or member.get("format") != SPEC_FORMAT:
                raise CheckpointError(f"{directory}/spec.json: member {i} is not a podracer policy spec")
            members.append(
                Policy.from_spec(member, own, where=f"{directory}/spec.json member {i}", device=device).eval()
            )
        known = {f"m{i}." for i in range(len(members))}
        stray = sorted(k for k in tensors if k.split(".", 1)[0] + "." not in known)
        if stray:
            raise CheckpointError(f"{directory}/policy.safetensors: tensors of no member ({stray[:3]})")
        source = spec.get("source") or []
        return cls(members, source if isinstance(source, list) else []).eval()


class EnsembleSpec(Artifact):
    """``spec.json`` of an ensemble, on the artifact base: its format and versions are checked here (a
    newer ``schema_version`` or an unknown ``format_version`` is refused); the members (full policy
    specs) are checked against their weights by :meth:`Policy.from_spec`. Files written before
    ``schema_version`` carry ``format_version`` 1 and read as version 1; ``format_version`` is still
    written for readers that check it."""

    FILE: ClassVar[str] = "spec.json"

    format: Literal["podracer-ensemble"]
    format_version: Literal[1] = 1
    weights_sha256: str = ""


def _read_json_spec(directory: Path) -> dict[str, Any]:
    path = directory / "spec.json"
    if not path.is_file():
        raise CheckpointError(f"no policy checkpoint at {directory} (spec.json missing)")
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(spec, dict):
        raise CheckpointError(f"{path}: not a podracer policy spec")
    return spec


def is_ensemble(directory: str | Path) -> bool:
    """Whether the policy folder holds an ensemble (False for a single policy or no readable spec)."""
    try:
        return _read_json_spec(Path(directory)).get("format") == ENSEMBLE_FORMAT
    except CheckpointError:
        return False


def load_policy(directory: str | Path, device: str | torch.device = "cpu") -> Policy | EnsemblePolicy:
    """A single policy or an ensemble, whichever the folder holds (``CheckpointError`` otherwise)."""
    directory = Path(directory)
    if _read_json_spec(directory).get("format") == ENSEMBLE_FORMAT:
        return EnsemblePolicy.load(directory, device=device)
    read_spec(directory)  # the single policy's own checks (format, version) and messages
    return Policy.load(directory, device=device)


def member_normalizations(policy: Policy | EnsemblePolicy) -> list[dict[str, Any]]:
    """The observation normalization statistics of each member (one entry for a single policy)."""
    members = policy.members if isinstance(policy, EnsemblePolicy) else [policy]
    return [m.obs_norm.to_spec() for m in members]
