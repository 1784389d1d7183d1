"""One word per concept (docs/glossary.md), checked by parsing the product with ``ast``.

(a) No two public classes (or type aliases) of the product share a name: a reader who meets a name
knows which thing it is without looking at the import.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app", "agents", "backtests", "data", "envs")


def _public_types(tree: ast.Module) -> list[str]:
    """Top-level public classes and CamelCase type aliases (``Name = Literal[...]``) of a module."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            names += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id[:1].isupper()]
    return [n for n in names if not n.startswith("_") and not n.isupper()]


def _defined() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in _public_types(ast.parse(path.read_text(encoding="utf-8"))):
                where[name].append(str(path.relative_to(ROOT)))
    return where


def test_no_two_public_classes_share_a_name():
    shared = {name: files for name, files in _defined().items() if len(files) > 1}
    assert not shared, "public classes defined in more than one module:\n" + "\n".join(
        f"{name}: {', '.join(files)}" for name, files in sorted(shared.items())
    )


def test_the_name_check_sees_classes_and_aliases():
    src = "class Alpha:\n    pass\nBeta = Literal['x']\nclass _C:\n    pass\nMAX = dict[str, int]\n"
    assert _public_types(ast.parse(src)) == ["Alpha", "Beta"]
