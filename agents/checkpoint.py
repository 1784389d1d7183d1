"""``Checkpoint``: a policy plus its optimizer state, what a warm start or a tournament child needs.

On disk (no pickle): the policy's own files (:meth:`agents.policy.Policy.save`) plus
``optimizer.safetensors`` (the optimizer's tensors) and ``optimizer.json`` (its scalars, exact with
their dtype, the parameter groups and the tensors file's sha256), an :class:`OptimizerMeta` document on
the artifact base. Any missing, truncated, non-JSON, newer or mismatched file raises
:class:`data.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from pydantic import BaseModel, ConfigDict
from safetensors.torch import save as st_save
from torch import Tensor

from agents.policy import Policy, read_safetensors
from data.artifact import Artifact
from data.atomic import atomic_write_bytes
from data.errors import ArtifactError, CheckpointError

OPTIMIZER_FORMAT = "podracer-optimizer"


class ScalarEntry(BaseModel):
    """One optimizer scalar: its value, and the dtype of the 0-d tensor it was (null: a plain number)."""

    model_config = ConfigDict(frozen=True)

    value: bool | int | float | None
    tensor_dtype: str | None = None


class OptimizerMeta(Artifact):
    """``optimizer.json``: the optimizer's scalars and parameter groups, and the sha256 of
    ``optimizer.safetensors``. Files written before ``schema_version`` carry ``format_version`` 1 and
    read as version 1; ``format_version`` is still written for readers that check it."""

    FILE: ClassVar[str] = "optimizer.json"

    format: Literal["podracer-optimizer"]
    format_version: Literal[1] = 1
    param_groups: list[dict[str, Any]]
    scalars: dict[str, dict[str, ScalarEntry]]
    sha256: str


def _to_json(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, Tensor):
        return value.item()
    return value


def save_optimizer_state(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write a ``torch.optim`` ``state_dict()`` as ``optimizer.safetensors`` + ``optimizer.json``."""
    directory = Path(directory)
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, per_param in state["state"].items():
        for key, value in per_param.items():
            if isinstance(value, Tensor) and value.ndim > 0:
                tensors[f"{param_id}.{key}"] = value.detach().to("cpu").contiguous()
            else:  # Adam's "step" is a 0-d tensor; keep it exact in JSON with its dtype
                is_t = isinstance(value, Tensor)
                scalars.setdefault(str(param_id), {})[key] = {
                    "value": value.item() if is_t else value,
                    "tensor_dtype": str(value.dtype).removeprefix("torch.") if is_t else None,
                }
    payload = st_save(tensors, metadata={"format": OPTIMIZER_FORMAT})
    atomic_write_bytes(directory / "optimizer.safetensors", payload)
    groups = [{k: _to_json(v) for k, v in group.items()} for group in state["param_groups"]]
    OptimizerMeta.model_validate(
        {
            "format": OPTIMIZER_FORMAT,
            "param_groups": groups,
            "scalars": scalars,
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
    ).write(directory / "optimizer.json")
    return directory


def load_optimizer_state(directory: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read what :func:`save_optimizer_state` wrote, as a ``state_dict`` for ``load_state_dict``."""
    path = Path(directory) / "optimizer.json"
    if not path.is_file():
        raise CheckpointError(f"no optimizer state at {directory} (optimizer.json missing)")
    try:
        meta = OptimizerMeta.read(path)
    except ArtifactError as err:
        raise CheckpointError(str(err)) from None
    try:
        tensors = read_safetensors(
            Path(directory) / "optimizer.safetensors", meta.sha256, recorded_as="optimizer.json's sha256"
        )
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            param_id, name = key.split(".", 1)
            state.setdefault(int(param_id), {})[name] = value.to(device)
        for param_id, entries in meta.scalars.items():
            for name, entry in entries.items():
                value = entry.value
                if entry.tensor_dtype is not None:
                    value = torch.tensor(value, dtype=getattr(torch, entry.tensor_dtype))
                state.setdefault(int(param_id), {})[name] = value
        groups = []
        for group in meta.param_groups:
            group = dict(group)
            if isinstance(group.get("betas"), list):
                group["betas"] = tuple(group["betas"])
            groups.append(group)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{path}: invalid optimizer state ({type(err).__name__}: {err})") from None
    return {"state": state, "param_groups": groups}


@dataclass
class Checkpoint:
    """A policy plus (optionally) its optimizer state: what a warm start or a tournament child needs."""

    policy: Policy
    optimizer_state: dict[str, Any] | None = None

    def save(self, directory: str | Path) -> Path:
        self.policy.save(directory)
        if self.optimizer_state is not None:
            save_optimizer_state(directory, self.optimizer_state)
        return Path(directory)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
        """Policy (required) and optimizer state (when ``optimizer.json`` exists)."""
        policy = Policy.load(directory, device=device)
        opt = None
        if (Path(directory) / "optimizer.json").exists():
            opt = load_optimizer_state(directory, device=device)
        return cls(policy, opt)
