"""Atomic file writes: write a temp file in the same folder, fsync, then rename over the target.

A crash or kill at any point leaves either the old file or the new one, never a torn one.
Every cache, artifact and JSON file podracer writes goes through here; whole folders (an export
bundle, a champion's policy copy) are built in a staging folder and swapped in by :func:`replace_dir`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data.scrub import scrub


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temp path next to ``path``; on success rename it over ``path``, else delete it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
        _fsync_dir(path.parent)
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], payload: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(payload)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """``obj`` as indented JSON, secrets masked (``data.scrub``: records quote error texts)."""
    return atomic_write_text(path, scrub(json.dumps(obj, indent=2, sort_keys=True, default=str)) + "\n")


def replace_dir(staging: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Swap the finished folder ``staging`` in as ``target``; returns ``target``.

    ``staging`` must be a sibling of ``target`` (same filesystem: each step is one rename). An
    existing ``target`` is first renamed to ``.<name>.old`` (a leftover of an earlier crash there is
    removed first), then ``staging`` takes its place, then the old folder is deleted. Readers never
    see a half-written folder: ``target`` is the whole old one or the whole new one, except for the
    instant between the two renames, when it is absent (the old one is then ``.<name>.old``).
    """
    staging, target = Path(staging), Path(target)
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)
    return target


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
