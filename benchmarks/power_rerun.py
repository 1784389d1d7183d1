"""Rerunning the power table's learner columns after a change to the direct learner alone.

A row's columns split in two: those that depend on the direct learner's code (``LEARNER_COLUMNS``:
the champion, its start, and everything traded the champion's way, whose head is the learner's) and
those that do not (the ridge and the boosted ranker traded top 20%, the PPO tournament's champion,
the oracle traded top 20%). After a change to the learner, ``power_table.py --rerun-learner`` runs the
first kind again on each market and keeps the second from the row already written, which takes the
PPO tournament (about half of a market's time) out of the rerun.

That is honest only when nothing the kept columns depend on changed: :func:`check_reusable` compares
the kept columns' commit with the one checked out and refuses (one line naming the files) when a
file of the product outside ``LEARNER_PATHS`` changed, when ``agents/args.py`` changed outside
``DirectArgs``, when either checkout had uncommitted changes to the product, or when the libraries'
versions differ (:func:`versions`, recorded in every row). Every row records the commit of each of
its columns (``column_commits``) and the read-out prints them.

A change to shared files that leaves the kept columns as they were (a learner's option whose default
keeps the old code path) can be shown so instead of assumed: with ``--spot-check N`` the first ``N``
markets are run again in full and each kept column's figures (:data:`CHECKED_FIELDS`) compared with
the stored row's (:func:`spot_mismatches`); only when every one is equal (the runs are seeded and
deterministic on the CPU) is the pair of commits accepted (:data:`VERIFIED`) for the other markets'
kept columns. The fresh rows replace the spot-checked markets' old ones.
"""

from __future__ import annotations

import functools
import math
import re
import subprocess
from pathlib import Path

#: The columns whose policy the direct learner's code makes: rerun by ``--rerun-learner``.
LEARNER_COLUMNS = ("champion", "start", "ridge_softmax", "boosted_softmax", "oracle")
#: The product's code: a change under these makes rows of earlier commits stale.
PRODUCT_PATHS = (
    "agents/",
    "app/",
    "backtests/",
    "data/",
    "envs/",
    "benchmarks/power_columns.py",
    "benchmarks/power_table.py",
    "pyproject.toml",
)
#: The libraries whose versions a row records: a kept column needs the same.
LIBRARIES = ("torch", "numpy", "scipy", "lightgbm", "pandas")
#: The direct learner's own files: a change to them leaves the other columns as they were.
LEARNER_PATHS = ("agents/direct.py", "agents/linear_start.py", "agents/population/direct.py")
#: What a spot check compares of each kept column (equal to float rounding: ``SPOT_RTOL``).
CHECKED_FIELDS = ("outcome", "alpha_p_value", "alpha_per_day", "sharpe", "turnover", "costs")
SPOT_RTOL = 1e-9
#: Pairs ``(column's commit, checkout's commit)`` a spot check showed to give the kept columns unchanged.
VERIFIED: set[tuple[str, str]] = set()
#: Holds the learner's ``DirectArgs`` beside the other algorithms' arguments.
ARGS_PATH = "agents/args.py"
ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache
def commit() -> str | None:
    """The commit checked out when the process first asks (before its first market: the code it
    runs on), with ``+dirty`` when the product's files had uncommitted changes; None outside git."""
    head = _git("rev-parse", "HEAD")
    if not head:
        return None
    dirty = _git("status", "--porcelain", "--", *PRODUCT_PATHS)
    return head.strip() + ("+dirty" if dirty else "")


@functools.cache
def versions() -> dict[str, str | None]:
    """The installed versions of :data:`LIBRARIES` (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def same_code(a: str | None, b: str | None) -> bool:
    """Two rows' commits name the same code: equal, known and neither with uncommitted changes."""
    return a is not None and a == b and not a.endswith("+dirty")


def column_commit(row: dict, name: str) -> str | None:
    """The commit column ``name`` of ``row`` was measured on (rows before ``column_commits``: the
    row's)."""
    return row.get("column_commits", {}).get(name, row.get("commit"))


def _class_source(text: str, name: str) -> str:
    """The source of the top-level class ``name`` in ``text`` ("" when absent)."""
    found = re.search(rf"^class {name}\b.*?(?=^\S)", text + "\nEND", flags=re.S | re.M)
    return found.group(0).rstrip() if found else ""


