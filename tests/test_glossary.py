"""One word per concept (docs/glossary.md), checked by parsing the product with ``ast``.

(a) No two public classes (or type aliases) of the product share a name: a reader who meets a name
knows which thing it is without looking at the import. (b) docs/glossary.md defines each term and
README and ARCHITECTURE.md link it; the names it retired do not come back.
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


# --- (b) the glossary and the words it fixes --------------------------------------------------------
GLOSSARY = ROOT / "docs" / "glossary.md"
TERMS = (
    "pod",
    "round",
    "population",
    "lane",
    "backend",
    "kernel",
    "train window",
    "validation window",
    "selection window",
    "test window",
    "gate window",
    "score",
    "judge",
    "decide",
    "gate",
    "look",
    "significance level",
    "champion",
    "challenger",
    "incumbent",
    "capacity",
)


def test_the_glossary_defines_each_term_and_is_linked():
    text = GLOSSARY.read_text(encoding="utf-8")
    defined = {line.split("**")[1] for line in text.splitlines() if line.startswith("- **")}
    assert set(TERMS) <= defined, f"terms missing from docs/glossary.md: {sorted(set(TERMS) - defined)}"
    for doc in ("README.md", "ARCHITECTURE.md"):
        assert "docs/glossary.md" in (ROOT / doc).read_text(encoding="utf-8"), (
            f"{doc} does not link the glossary"
        )


def _identifiers(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
    return names


#: Names the glossary retired, and the packages where they may not come back.
RETIRED = {
    # The level is significance_level; the test is backtests.oos_test.
    "significance": PRODUCT,
    "SIGNIFICANCE": PRODUCT,
    "gate_significance": PRODUCT,
    "dsr_threshold": ("agents", "backtests", "data", "envs"),  # app/ reads it in old files only
    # What runs an env step is a kernel; "backend" is the tournament's.
    "step_backend": PRODUCT,
    "Backend": ("envs",),
    "backend": ("envs",),
}


def test_retired_names_stay_retired():
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            names = _identifiers(ast.parse(path.read_text(encoding="utf-8")))
            found += [
                f"{path.relative_to(ROOT)}: {name}"
                for name in sorted(names)
                if package in RETIRED.get(name, ())
            ]
    assert not found, "names the glossary retired:\n" + "\n".join(found)
