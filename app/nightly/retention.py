"""Bounded disk: what ``[retention]`` keeps in a home, and ``podracer prune`` (after each nightly retrain too).

:func:`plan_prune` lists what would go (:class:`Doomed`: kind, path, bytes, why); :func:`prune`
removes it. What goes:

- **runs**: ``runs/nightly-*`` beyond the newest ``keep_runs`` (the runs the schedule makes; runs a
  person started are theirs to delete);
- **exports** and **champion copies** (``exports/<run>-<pod>/``, ``champions/<run>/``) of champions
  older than the last ``keep_champions`` promotions;
- **logs** (``logs/*.log``) over ``log_max_mb``: copied to ``<name>.1`` (older copies shift up to
  ``keep_logs``) and truncated in place, so a writer appending to it (cron's ``>>``) carries on;
- **journal**: days before the newest ``journal_sessions`` sessions are compacted into daily rows
  (``app.paper.compact``).

**Never** touched: the champion in charge and its predecessor (their run, export and policy copy,
whatever the counts), the champion of the paper journal's newest session (the loop trades it until
the next session's first cycle), anything outside the home's
``runs/``, ``exports/``, ``champions/``, ``logs/``. Folders are removed by renaming them to a hidden
``.<name>.pruning`` sibling first (one rename: a reader sees the whole folder or none), then deleted;
a leftover of an interrupted prune is finished by the next. The prune holds ``retrain.lock``: it
never runs beside a retrain (exit 75 when one holds it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config_sections import RetentionConfig
from app.nightly.lock import RETRAIN_LOCK_NAME, ProcessLock
from app.nightly.registry import current_champion, read_decisions
from app.nightly.shadow import read_book
from app.nightly.steps import CHAMPIONS_DIR
from app.paper.compact import compact_journal
from app.paper.journal import Journal, journal_path
from app.runs import runs_root
from data import sqlite
from data.errors import PodracerError

log = logging.getLogger(__name__)

NIGHTLY_RUN_PREFIX = "nightly-"
PRUNING_SUFFIX = ".pruning"


@dataclass(frozen=True)
class Doomed:
    """One thing a prune removes (or, for a log or the journal, rewrites)."""

    kind: str  # run | export | champion | log | journal
    path: str
    bytes: int
    why: str


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total


def protected(home: Path) -> dict[str, set[str]]:
    """Run ids, export paths and champion-copy paths that no prune may touch: the champion in charge,
    its predecessor, and what the paper loop's last heartbeat names."""
    champion = current_champion(home)
    runs: set[str] = set()
    paths: set[str] = set()
    if champion is not None:
        runs.add(champion.run_id)
        if champion.info.previous_champion:
            runs.add(champion.info.previous_champion)
        for path in (champion.bundle, champion.policy_dir):
            if path:
                paths.add(str(Path(path).resolve()))
    promoted = [d for d in read_decisions(home) if d["verdict"] == "promoted"]
    if champion is not None:
        # its predecessor: the promotion before the champion's own
        ids = [d["challenger_run_id"] for d in promoted]
        if champion.run_id in ids and ids.index(champion.run_id) > 0:
            runs.add(str(ids[ids.index(champion.run_id) - 1]))
    traded = _last_traded_run(home)
    if traded is not None:
        runs.add(traded)  # the paper loop keeps its bundle until the next session's first cycle
    with contextlib.suppress(PodracerError):  # the shadow book's challengers may still be promoted
        runs.update(c.run_id for c in read_book(home).challengers)
    for d in promoted:
        if d["challenger_run_id"] in runs and d.get("bundle"):
            paths.add(str(Path(d["bundle"]).resolve()))
    return {"runs": runs, "paths": paths}


def _last_traded_run(home: Path) -> str | None:
    """The registry run of the newest session the paper journal traded (None: none, or not a champion)."""
    path = journal_path(home)
    if not path.is_file():
        return None
    conn = sqlite.connect(path, read_only=True)
    try:
        row = conn.execute("SELECT run_id FROM sessions ORDER BY session DESC LIMIT 1").fetchone()
    except sqlite3.DatabaseError:
        return None
    finally:
        conn.close()
    return None if row is None or row[0] is None else str(row[0])


