"""Each setting is described once: the docstring under its field in the dataclass it configures.

The config's sections (``app.config_sections``) and the CLI's ``--help`` (``app.commands``) take their
wording from here. The dataclasses are read as source with ``ast``: the docstring under a field exists
only in the source, never at run time. Their modules (``agents/args.py``, ``agents/tournament/settings.py``,
``envs/params.py``) load no torch, and neither does this one.

A setting no dataclass holds (``[backtest]``, ``[gate]``, ``[nightly]``, ``[walkforward]`` and a few workflow
keys) is described once, in its section's ``Field(description=...)``; :func:`setting_doc` reads that
the same way, so a command's flag for it says the same words.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where each dataclass that a config section configures is defined (relative to the project root).
DATACLASSES: dict[str, str] = {
    "PPOArgs": "agents/args.py",
    "SACArgs": "agents/args.py",
    "DirectArgs": "agents/args.py",
    "TournamentArgs": "agents/tournament/settings.py",
    "EnvParams": "envs/params.py",
}
#: The dataclasses behind each section, first match wins (PPO's wording of a field SAC shares).
SECTION_DATACLASSES: dict[str, tuple[str, ...]] = {
    "agent": ("PPOArgs", "SACArgs", "DirectArgs"),
    "tournament": ("TournamentArgs",),
    "env": ("EnvParams",),
}
SECTIONS_MODULE = "app/config_sections.py"
#: The pydantic class of each section (for the settings no dataclass holds).
SECTION_CLASSES: dict[str, str] = {
    "data": "DataConfig",
    "env": "EnvConfig",
    "agent": "AgentConfig",
    "tournament": "TournamentConfig",
    "backtest": "BacktestConfig",
    "gate": "GateConfig",
    "nightly": "NightlyConfig",
    "walkforward": "WalkForwardConfig",
    "paper": "PaperConfig",
    "alerts": "AlertsConfig",
    "retention": "RetentionConfig",
}


def _one_line(text: str) -> str:
    """A docstring as a one-line description (reST's double backticks dropped: a help line is plain)."""
    return " ".join(text.replace("``", "").split())


def _class(path: str, name: str) -> ast.ClassDef:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"{path} defines no class {name}")


@functools.cache
def field_docs(cls: str) -> dict[str, str]:
    """``{field: docstring}`` of dataclass ``cls`` (a string literal right under a field), one line each."""
    body = _class(DATACLASSES[cls], cls).body
    docs = {}
    for field, after in zip(body, body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = _one_line(after.value.value)
    return docs


def field_doc(cls: str, name: str) -> str:
    """The docstring of field ``name`` of dataclass ``cls``; a LookupError when it has none."""
    docs = field_docs(cls)
    if name not in docs:
        raise LookupError(f"{DATACLASSES[cls]}: {cls}.{name} has no docstring (a string under the field)")
    return docs[name]


def owner(section: str, name: str) -> str | None:
    """The dataclass that holds ``[section] name`` and describes it, or None."""
    return next((cls for cls in SECTION_DATACLASSES.get(section, ()) if name in field_docs(cls)), None)


@functools.cache
def _section_descriptions(section: str) -> dict[str, str]:
    """``description=`` literals of the section's ``Field(...)`` calls in app/config_sections.py."""
    out = {}
    for node in _class(SECTIONS_MODULE, SECTION_CLASSES[section]).body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        call = node.value
        if isinstance(call, ast.Call):
            for kw in call.keywords:
                if kw.arg == "description" and isinstance(kw.value, ast.Constant):
                    out[node.target.id] = _one_line(str(kw.value.value))
    return out


def setting_doc(key: str) -> str:
    """The one description of setting ``key`` (``"section.field"``): its dataclass field's docstring,
    else its section field's description."""
    section, name = key.split(".", 1)
    cls = owner(section, name)
    if cls is not None:
        return field_doc(cls, name)
    descriptions = _section_descriptions(section)
    if name not in descriptions:
        raise LookupError(f"setting {key} has no description")
    return descriptions[name]


def cli_help(key: str, scope: str = "") -> str:
    """A command's ``--help`` line for a flag that sets ``key``: ``scope`` (which runs read it, e.g.
    ``"Tournament: "``), the setting's one description and the key (rich markup escaped)."""
    return f"{scope}{setting_doc(key)} [{key}].".replace("[", "\\[")  # rich would read [x] as markup
