"""Rules of the suite itself: it runs the same on a fresh clone as here, and the README holds no figures.

(a) No test names an absolute path outside the repository and the temporary folders: the data a test
reads ships with the repository (``data/resources``, ``tests/fixtures``), so a fresh clone runs
every test, never a silently skipped one.
(b) A test skips only for a GPU (CUDA) or for something optional that is not installed, and its
reason says which; ``importorskip`` names only a package of an optional extra in pyproject.toml.
(c) Measured figures live in docs/benchmarks.md only: the README carries no dated measurement.
(d) A fixture is defined once: one that several files use lives in ``conftest.py``, and no test file
defines a fixture of the same name as another file's or conftest's.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = sorted((ROOT / "tests").rglob("*.py"))

#: Top folders of a filesystem that a test must not read from: a literal ``/<one of these>/<more>``
#: is flagged (``/tmp`` is the temporary folder; URL paths such as ``/v2/orders``, a ``PATH`` value
#: ``/usr/bin:/bin`` and a bare ``/etc`` given as a bad ticker are not files read).
OUTSIDE = (
    "work",
    "home",
    "root",
    "mnt",
    "media",
    "opt",
    "srv",
    "usr",
    "etc",
    "var",
    "data",
    "shared",
    "Users",
)
_ABSOLUTE = re.compile(rf"^/({'|'.join(OUTSIDE)})/[^:\s]+$")
#: A skip reason must say one of these.
_REASON = re.compile(r"CUDA|GPU|not installed|optional", re.IGNORECASE)
#: Import names of distributions whose import name differs from the distribution name.
_IMPORT_NAMES = {"empyrical_reloaded": "empyrical"}


def absolute_paths(source: str) -> list[str]:
    """String literals of ``source`` that are absolute paths outside the repository and /tmp."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ABSOLUTE.match(node.value)
    ]


def _literal_text(node: ast.AST) -> str | None:
    """The text of a string literal or an f-string's literal parts; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def _returned_texts(tree: ast.Module, name: str) -> list[str | None]:
    """The string literals the module's function ``name`` returns (its skip reasons)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            returns = [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
            return [
                _literal_text(r) for r in returns if not (isinstance(r, ast.Constant) and r.value is None)
            ]
    return [None]


def _reasons(node: ast.Call, tree: ast.Module) -> list[str | None]:
    """Skip reasons of a ``skip(...)`` / ``skipif(..., reason=...)`` call (None: not a literal)."""
    given = [k.value for k in node.keywords if k.arg == "reason"] or list(node.args[:1])
    if not given:
        return [None]
    reason = given[0]
    if isinstance(reason, ast.BoolOp):  # `_skip_reason() or ""`
        reason = reason.values[0]
    if isinstance(reason, ast.Call) and isinstance(reason.func, ast.Name):
        return _returned_texts(tree, reason.func.id)
    return [_literal_text(reason)]


def optional_imports() -> set[str]:
    """Import names of the packages of pyproject.toml's optional extras."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = set()
    for requirement in (r for group in extras.values() for r in group):
        name = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("-", "_")
        names.add(_IMPORT_NAMES.get(name, name))
    return names


def skip_problems(source: str, optional: set[str]) -> list[str]:
    """Skips of ``source`` whose reason names neither a GPU nor something optional not installed."""
    tree = ast.parse(source)
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        what, line = node.func.attr, node.lineno
        if what in ("skip", "skipif"):
            if not all(text and _REASON.search(text) for text in _reasons(node, tree)):
                problems.append(f"line {line}: {what} without a GPU or not-installed reason")
        elif what == "importorskip":
            module = _literal_text(node.args[0]) if node.args else None
            if (module or "").split(".")[0] not in optional:
                problems.append(f"line {line}: importorskip({module!r}) is not an optional extra")
    return problems


def test_no_test_reads_a_path_outside_the_repository():
    found = {str(p.relative_to(ROOT)): absolute_paths(p.read_text()) for p in TESTS}
    assert {name: paths for name, paths in found.items() if paths} == {}


def test_the_path_scan_finds_what_it_looks_for():
    outside = "/".join(("", "work", "shared", "data", "real_sample"))
    assert absolute_paths(f"SAMPLE = Path({outside!r})") == [outside]
    assert absolute_paths('fake.fail("POST", "/v2/orders"); Path("/tmp/x"); PATH = "/usr/bin:/bin"') == []


def test_every_skip_is_for_a_gpu_or_something_optional():
    optional = optional_imports()
    assert {"ray", "stable_baselines3", "empyrical", "selenium"} <= optional
    found = {str(p.relative_to(ROOT)): skip_problems(p.read_text(), optional) for p in TESTS}
    assert {name: problems for name, problems in found.items() if problems} == {}


def test_the_skip_scan_finds_what_it_looks_for():
    optional = {"ray"}
    good = (
        'pytest.mark.skipif(not cuda, reason="needs a CUDA device")\n'
        'pytest.importorskip("ray")\n'
        "def _why():\n    return f'{x} not installed'\n"
        'pytest.mark.skipif(_why() is not None, reason=_why() or "")\n'
    )
    assert skip_problems(good, optional) == []
    bad = (
        'pytest.mark.skipif(not path.exists(), reason="shared sample not present")\n'
        'pytest.importorskip("scipy.stats")\n'
        "pytest.skip()\n"
    )
    assert len(skip_problems(bad, optional)) == 3


#: A measurement with its date or machine, or a throughput: docs/benchmarks.md's business.
_FIGURE = re.compile(
    r"\b20\d\d-\d\d-\d\d\)|VM, 20\d\d-|\d\s*(env-steps|steps)/s\b|\bon (one|an?) (H100|H200)\b"
)


def test_the_readme_carries_no_measured_figures():
    readme = (ROOT / "README.md").read_text()
    assert [line for line in readme.splitlines() if _FIGURE.search(line)] == []
    assert "docs/benchmarks.md" in readme


def fixtures(source: str) -> list[str]:
    """Names of the module-level fixtures that ``source`` defines."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    ]


def test_no_fixture_is_defined_twice():
    defined: dict[str, list[str]] = {}
    for path in TESTS:
        for name in fixtures(path.read_text()):
            defined.setdefault(name, []).append(path.name)
    assert {name: files for name, files in defined.items() if len(files) > 1} == {}


def test_the_fixture_scan_finds_what_it_looks_for():
    source = "@pytest.fixture\ndef a(): ...\n@pytest.fixture(scope='module')\ndef b(): ...\ndef c(): ..."
    assert fixtures(source) == ["a", "b"]