def plan_prune(home: str | os.PathLike[str], policy: RetentionConfig) -> list[Doomed]:
    """Everything a prune of ``home`` under ``policy`` would remove or rewrite (see the module)."""
    home = _existing(home)
    keep = protected(home)
    out: list[Doomed] = []
    # half-removed folders of an interrupted prune
    for parent in (runs_root(home), home / "exports", home / CHAMPIONS_DIR):
        for leftover in sorted(parent.glob(f".*{PRUNING_SUFFIX}")) if parent.is_dir() else []:
            out.append(Doomed("leftover", str(leftover), _size(leftover), "an interrupted prune's leftover"))
    runs_dir = runs_root(home)
    nightly = (
        sorted(p for p in runs_dir.glob(f"{NIGHTLY_RUN_PREFIX}*") if p.is_dir()) if runs_dir.is_dir() else []
    )
    for run in nightly[: max(0, len(nightly) - policy.keep_runs)]:
        if run.name in keep["runs"]:
            continue
        out.append(
            Doomed("run", str(run), _size(run), f"older than the newest {policy.keep_runs} nightly runs")
        )
    promoted = [d for d in read_decisions(home) if d["verdict"] == "promoted"]
    old = promoted[: max(0, len(promoted) - max(2, policy.keep_champions))]
    for d in old:
        run_id = str(d["challenger_run_id"])
        if run_id in keep["runs"]:
            continue
        why = f"champion {run_id} is older than the last {max(2, policy.keep_champions)}"
        candidates = [("export", d.get("bundle")), ("champion", str(home / CHAMPIONS_DIR / run_id))]
        for kind, where in candidates:
            if not where:
                continue
            path = Path(where)
            if not path.is_dir() or str(path.resolve()) in keep["paths"] or not _inside(path, home):
                continue
            out.append(Doomed(kind, str(path), _size(path), why))
    logs = home / "logs"
    for path in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        size = path.stat().st_size
        if size > policy.log_max_mb * 1e6:
            out.append(Doomed("log", str(path), size, f"over {policy.log_max_mb:g} MB: rotated"))
    if journal_path(home).is_file():
        with Journal.for_home(home) as journal:
            plan = compact_journal(journal, policy.journal_sessions, dry_run=True)
        if not plan.empty:
            why = (
                f"{len(plan.days)} days before the newest {policy.journal_sessions} sessions "
                f"({plan.days[0]} .. {plan.days[-1]}, {plan.rows} rows) -> daily rows"
            )
            out.append(Doomed("journal", str(journal_path(home)), 0, why))
    return out


def _existing(home: str | os.PathLike[str]) -> Path:
    """``home`` as a Path; a one-line error when it is not a folder (a prune never creates one)."""
    path = Path(home)
    if not path.is_dir():
        raise PodracerError(f"no podracer home at {path}: check --home / PODRACER_HOME")
    return path


def _inside(path: Path, home: Path) -> bool:
    """``path`` lies under one of the home's pruned folders (never anything else on the disk)."""
    resolved = path.resolve()
    for folder in ("runs", "exports", CHAMPIONS_DIR):
        if resolved.is_relative_to((home / folder).resolve()):
            return True
    return False


def _remove_dir(path: Path) -> None:
    """Rename to a hidden sibling (readers see all or nothing), then delete."""
    if path.name.startswith(".") and path.name.endswith(PRUNING_SUFFIX):
        shutil.rmtree(path, ignore_errors=True)
        return
    doomed = path.with_name(f".{path.name}{PRUNING_SUFFIX}")
    if doomed.exists():
        shutil.rmtree(doomed, ignore_errors=True)
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def rotate_log(path: Path, keep: int) -> None:
    """Copy ``path`` to ``<path>.1`` (shifting older copies up to ``keep``) and truncate it in place."""
    for k in range(keep, 0, -1):
        older = path.with_name(f"{path.name}.{k}")
        if older.exists():
            if k == keep:
                older.unlink()
            else:
                os.replace(older, path.with_name(f"{path.name}.{k + 1}"))
    if keep > 0:
        shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    with open(path, "r+b") as fh:
        fh.truncate(0)


def prune(home: str | os.PathLike[str], policy: RetentionConfig) -> list[Doomed]:
    """Remove what :func:`plan_prune` lists, under ``retrain.lock``; returns it. A failure on one item
    is logged and the rest go on (the next prune tries again)."""
    home = _existing(home)
    with ProcessLock(home / RETRAIN_LOCK_NAME, command="podracer prune"):
        plan = plan_prune(home, policy)
        done = []
        for item in plan:
            path = Path(item.path)
            try:
                if item.kind in ("run", "export", "champion", "leftover"):
                    _remove_dir(path)
                elif item.kind == "log":
                    rotate_log(path, policy.keep_logs)
                elif item.kind == "journal":
                    with Journal.for_home(home) as journal:
                        compact_journal(journal, policy.journal_sessions)
                done.append(item)
            except OSError as err:
                log.warning("prune: could not remove %s: %s", path, err)
        return done


def home_bytes(home: str | os.PathLike[str]) -> dict[str, Any]:
    """Bytes per top-level folder of ``home`` (the soak's disk bound, ``podracer prune``'s summary)."""
    home = Path(home)
    sizes = {p.name: _size(p) for p in sorted(home.iterdir())} if home.is_dir() else {}
    return {"total": sum(sizes.values()), **sizes}
