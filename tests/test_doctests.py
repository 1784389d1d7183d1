"""Every ``>>>`` example in the product's docstrings runs and prints what it says (stdlib doctest).

Modules are found without importing them: every module of the product packages whose module, class
or function docstrings hold a ``>>>`` line (``ast``, so a new example anywhere is picked up without
editing this file) is one test case, which imports the module and runs its examples with
``doctest.DocTestFinder`` / ``DocTestRunner``. A module whose import fails for want of an optional
peer library (:data:`OPTIONAL_PEERS`, the ``ray`` and ``peers`` extras and the Isaac stacks) is
skipped with that reason; any other import error fails. Keep examples small and deterministic
(shapes, dtypes, invariants), so that this file stays fast.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import io
from pathlib import Path

import pytest
from helpers import module_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "agents", "backtests", "data", "envs")
#: Top-level modules of optional extras: a module needing one is skipped where it is not installed.
OPTIONAL_PEERS = frozenset({"ray", "stable_baselines3", "skrl", "isaacgym", "isaaclab"})
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _has_examples(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef))]
    return any(">>>" in (ast.get_docstring(n, clean=False) or "") for n in nodes)


MODULES = sorted(module_name(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if _has_examples(p))


def test_the_entry_points_have_examples():
    """The public entry points carry runnable examples (so this file checks something)."""
    assert {"envs.trading", "envs.vec_env", "backtests.engine", "agents.ppo"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as err:
        if (err.name or "").split(".")[0] in OPTIONAL_PEERS:
            pytest.skip(f"{name} needs the optional {err.name}")
        raise
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    assert tests, f"{name}: a docstring holds '>>>' but doctest finds no example in it"
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    for test in tests:
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, out.getvalue()