def _args_outside_direct_changed(old: str, new: str) -> bool:
    """``agents/args.py`` differs between the commits other than in ``DirectArgs``."""
    before, after = _git("show", f"{old}:{ARGS_PATH}") or "", _git("show", f"{new}:{ARGS_PATH}") or ""
    strip = lambda text: text.replace(_class_source(text, "DirectArgs"), "")  # noqa: E731
    return strip(before) != strip(after)


def stale_files(old: str, new: str) -> list[str]:
    """The product's files outside the learner's that differ between commits ``old`` and ``new``."""
    changed = _git("diff", "--name-only", old, new, "--", *PRODUCT_PATHS)
    if changed is None:
        return [f"(commit {old[:12]} unknown to this checkout)"]
    files = [f for f in changed.split() if f not in LEARNER_PATHS]
    if ARGS_PATH in files and not _args_outside_direct_changed(old, new):
        files.remove(ARGS_PATH)
    return files


def check_reusable(row: dict, keep: tuple[str, ...]) -> None:
    """Exit with one line when a column of ``keep`` in ``row`` was measured on code that differs from
    the checkout's in anything but the learner (or either side had uncommitted product changes)."""
    now = commit()
    if row.get("versions") != versions():
        raise SystemExit(
            f"error: --rerun-learner: market {row['index']} at level {row['level']} was measured with "
            f"libraries {row.get('versions') or 'unrecorded'}, this environment has {versions()}; "
            "rerun every column (without --rerun-learner)"
        )
    for name in keep:
        then = column_commit(row, name)
        if same_code(then, now):
            continue
        if then is None or now is None or then.endswith("+dirty") or now.endswith("+dirty"):
            raise SystemExit(
                f"error: --rerun-learner: the {name} column of market {row['index']} at level {row['level']} "
                f"was measured on {then or 'an unknown commit'}, this checkout is {now or 'unknown'}; "
                "commit the product's changes, or rerun every column (without --rerun-learner)"
            )
        files = stale_files(then, now.removesuffix("+dirty"))
        if files and (then, now) not in VERIFIED:
            raise SystemExit(
                f"error: --rerun-learner: {', '.join(files[:5])} changed since {then[:12]}, on which the "
                f"{name} column was measured; rerun every column (without --rerun-learner), or show "
                "it unchanged with --spot-check N"
            )


def merged(old: dict, new: dict, rerun: tuple[str, ...], order: tuple[str, ...]) -> dict:
    """``old``'s row with the columns ``rerun`` (and the fields of the run that made them) taken from
    ``new``; ``column_commits`` names each column's commit."""
    commits = {name: column_commit(old, name) for name in old["columns"]}
    commits.update({name: new["commit"] for name in rerun})
    timings = {k for k in new if k.endswith("_s")}
    row = {**old, **{k: v for k, v in new.items() if k not in (*old.get("columns", ()), *timings)}}
    row["rerun_timings"] = {k: new[k] for k in sorted(timings)}  # the kept columns' timings stay
    for name in rerun:
        row[name] = new[name]
    row["columns"] = [c for c in order if c in commits]
    row["column_commits"] = {c: commits[c] for c in row["columns"]}
    return row


def same_value(a: object, b: object) -> bool:
    """Equal, floats to ``SPOT_RTOL`` relative (NaN to NaN), dicts key by key: two runs of one market
    from different commits differ in the last bits of a regression's alpha and beta (a sum taken in
    another order), not in a verdict. The spot check and ``benchmarks/power_paired.py`` both use it."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=SPOT_RTOL, abs_tol=1e-15)
    return a == b


def spot_mismatches(old: dict, new: dict, keep: tuple[str, ...]) -> list[str]:
    """``"column.field"`` of each kept column's :data:`CHECKED_FIELDS` that differs between the
    stored row ``old`` and the full rerun ``new`` of the same market."""
    return [
        f"{name}.{field}"
        for name in keep
        for field in CHECKED_FIELDS
        if not same_value(old.get(name, {}).get(field), new.get(name, {}).get(field))
    ]


def verify(old: dict, new: dict, keep: tuple[str, ...]) -> None:
    """Accept ``old``'s kept columns' commits for the checkout's when the full rerun ``new`` gives
    them unchanged; else exit with one line naming what moved."""
    moved = spot_mismatches(old, new, keep)
    if moved:
        raise SystemExit(
            f"error: --spot-check: market {old['index']} at level {old['level']}: {', '.join(moved[:4])} "
            "changed on this checkout; rerun every column (without --rerun-learner)"
        )
    for name in keep:
        then = column_commit(old, name)
        if then is not None and new.get("commit") is not None:
            VERIFIED.add((then, new["commit"]))
