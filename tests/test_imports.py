"""The import rules of the project, checked by parsing every module with ``ast`` (nothing is imported).

(a) only ``app/cli.py`` imports ``app.commands``; (b) no import cycles between project modules
(top-level, function-level and type-only imports under ``if TYPE_CHECKING:`` all count: a cycle a
type checker follows is a cycle a reader follows); (c) the
literal ``"run.json"`` is named in one module; (d) project modules are imported at module top
(function-level imports are left to third-party libraries: the heavy optional ones, ray, alpaca,
onnxruntime, pyfolio, streamlit, yfinance, and a few slow ones kept off the training path), with one
exception: a CLI command module (``app.commands.*``) imports its workflow inside the command's body,
so that ``podracer --help`` loads no torch; (e) the layering app -> agents -> backtests -> envs -> data;
(f) each product in its room: nothing under ``app/walkforward/`` imports ``app.workflows`` (the CLI's
workflows sit above the products), and the paper loop reads the champion through the
``app.champion.ChampionPointer`` its workflow hands it, never through nightly; (g) no import runs up
the app's rooms (base < paper < nightly < walkforward < workflows < dashboard < commands < cli), and
no product function grows past 80 lines beyond the ones listed.
"""

from __future__ import annotations

import ast
import graphlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import module_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "agents", "envs", "data", "backtests", "benchmarks")
#: What each layer may not import (app -> agents -> backtests -> envs -> data).
FORBIDDEN = {
    "data": ("envs", "backtests", "agents", "app"),
    "envs": ("backtests", "agents", "app"),
    "backtests": ("agents", "app"),
    "agents": ("app",),
}
RUN_JSON_OWNER = "app.runs"


@dataclass(frozen=True)
class Import:
    importer: str  # module name, e.g. "agents.tournament.pod"
    target: str  # the project module (or package) it loads
    where: str  # file:line
    top_level: bool
    type_only: bool = False  # under ``if TYPE_CHECKING:``


def _files() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


FILES = _files()


def _is_project(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads (for ``from pkg import name``: ``pkg.name`` when that is
    a module, else ``pkg``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolve against the importer's package
        package = module.split(".") if FILES[module].name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in FILES]
    return subs if len(subs) == len(node.names) else [*subs, base]


def _walk(module: str, node: ast.AST, top_level: bool, out: list[Import], type_only: bool = False) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            # The body runs for type checkers only; an ``else:`` runs for real.
            _walk(module, ast.Module(body=child.body, type_ignores=[]), top_level, out, True)
            _walk(module, ast.Module(body=child.orelse, type_ignores=[]), top_level, out, type_only)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            where = f"{FILES[module].relative_to(ROOT)}:{child.lineno}"
            out.extend(Import(module, t, where, top_level, type_only) for t in _targets(module, child))
            continue
        inner = top_level and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        _walk(module, child, inner, out, type_only)


def _imports() -> list[Import]:
    out: list[Import] = []
    for module, path in FILES.items():
        _walk(module, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), True, out)
    return out


IMPORTS = _imports()
PROJECT_IMPORTS = [i for i in IMPORTS if _is_project(i.target)]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _in(packages: tuple[str, ...], imp: Import) -> bool:
    return imp.importer.split(".")[0] in packages


# --- (a) --------------------------------------------------------------------------------------------


def test_only_the_cli_imports_the_commands():
    bad = [i.where for i in PROJECT_IMPORTS if _under(i.target, "app.commands") and i.importer != "app.cli"]
    assert not bad, "import app.commands outside app/cli.py:\n" + "\n".join(bad)


# --- (b) --------------------------------------------------------------------------------------------
def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in FILES}
    for imp in PROJECT_IMPORTS:
        if imp.target in FILES and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        cycle = err.args[1]
        edges = [
            next(i.where for i in PROJECT_IMPORTS if i.importer == a and i.target == b)
            for a, b in zip(
                cycle[1:], cycle[:-1], strict=True
            )  # CycleError lists each node's successor first
        ]
        pytest.fail("import cycle: " + " -> ".join(reversed(cycle)) + "\n" + "\n".join(reversed(edges)))


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(graph).static_order())


