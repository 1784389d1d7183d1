"""Placeholder for commands whose stage is not built yet."""

from __future__ import annotations

from data.errors import PodracerError


def not_implemented(name: str) -> None:
    raise PodracerError(f"`podracer {name}` is not implemented yet")
