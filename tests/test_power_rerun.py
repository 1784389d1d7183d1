"""The power table's learner-only rerun: which columns it reruns, what it keeps, and when it refuses
to keep them (benchmarks/power_rerun.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import power_table  # noqa: E402

from benchmarks import power_rerun  # noqa: E402
from benchmarks.power_columns import COLUMNS  # noqa: E402

ARGS_V1 = "class PPOArgs:\n    lr: float = 3e-4\n\n\nclass DirectArgs:\n    lr: float = 3e-3\n"


def _entry(p: float) -> dict:
    return {"outcome": "not significant", "alpha_p_value": p}


def _row(commit: str, p: float, columns=COLUMNS) -> dict:
    fields = {"level": 0.0, "index": 0, "commit": commit, "wall_s": 1.0, "versions": power_rerun.versions()}
    return fields | {"columns": list(columns)} | {c: _entry(p) for c in columns}


def test_a_merged_row_takes_the_learner_columns_from_the_rerun_and_names_each_columns_commit():
    old = _row("a" * 40, 0.5)
    new = _row("b" * 40, 0.1, power_rerun.LEARNER_COLUMNS) | {"env_steps": 7}
    row = power_rerun.merged(old, new, power_rerun.LEARNER_COLUMNS, COLUMNS)
    assert row["columns"] == list(COLUMNS) and row["env_steps"] == 7
    assert row["wall_s"] == 1.0 and row["rerun_timings"] == {"wall_s": 1.0}  # the rerun's apart
    for name in COLUMNS:
        rerun = name in power_rerun.LEARNER_COLUMNS
        assert row[name]["alpha_p_value"] == (0.1 if rerun else 0.5), name
        assert row["column_commits"][name] == ("b" if rerun else "a") * 40, name
    assert {"ppo", "ridge_quintile", "boosted_quintile", "oracle_quintile"} == set(COLUMNS) - set(
        power_rerun.LEARNER_COLUMNS
    )


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with an ``agents/args.py`` and a ``data/`` file, as ``power_rerun.ROOT``."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    for path, text in {
        "agents/args.py": ARGS_V1,
        "agents/direct.py": "x = 1\n",
        "data/bars.py": "y = 1\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "one")
    monkeypatch.setattr(power_rerun, "ROOT", tmp_path)
    power_rerun.commit.cache_clear()
    yield tmp_path
    power_rerun.commit.cache_clear()


def _commit_change(repo: Path, path: str, text: str) -> str:
    (repo / path).write_text(text)
    _git(repo, "commit", "-qam", f"change {path}")
    power_rerun.commit.cache_clear()
    return _git(repo, "rev-parse", "HEAD")


def test_columns_are_kept_across_a_change_to_the_learner_alone(repo):
    first = _git(repo, "rev-parse", "HEAD")
    _commit_change(repo, "agents/direct.py", "x = 2\n")
    _commit_change(repo, "agents/args.py", ARGS_V1.replace("3e-3", "1e-2"))  # DirectArgs only
    power_rerun.check_reusable(_row(first, 0.5), ("ppo", "ridge_quintile"))


@pytest.mark.parametrize(
    ("path", "text", "named"),
    [
        ("data/bars.py", "y = 2\n", "data/bars.py"),
        ("agents/args.py", ARGS_V1.replace("3e-4", "1e-3"), "agents/args.py"),  # PPOArgs changed
    ],
)
def test_columns_are_not_kept_across_a_change_outside_the_learner(repo, path, text, named):
    first = _git(repo, "rev-parse", "HEAD")
    _commit_change(repo, path, text)
    with pytest.raises(SystemExit, match=f"error: --rerun-learner: {named} changed since {first[:12]}"):
        power_rerun.check_reusable(_row(first, 0.5), ("ppo",))


def test_uncommitted_product_changes_refuse_to_keep_columns(repo):
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "data/bars.py").write_text("y = 3\n")
    power_rerun.commit.cache_clear()
    assert power_rerun.commit() == first + "+dirty"
    with pytest.raises(SystemExit, match="commit the product's changes"):
        power_rerun.check_reusable(_row("c" * 40, 0.5), ("ppo",))


def test_rerun_learner_reruns_only_the_learner_columns_of_a_row_of_another_commit(tmp_path, monkeypatch):
    args = power_table.parse_args(["--out", str(tmp_path / "rows.jsonl"), "--with-ppo", "--rerun-learner"])
    calls = []

    def fake_market(args, level, index, columns=None):
        calls.append(columns)
        return _row("b" * 40, 0.1, columns or COLUMNS)

    monkeypatch.setattr(power_table, "run_market", fake_market)
    monkeypatch.setattr(power_table, "commit", lambda: "b" * 40)
    monkeypatch.setattr(power_table, "check_reusable", lambda row, keep: calls.append(keep))
    done = {(0.0, 0): _row("a" * 40, 0.5)}
    power_table.run_one(args, done, 0.0, 0)
    assert calls[0] == ("ridge_quintile", "boosted_quintile", "ppo", "oracle_quintile")
    assert calls[1] == power_rerun.LEARNER_COLUMNS
    assert done[(0.0, 0)]["ppo"]["alpha_p_value"] == 0.5
    assert done[(0.0, 0)]["champion"]["alpha_p_value"] == 0.1
    power_table.run_one(args, done, 0.0, 0)  # now at this commit: nothing to rerun
    assert len(calls) == 2
    assert len(power_table.load_rows(args.out, "")) == 0  # (a key no row has)
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 1


def test_two_checkouts_with_uncommitted_changes_are_never_the_same_code(repo):
    assert power_rerun.same_code("a" * 40, "a" * 40)
    assert not power_rerun.same_code("a" * 40 + "+dirty", "a" * 40 + "+dirty")
    assert not power_rerun.same_code(None, None)


def test_other_library_versions_refuse_to_keep_columns(repo):
    first = _git(repo, "rev-parse", "HEAD")
    row = _row(first, 0.5) | {"versions": {"torch": "0.0"}}
    with pytest.raises(SystemExit, match="measured with libraries"):
        power_rerun.check_reusable(row, ("ppo",))


def test_a_torn_last_row_is_ignored_and_the_next_row_starts_its_own_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = _row("a" * 40, 0.5) | {"settings_key": "k"}
    power_table.append_row(path, row)
    with path.open("a") as out:
        out.write('{"settings_key": "k", "lev')  # a kill in the middle of a write
    assert set(power_table.load_rows(path, "k")) == {(0.0, 0)}
    power_table.append_row(path, row | {"index": 1})
    assert set(power_table.load_rows(path, "k")) == {(0.0, 0), (0.0, 1)}
    path.write_text(path.read_text() + "[1, 2]\n")  # not a torn row: an error naming the line
    with pytest.raises(SystemExit, match="rows.jsonl:4: not a power-table row"):
        power_table.load_rows(path, "k")


def test_a_spot_check_accepts_a_shared_change_only_when_the_kept_columns_come_out_unchanged(repo):
    first = _git(repo, "rev-parse", "HEAD")
    now = _commit_change(repo, "data/bars.py", "y = 2\n")  # shared: refused without a spot check
    old = _row(first, 0.5)
    keep = ("ppo", "ridge_quintile")
    with pytest.raises(SystemExit, match="--spot-check N"):
        power_rerun.check_reusable(old, keep)
    moved = _row(now, 0.5) | {"ppo": _entry(0.25)}
    assert power_rerun.spot_mismatches(old, moved, keep) == ["ppo.alpha_p_value"]
    with pytest.raises(SystemExit, match="ppo.alpha_p_value changed on this checkout"):
        power_rerun.verify(old, moved, keep)
    assert (first, now) not in power_rerun.VERIFIED
    power_rerun.verify(old, _row(now, 0.5), keep)  # the same figures: the pair is accepted
    try:
        power_rerun.check_reusable(_row(first, 0.7) | {"index": 3}, keep)  # another market, kept
    finally:
        power_rerun.VERIFIED.discard((first, now))


def test_spot_check_reruns_the_first_markets_in_full_and_keeps_the_fresh_rows(tmp_path, monkeypatch, capsys):
    args = power_table.parse_args(
        ["--out", str(tmp_path / "rows.jsonl"), "--rerun-learner", "--spot-check", "1", "--levels", "0"]
    )
    runs = []

    def fake_market(args, level, index, columns=None):
        runs.append((index, columns))
        return _row("b" * 40, 0.5, columns or power_table.run_columns(args)) | {"index": index}

    monkeypatch.setattr(power_table, "run_market", fake_market)
    monkeypatch.setattr(power_table, "commit", lambda: "b" * 40)
    done = {(0.0, i): _row("a" * 40, 0.5, power_table.run_columns(args)) | {"index": i} for i in range(2)}
    power_table.spot_check(args, done)
    assert runs == [(0, None)]  # one market, every column
    assert done[(0.0, 0)]["commit"] == "b" * 40 and done[(0.0, 1)]["commit"] == "a" * 40
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 1
    with pytest.raises(SystemExit):
        power_table.parse_args(["--spot-check", "2"])  # (without --rerun-learner)
    assert "--spot-check: a count >= 0, with --rerun-learner" in capsys.readouterr().err


def test_with_ppo_adds_the_ppo_column_alone_to_rows_of_this_commit_without_it(tmp_path, monkeypatch):
    """A run without ``--with-ppo`` writes rows under its own key; a run with it on the same commit runs
    the PPO column alone on those markets and keeps the rest; a row of another commit runs in full."""
    out = tmp_path / "rows.jsonl"
    args = power_table.parse_args(["--out", str(out), "--with-ppo"])
    plain_key = power_table.settings_key(power_table.parse_args(["--out", str(out)]))
    assert plain_key != power_table.settings_key(args)
    calls = []

    def fake_market(args, level, index, columns=None):
        calls.append((index, columns))
        row = _row("b" * 40, 0.1, columns or COLUMNS)
        return row | {"index": index, "settings_key": power_table.settings_key(args), "ppo_s": 2.0}

    without = [c for c in COLUMNS if c != "ppo"]
    monkeypatch.setattr(power_table, "run_market", fake_market)
    monkeypatch.setattr(power_table, "commit", lambda: "b" * 40)
    plain = {(0.0, 0): _row("b" * 40, 0.5, without), (0.0, 1): _row("a" * 40, 0.5, without) | {"index": 1}}
    done: dict = {}
    power_table.run_one(args, done, 0.0, 0, plain)
    power_table.run_one(args, done, 0.0, 1, plain)
    assert calls == [(0, ("ppo",)), (1, None)]
    added = done[(0.0, 0)]
    assert added["columns"] == list(COLUMNS) and added["settings_key"] == power_table.settings_key(args)
    assert added["ppo"]["alpha_p_value"] == 0.1 and added["champion"]["alpha_p_value"] == 0.5
    assert added["rerun_timings"] == {"ppo_s": 2.0, "wall_s": 1.0}
    assert power_table.load_rows(out, power_table.settings_key(args)).keys() == {(0.0, 0), (0.0, 1)}