# --- (c) --------------------------------------------------------------------------------------------
def _names_run_json(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and "run.json" in n.value
        and id(n) not in docstrings
    ]


def test_run_json_is_named_in_one_module():
    found = {
        module: lines
        for module, path in FILES.items()
        if module.split(".")[0] != "benchmarks" and (lines := _names_run_json(path))
    }
    where = [f"{FILES[m].relative_to(ROOT)}:{line}" for m, lines in found.items() for line in lines]
    assert set(found) == {RUN_JSON_OWNER}, '"run.json" named in:\n' + "\n".join(where)


# --- (d) --------------------------------------------------------------------------------------------
def _deferred_by_a_command(imp: Import) -> bool:
    """An import inside a CLI command's body: ``app.cli`` imports every command module at start, so
    a command defers what loads torch until it runs (app/commands/__init__.py)."""
    return not imp.top_level and _under(imp.importer, "app.commands")


def _function_level(packages: tuple[str, ...]) -> list[str]:
    return [
        i.where + f" ({i.target})"
        for i in PROJECT_IMPORTS
        if not i.top_level and _in(packages, i) and not _deferred_by_a_command(i)
    ]


@pytest.mark.parametrize(
    "package",
    [
        "agents",
        "data",
        "backtests",
        "envs",
        "app",
        "benchmarks",
    ],
)
def test_project_modules_are_imported_at_module_top(package):
    bad = _function_level((package,))
    assert not bad, "project modules imported inside functions:\n" + "\n".join(bad)


# --- (e) --------------------------------------------------------------------------------------------
def test_layering():
    bad = [
        f"{i.where}: {i.importer} imports {i.target}"
        for i in PROJECT_IMPORTS
        if any(_under(i.target, p) for p in FORBIDDEN.get(i.importer.split(".")[0], ()))
    ]
    assert not bad, "imports against the layering app -> agents -> backtests -> envs -> data:\n" + "\n".join(
        bad
    )


def test_the_parser_sees_function_level_and_type_checking_imports():
    src = (
        "from typing import TYPE_CHECKING\nimport data.errors\nif TYPE_CHECKING:\n    import envs.trading\n"
        "def f():\n    from agents import ppo\n"
    )
    tree = ast.parse(src)
    out: list[Import] = []
    FILES.setdefault("agents.tests_probe", ROOT / "agents" / "tests_probe.py")
    try:
        _walk("agents.tests_probe", tree, True, out)
    finally:
        del FILES["agents.tests_probe"]
    got = {(i.target, i.top_level, i.type_only) for i in out}
    assert got == {
        ("typing", True, False),
        ("data.errors", True, False),
        ("envs.trading", True, True),
        ("agents.ppo", False, False),
    }


def test_a_type_only_import_closes_a_cycle():
    """Two modules that import each other, one of them for its types only, are a cycle."""
    out: list[Import] = []
    probes = {
        "envs.probe_a": "from envs import probe_b\n",
        "envs.probe_b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from envs.probe_a import X\n"
        ),
    }
    for probe in probes:
        FILES.setdefault(probe, ROOT / Path(*probe.split(".")).with_suffix(".py"))
    try:
        for probe, src in probes.items():
            _walk(probe, ast.parse(src), True, out)
    finally:
        for probe in probes:
            del FILES[probe]
    graph = {m: {i.target for i in out if i.importer == m and i.target in probes} for m in probes}
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(graph).static_order())


def test_only_a_command_body_may_defer_a_project_import():
    src = "import data.errors\ndef f():\n    from app.workflows import training\n"
    found: dict[str, list[Import]] = {}
    for probe in ("app.commands.tests_probe", "app.workflows.tests_probe"):
        FILES.setdefault(probe, ROOT / Path(*probe.split(".")).with_suffix(".py"))
        out: list[Import] = []
        try:
            _walk(probe, ast.parse(src), True, out)
        finally:
            del FILES[probe]
        found[probe] = [i for i in out if _is_project(i.target) and not i.top_level]
    assert [_deferred_by_a_command(i) for i in found["app.commands.tests_probe"]] == [True]
    assert [_deferred_by_a_command(i) for i in found["app.workflows.tests_probe"]] == [False]


