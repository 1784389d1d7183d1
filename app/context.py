"""Process-wide CLI context: the home directory and console (set by the top-level callback)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

DEFAULT_HOME = "./podracer-home"

console = Console()
err_console = Console(stderr=True)

_home: Path | None = None


def set_home(home: str | os.PathLike[str] | None) -> Path:
    global _home
    _home = Path(home or os.environ.get("PODRACER_HOME") or DEFAULT_HOME).expanduser()
    return _home


def home() -> Path:
    """The podracer home directory (``--home``, else ``$PODRACER_HOME``, else ./podracer-home)."""
    return _home if _home is not None else set_home(None)
