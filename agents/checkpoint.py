"""``Checkpoint``: a policy plus its optimizer state, what a warm start or a tournament child needs.

On disk (no pickle): the policy's own files (:meth:`agents.policy.Policy.save`) plus
``optimizer.safetensors`` (the optimizer's tensors) and ``optimizer.json`` (its scalars, exact with
their dtype, the parameter groups and the tensors file's sha256). Any missing, truncated, non-JSON or
mismatched file raises :class:`data.errors.CheckpointError`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as st_save
from torch import Tensor

from agents.policy import Policy, read_safetensors
from data.atomic import atomic_write_bytes, atomic_write_json
from data.errors import CheckpointError

OPTIMIZER_FORMAT = "podracer-optimizer"


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
    atomic_write_json(
        directory / "optimizer.json",
        {
            "format": OPTIMIZER_FORMAT,
            "format_version": 1,
            "param_groups": groups,
            "scalars": scalars,
            "sha256": hashlib.sha256(payload).hexdigest(),
        },
    )
    return directory


def load_optimizer_state(directory: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read what :func:`save_optimizer_state` wrote, as a ``state_dict`` for ``load_state_dict``."""
    path = Path(directory) / "optimizer.json"
    if not path.is_file():
        raise CheckpointError(f"no optimizer state at {directory} (optimizer.json missing)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        if meta.get("format") != OPTIMIZER_FORMAT:
            raise CheckpointError(f"{path}: not a podracer optimizer state")
        tensors = read_safetensors(
            Path(directory) / "optimizer.safetensors", meta["sha256"], recorded_as="optimizer.json's sha256"
        )
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            param_id, name = key.split(".", 1)
            state.setdefault(int(param_id), {})[name] = value.to(device)
        for param_id, entries in meta["scalars"].items():
            for name, entry in entries.items():
                value = entry["value"]
                if entry["tensor_dtype"] is not None:
                    value = torch.tensor(value, dtype=getattr(torch, entry["tensor_dtype"]))
                state.setdefault(int(param_id), {})[name] = value
        groups = []
        for group in meta["param_groups"]:
            group = dict(group)
            if isinstance(group.get("betas"), list):
                group["betas"] = tuple(group["betas"])
            groups.append(group)
    except CheckpointError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
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