def _lines_but_imports(path: Path) -> int:
    """Lines of a module, its import statements left out (a command imports its workflow in its body)."""
    text = path.read_text(encoding="utf-8")
    imports = {
        line
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    return len(text.splitlines()) - len(imports)


def test_command_modules_stay_thin():
    """A command parses options, calls a workflow and renders; at most 150 lines each, imports aside."""
    long = {
        path.name: n
        for path in sorted((ROOT / "app" / "commands").glob("*.py"))
        if (n := _lines_but_imports(path)) > 150
    }
    assert not long, f"command modules over 150 lines (move the logic into app/workflows): {long}"


# --- (f) --------------------------------------------------------------------------------------------
def test_walkforward_does_not_import_the_workflows():
    bad = [
        f"{i.where}: {i.importer} imports {i.target}"
        for i in PROJECT_IMPORTS
        if _under(i.importer, "app.walkforward") and _under(i.target, "app.workflows")
    ]
    assert not bad, "app/walkforward/ imports app.workflows:\n" + "\n".join(bad)


def test_paper_reads_the_champion_through_the_pointer_it_is_handed():
    bad = [
        f"{i.where}: {i.importer} imports {i.target}"
        for i in PROJECT_IMPORTS
        if _under(i.importer, "app.paper") and _under(i.target, "app.nightly")
    ]
    assert not bad, "app.paper reaches into nightly (take an app.champion.ChampionPointer):\n" + "\n".join(
        bad
    )
    assert any(
        i.importer == "app.workflows.paper" and i.target == "app.nightly.champions" for i in PROJECT_IMPORTS
    )


# --- (g) --------------------------------------------------------------------------------------------
#: The rooms inside ``app``, bottom to top: a module imports only from its own room or a lower one.
#: Every ``app`` module outside these packages (``config``, ``runs``, ``champion``, ``gate``,
#: ``evaluation``, ``export``, ``alerts``, ...) is the app's base, below them all.
APP_ROOMS = (
    "app.paper",
    "app.nightly",
    "app.walkforward",
    "app.workflows",
    "app.dashboard",
    "app.commands",
    "app.cli",
)


def _room(module: str) -> int:
    return next((k + 1 for k, room in enumerate(APP_ROOMS) if _under(module, room)), 0)


def test_no_import_runs_up_inside_the_app():
    bad = [
        f"{i.where}: {i.importer} imports {i.target}"
        for i in PROJECT_IMPORTS
        if _under(i.importer, "app") and _under(i.target, "app") and _room(i.target) > _room(i.importer)
    ]
    assert not bad, "imports up the app's rooms " + " < ".join(("base", *APP_ROOMS)) + ":\n" + "\n".join(bad)


def test_the_room_check_sees_an_import_up():
    assert _room("app.runs") < _room("app.walkforward.record") < _room("app.workflows.status")
    assert _room("app.nightly.retention") == _room("app.nightly.pipeline") > _room("app.paper.journal")


#: Product functions over :data:`LONG_LINES` lines that are allowed to stay so (each reads as one
#: sequence); the list only shrinks: a new long function is split where its parts have names.
LONG_LINES = 80
LONG_FUNCTIONS = {
    # Hot tensor kernels kept whole, so that the env's step reads top to bottom.
    "envs/core.py:step_core",
    "envs/core.py:trade",
    # One readable file per algorithm (CleanRL style): the training loop is the algorithm.
    "agents/ppo.py:train",
    # The tournament's rounds as one sequence: plan, train, score, select, record.
    "agents/tournament/orchestrator.py:run_tournament",
    # The backtest's decision loop and its vectorized accounting after it, one pass over the window.
    "backtests/policy_loop.py:run_policies",
}


def test_no_new_long_functions():
    found = set()
    for module, path in FILES.items():
        if module.split(".")[0] == "benchmarks":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            long = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                node.end_lineno - node.lineno + 1 > LONG_LINES
            )
            if long:
                found.add(f"{path.relative_to(ROOT)}:{node.name}")
    assert not found - LONG_FUNCTIONS, (
        f"functions over {LONG_LINES} lines (split them): {sorted(found - LONG_FUNCTIONS)}"
    )
