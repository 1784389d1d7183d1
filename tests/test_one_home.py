"""One home per fact: the run folder's names live in ``app/runs.py``; ``podracer --help`` loads no torch.

(a) No product module spells a name of the run folder but ``app/runs.py`` (``RunDir``): a file name
as a string literal, a folder name as a part of a path (``x / "pods"``, ``Path(x, "pods")``). The stages
below the app that write into a run folder (the tournament, the backtest report) cannot import
``app.runs``: each names what it writes in one module, listed in ``WRITERS``, and the tests below
check that what they write lands where ``RunDir`` reads it.
(b) ``podracer --help`` and ``podracer <command> --help`` import neither torch nor pandas (the
commands defer them, ``app/commands/__init__.py``), checked in a fresh interpreter.
(c) An exception is quoted in a message through ``data.errors.one_line``: no other product module
takes the first line of ``str(err)`` by hand (``str(x).splitlines()``, ``.split("\\n")``,
``.partition("\\n")``, after any ``.strip()``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import runs
from app.runs import RunDir
from backtests.metrics import TRADING_DAYS_PER_YEAR

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app", "agents", "backtests", "data", "envs")
OWNER = Path("app/runs.py")

#: File names of the run folder: flagged wherever a string literal is one (or ends in ``/<name>``).
#: ``feature_spec.json`` is left out: it also names the spec kept beside a nightly champion's copy.
FILES = (
    runs.RECORD,
    runs.CONFIG,
    runs.LEADERBOARD,
    runs.CURVE,
    runs.METRICS,
    runs.EQUITY,
    runs.POSITIONS,
    runs.TRADES,
    runs.DAILY_RETURNS,
    runs.TEARSHEET,
    runs.FOLD_RECORD,
    runs.LOOKS,
)
#: Folder names of the run folder: flagged only as a part of a path ("champion" is also a strategy).
FOLDERS = (
    runs.RUNS,
    runs.PODS,
    runs.CHAMPION,
    runs.CHAMPION_CHOSEN,
    runs.CHAMPION_START,
    runs.BACKTEST,
    runs.FOLDS,
)

#: The writers below the app (which may not import it) and the names each may spell.
WRITERS = {
    Path("agents/tournament/leaderboard.py"): {runs.LEADERBOARD},
    Path("agents/tournament/orchestrator.py"): {runs.PODS, runs.CONFIG, runs.CHAMPION},
    Path("agents/tournament/pod.py"): {runs.CURVE},
    Path("backtests/report.py"): {
        runs.BACKTEST,
        runs.METRICS,
        runs.EQUITY,
        runs.POSITIONS,
        runs.TRADES,
        runs.DAILY_RETURNS,
        runs.TEARSHEET,
    },
}
_PATH_CALLS = {"Path", "PurePath", "joinpath", "join"}  # Path(a, "pods"), p.joinpath(..), os.path.join


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def spelled_names(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` for each run-folder name ``source`` spells (docstrings aside)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [(node.lineno, f) for f in FILES if node.value == f or node.value.endswith("/" + f)]
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and _call_name(node) in _PATH_CALLS:
            parts = list(node.args)
        found += [
            (part.lineno, part.value)
            for part in parts
            if isinstance(part, ast.Constant) and part.value in FOLDERS
        ]
    return sorted(set(found))


def _product_files() -> list[Path]:
    return [p.relative_to(ROOT) for pkg in PRODUCT for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_no_module_but_app_runs_spells_a_run_folder_name():
    bad = []
    for rel in _product_files():
        if rel == OWNER:
            continue
        allowed = WRITERS.get(rel, set())
        names = spelled_names((ROOT / rel).read_text(encoding="utf-8"))
        bad += [f"{rel}:{line}: {name!r}" for line, name in names if name not in allowed]
    assert not bad, "run-folder names spelled outside app/runs.py (use RunDir):\n" + "\n".join(bad)


def test_the_scan_finds_what_it_looks_for():
    src = '''"""metrics.json in a docstring is prose."""
a = run_dir / "pods" / pod
b = Path(run_dir, "champion")
c = "backtest/metrics.json"
d = {"champion": 1.0, "pods": 2}
e = f"{run_dir}/config.toml"
'''
    assert spelled_names(src) == [(2, "pods"), (3, "champion"), (4, "metrics.json"), (6, "config.toml")]


def test_the_writers_exist_and_spell_what_they_are_allowed():
    # A writer that no longer spells a name should leave this table (and the table stays exact).
    for rel, allowed in WRITERS.items():
        names = {name for _, name in spelled_names((ROOT / rel).read_text(encoding="utf-8"))}
        assert names == allowed, f"{rel}: spells {sorted(names)}, WRITERS says {sorted(allowed)}"


def test_the_report_lands_where_rundir_reads_it(tmp_path, monkeypatch):
    from dashboard_fixture import write_real_backtest

    from backtests import report

    drawn = []  # where write_report asks for the tear sheet (drawing one takes pyfolio seconds)
    monkeypatch.setattr(report, "write_tearsheet", lambda path, *a: drawn.append(path) or "fallback")
    run = RunDir(tmp_path, "r")
    doc = write_real_backtest(run.path, days=3, num_assets=2, tearsheet=True)
    files = (
        run.backtest_metrics,
        run.backtest_equity,
        run.backtest_positions,
        run.backtest_trades,
        run.backtest_daily_returns,
    )
    assert {p.name for p in run.backtest.iterdir()} == {p.name for p in files}
    assert drawn == [run.backtest_tearsheet]
    assert json.loads(run.backtest_metrics.read_text())["strategies"].keys() == doc["strategies"].keys()


def _fake_round(task, ctx):
    """A pod round that writes only the policy files the orchestrator copies to the champion."""
    from agents.tournament.pod import PodOutcome

    out = Path(task.checkpoint_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("spec.json", "policy.safetensors"):
        (out / name).write_text("{}")
    return PodOutcome(
        pod_id=task.spec.pod_id,
        score=float(task.spec.seq),
        metrics={"sharpe_ratio": 0.0},
        round_steps=task.round_steps,
        env_steps=task.spec.parent_env_steps + task.round_steps,
        checkpoint=task.checkpoint_dir,
    )


def test_the_tournament_writes_where_rundir_reads(tmp_path):
    from agents.tournament import leaderboard, pod
    from agents.tournament.backends import InlineBackend
    from agents.tournament.orchestrator import TournamentArgs, run_tournament
    from data.toy import toy_market

    market = toy_market(num_steps=60 * 5, num_assets=2, num_features=3, bars_per_session=60, seed=0)
    train, valid, _ = market.split_sessions(0.6, 0.2)
    args = TournamentArgs(pods=1, leaderboard_size=2, round_steps=10, budget_steps=30, workers=0, seed=0)
    run = RunDir(tmp_path, "t")
    result = run_tournament(
        run.path,
        train,
        valid,
        args=args,
        round_fn=_fake_round,
        backend=InlineBackend(),
        config_toml="x = 1\n",
        annualization=TRADING_DAYS_PER_YEAR,
    )
    assert run.config.read_text() == "x = 1\n"
    assert run.leaderboard.is_file() and run.leaderboard.name == leaderboard.FILENAME
    assert sorted(p.name for p in run.pods.iterdir()) == sorted(
        p["pod_id"] for p in leaderboard.read_pods(run.path)
    )
    assert (run.champion / "spec.json").is_file()
    assert run.checkpoint(result.leaderboard[0]["checkpoint"]) == run.pod(result.champion["pod_id"])
    assert run.curve("p").name == pod.CURVE


# --- (b) ------------------------------------------------------------------------------------------
HELP = [
    [],
    ["train"],
    ["data", "fetch"],
    ["schedule", "run"],
    ["backtest"],
    ["export"],
    ["promote"],
    ["demote"],
]


@pytest.mark.parametrize("argv", HELP, ids=lambda argv: " ".join(argv) or "podracer")
def test_help_imports_no_torch(argv):
    probe = (
        "import contextlib, io, json, sys\n"
        "from app.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main({[*argv, '--help']!r})\n"
        "print(json.dumps({'rc': rc, 'help': out.getvalue(), 'loaded': [m for m in ('torch', 'pandas') if m in sys.modules]}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0 and "Usage" in got["help"]
    assert got["loaded"] == [], f"podracer {' '.join(argv)} --help imports {got['loaded']}"


def test_a_command_help_still_lists_its_options(capsys):
    from app.cli import main

    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--algo", "--config", "--tournament", "--budget-minutes", "--resume"):
        assert option in out


# --- (c) ------------------------------------------------------------------------------------------
ERRORS_OWNER = Path("data/errors.py")
_LINE_SPLITS = {"splitlines", "split", "partition"}


def _is_str_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str"


def first_lines_by_hand(source: str) -> list[int]:
    """Lines of ``source`` that split ``str(x)`` into lines (``splitlines()``, or ``split`` /
    ``partition`` on a newline), through any chain of ``str`` methods in between (``.strip()``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in _LINE_SPLITS:
            continue
        if node.func.attr != "splitlines" and not (
            node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "\n"
        ):
            continue
        receiver = node.func.value
        while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
            receiver = receiver.func.value  # str(err).strip().lower() -> str(err)
        if _is_str_call(receiver):
            found.append(node.lineno)
    return sorted(found)


def test_no_module_but_data_errors_quotes_an_exception_by_hand():
    bad = []
    for rel in _product_files():
        if rel == ERRORS_OWNER:
            continue
        lines = first_lines_by_hand((ROOT / rel).read_text(encoding="utf-8"))
        bad += [f"{rel}:{line}" for line in lines]
    assert not bad, "first line of str(err) taken by hand (use data.errors.one_line):\n" + "\n".join(bad)


def test_the_first_line_scan_finds_what_it_looks_for():
    src = """a = str(err).splitlines()[0] if str(err) else ""
b = (str(exc).strip().splitlines() or [""])[0][:200]
c = str(err).split("\\n")[0]
d = str(err).partition("\\n")[0]
e = done.stderr.strip().splitlines()
f = text.splitlines()[:60]
g = str(path).split("/")
h = __doc__.splitlines()[0]
"""
    assert first_lines_by_hand(src) == [1, 2, 3, 4]
