"""The nightly registry: ``<home>/registry.sqlite`` holds every retrain decision and the champion pointer.

Source of truth for "who is the champion": the single-row ``champion`` table of this database, not a
``champion.json`` file. The decision row and the pointer change in ONE SQLite transaction, so a reader
can never see a promotion without its decision (or the reverse), and a crash at any instant leaves
either the whole old state or the whole new one. A separate JSON file could only be renamed after
(or before) the commit, which reopens exactly that window.

Tables (schema version in ``PRAGMA user_version``; a writer migrates an older file in place, in one
transaction, :data:`MIGRATIONS`; a reader reads an older file's rows under the current names):

- ``decisions``: one row per retrain attempt (``verdict`` is ``promoted``, ``rejected`` or ``failed``),
  with its inputs, scores, reason, run ids, data windows and times, and one per champion change an
  operator made by hand (``podracer promote`` / ``demote``: ``app.nightly.manual``); ``source`` says
  which (``rule`` or ``manual``).
- ``champion``: at most one row (``slot = 1``): the current champion's run id, policy folder, bundle,
  the decision that promoted it, and its windows.
- ``demotions``: one row per champion demoted (``app.champion.ChampionDemotion``, ``source`` as its
  decision's), written with its decision in the transaction that deletes the ``champion`` row.

Readers (read-only; they never create the file): :func:`read_decisions`, :func:`current_champion`,
:func:`last_demotion` (a schema-2 file, without ``demotions``, reads as one with no demotion; a schema-3 file, without
``source``, reads as the rule's).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.champion import Champion, ChampionDemotion, PointerBusy, PointerError
from app.gate import GateResult
from app.nightly.decision import DecisionRecord
from data import sqlite
from data.errors import one_line
from data.scrub import scrub, scrub_all

REGISTRY_NAME = "registry.sqlite"
_DEMOTIONS = """
CREATE TABLE IF NOT EXISTS demotions (id INTEGER PRIMARY KEY AUTOINCREMENT, decision_id INTEGER NOT NULL
    REFERENCES decisions(id), run_id TEXT NOT NULL, demoted_at TEXT NOT NULL, session TEXT, reason TEXT NOT NULL)"""
SCHEMA_VERSION = 4
#: The schema :data:`_SCHEMA` creates; a new file is then migrated from it like an older one.
_BASE_VERSION = 3
#: Statements that bring a registry from ``version`` to ``version + 1``, run in the writer's transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Version 1 stored the gate's level as the PSR threshold ``dsr_threshold = 1 - significance_level``.
    1: (
        "ALTER TABLE decisions RENAME COLUMN dsr_threshold TO significance_level",
        "UPDATE decisions SET significance_level = round(1.0 - significance_level, 12) "
        "WHERE significance_level IS NOT NULL",
    ),
    2: (_DEMOTIONS,),
    # Who changed the champion: the promotion rule (every row before) or an operator by hand.
    3: tuple(
        f"ALTER TABLE {table} ADD COLUMN source TEXT NOT NULL DEFAULT 'rule' CHECK (source IN ('rule', 'manual'))"
        for table in ("decisions", "demotions")
    ),
}

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    decided_at TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('promoted', 'rejected', 'failed')),
    reason TEXT NOT NULL,
    step TEXT NOT NULL,
    challenger_run_id TEXT,
    champion_run_id TEXT,
    fitness TEXT,
    challenger_fitness REAL,
    champion_fitness REAL,
    margin REAL,
    challenger_dsr REAL,
    significance_level REAL,
    num_trials INTEGER,
    data_start TEXT,
    data_end TEXT,
    selection_start TEXT,
    selection_end TEXT,
    eval_start TEXT,
    eval_end TEXT,
    bundle TEXT,
    inputs TEXT NOT NULL DEFAULT '{}',
    scores TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS champion (
    slot INTEGER PRIMARY KEY CHECK (slot = 1),
    decision_id INTEGER NOT NULL REFERENCES decisions(id),
    run_id TEXT NOT NULL,
    policy_dir TEXT NOT NULL,
    bundle TEXT,
    promoted_at TEXT NOT NULL,
    fitness TEXT,
    fitness_value REAL,
    selection_end TEXT,
    eval_start TEXT,
    eval_end TEXT,
    info TEXT NOT NULL DEFAULT '{}'
);
"""
    + _DEMOTIONS
)


class RegistryError(PointerError):
    """The registry file is unreadable, corrupt, or from a newer podracer."""


class RegistryBusy(RegistryError, PointerBusy):
    """Another connection holds a lock on the registry past the reader's timeout ("database is
    locked"): a retrain writing it. Readers that must not wait (the paper loop) retry or go on."""


def _locked(err: sqlite3.Error) -> bool:
    return isinstance(err, sqlite3.OperationalError) and any(
        word in str(err).lower() for word in ("locked", "busy")
    )


#: The ``champion`` table's columns a :class:`Champion` fills (``decision_id`` and ``slot`` are the writer's).
_CHAMPION_COLUMNS = frozenset(
    ("run_id", "policy_dir", "bundle", "promoted_at", "fitness", "fitness_value", "selection_end")
    + ("eval_start", "eval_end", "info")
)


def registry_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/registry.sqlite``."""
    return Path(home) / REGISTRY_NAME


def _connect(path: Path, *, read_only: bool, timeout: float = sqlite.TIMEOUT_S) -> sqlite3.Connection:
    try:
        conn = sqlite.connect(path, read_only=read_only, timeout=timeout)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as err:
        kind = RegistryBusy if _locked(err) else RegistryError
        raise kind(f"cannot open registry {path}: {err}") from None
    if version > SCHEMA_VERSION:
        conn.close()
        raise RegistryError(
            f"registry {path} has schema {version}; this podracer reads up to {SCHEMA_VERSION}"
        )
    return conn


@contextlib.contextmanager
def open_registry(home: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A writable connection (autocommit mode; callers open their own transactions), schema ensured."""
    path = registry_path(home)
    conn = _connect(path, read_only=False)
    try:
        try:
            # FULL: a promotion that was reported must survive a power cut, not only stay consistent.
            sqlite.use_wal(conn, synchronous="FULL", foreign_keys=True)
            if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                with sqlite.transaction(conn):
                    # Read again under the write lock: another writer may have set it up meanwhile.
                    version = conn.execute("PRAGMA user_version").fetchone()[0]
                    if version == 0:
                        for statement in _SCHEMA.split(";"):
                            if statement.strip():
                                conn.execute(statement)
                        version = _BASE_VERSION
                    for step in range(version, SCHEMA_VERSION):
                        for statement in MIGRATIONS[step]:
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as err:
            raise RegistryError(f"cannot initialise registry {path}: {err}") from None
        yield conn
    finally:
        conn.close()


def record_decision(
    home: str | os.PathLike[str],
    decision: DecisionRecord,
    champion: Champion | None = None,
    *,
    demotion: ChampionDemotion | None = None,
    before_commit: Callable[[], None] | None = None,
) -> int:
    """Insert ``decision`` and, if ``champion`` is given, repoint the champion to it, or, if
    ``demotion`` is given, remove the champion pointer and record why: one transaction.

    Returns the decision id. ``before_commit`` runs inside the transaction just before COMMIT (tests
    inject crashes there); if it raises, nothing is written.
    """
    row = decision.row()
    # Secrets masked (data.scrub): a reason quotes the error that failed the retrain.
    row["reason"] = scrub(row["reason"])
    row["inputs"] = scrub(json.dumps(row["inputs"], sort_keys=True, default=str))
    row["scores"] = scrub(json.dumps(row["scores"], sort_keys=True, default=str))
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    with open_registry(home) as conn, sqlite.transaction(conn):
        cur = conn.execute(f"INSERT INTO decisions ({cols}) VALUES ({marks})", row)
        decision_id = int(cur.lastrowid)
        if champion is not None:
            champ = champion.model_dump(mode="json", include=_CHAMPION_COLUMNS)
            champ["info"] = json.dumps(champ["info"], sort_keys=True, default=str)
            champ["decision_id"] = decision_id
            champ["slot"] = 1
            ccols = ", ".join(champ)
            cmarks = ", ".join(f":{k}" for k in champ)
            conn.execute(f"INSERT OR REPLACE INTO champion ({ccols}) VALUES ({cmarks})", champ)
        elif demotion is not None:
            conn.execute("DELETE FROM champion WHERE slot = 1")
            conn.execute(
                "INSERT INTO demotions (decision_id, run_id, demoted_at, session, reason, source) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    decision_id,
                    demotion.run_id,
                    demotion.demoted_at,
                    demotion.session,
                    scrub(demotion.reason),
                    decision.source,
                ),
            )
        if before_commit is not None:
            before_commit()
    return decision_id


def _decode(row: sqlite3.Row, json_cols: tuple[str, ...]) -> dict[str, Any]:
    out = dict(row)
    for col in json_cols:
        if col in out and isinstance(out[col], str):
            try:
                out[col] = json.loads(out[col])
            except json.JSONDecodeError:
                out[col] = {}
    return out


@contextlib.contextmanager
def _reader(
    home: str | os.PathLike[str], timeout: float = sqlite.TIMEOUT_S
) -> Iterator[sqlite3.Connection | None]:
    path = registry_path(home)
    if not path.is_file():
        yield None
        return
    conn = _connect(path, read_only=True, timeout=timeout)
    try:
        # A file created by a writer that has not committed its schema yet reads as empty.
        yield conn if conn.execute("PRAGMA user_version").fetchone()[0] >= 1 else None
    finally:
        conn.close()


def read_decisions(home: str | os.PathLike[str], *, limit: int | None = None) -> list[dict[str, Any]]:
    """Every decision, oldest first (``limit``: only the most recent N), as plain dicts.

    Keys are the ``decisions`` columns (see :class:`DecisionRecord`) plus ``id``; ``inputs`` and ``scores``
    are decoded JSON. No registry yet: ``[]``.
    """
    with _reader(home) as conn:
        if conn is None:
            return []
        try:
            if limit is None:
                rows = conn.execute("SELECT * FROM decisions ORDER BY id").fetchall()
            else:
                rows = conn.execute(
                    "SELECT * FROM (SELECT * FROM decisions ORDER BY id DESC LIMIT ?) ORDER BY id", (limit,)
                ).fetchall()
        except sqlite3.DatabaseError as err:
            raise RegistryError(f"cannot read registry {registry_path(home)}: {err}") from None
    # Masked on the way out too: a row written before the scrubber existed may quote a key.
    return [scrub_all(_current_names(_decode(r, ("inputs", "scores")))) for r in rows]


def decision_gate(row: Mapping[str, Any]) -> GateResult | None:
    """The gate's answer a :func:`read_decisions` row records (None: a ``failed`` row, or a change made
    by hand, which no gate decided). A row written before the gate was one model (its ``scores`` held
    ``challenger_edge``, ``challenger_test``, ``challenger`` and ``champion``) reads too."""
    if row.get("verdict") not in ("promoted", "rejected") or row.get("source") == "manual":
        return None
    scores = {k: v for k, v in (row.get("scores") or {}).items() if k != "role"}
    if "challenger_edge" in scores or "challenger_test" in scores:
        scores = {
            "edge": scores.get("challenger_edge"),
            "oos_test": scores.get("challenger_test") or None,
            "challenger": scores.get("challenger") or {},
            "incumbent": scores.get("champion"),
        }
    columns = {
        "promote": row["verdict"] == "promoted",
        "reason": row.get("reason"),
        "fitness": row.get("fitness"),
        "window": (row["eval_start"], row["eval_end"])
        if row.get("eval_start") and row.get("eval_end")
        else None,
        "challenger_fitness": row.get("challenger_fitness"),
        "incumbent_fitness": row.get("champion_fitness"),
        "margin": row.get("margin"),
        "significance_level": row.get("significance_level"),
        "psr_after_looks": row.get("challenger_dsr"),
    }
    try:
        return GateResult.model_validate({**columns, **scores})
    except ValidationError as err:
        raise RegistryError(f"decision {row.get('id')}: malformed gate figures ({one_line(err)})") from None


def _current_names(row: dict[str, Any]) -> dict[str, Any]:
    """A ``decisions`` row of a file no writer has migrated yet, under the current column names
    (what :data:`MIGRATIONS` would do to it)."""
    if "dsr_threshold" in row:
        threshold = row.pop("dsr_threshold")
        row["significance_level"] = None if threshold is None else round(1.0 - threshold, 12)
    row.setdefault("source", "rule")  # schema 3 and before: every decision was the rule's
    return row


def _newest_row(home: str | os.PathLike[str], table: str, sql: str, timeout: float) -> sqlite3.Row | None:
    """The row ``sql`` selects (None: no registry, no such ``table`` in an older file, or no row)."""
    with _reader(home, timeout) as conn:
        if conn is None:
            return None
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is None:
                return None  # a file written before the table existed
            return conn.execute(sql).fetchone()
        except sqlite3.DatabaseError as err:
            kind = RegistryBusy if _locked(err) else RegistryError
            raise kind(f"cannot read registry {registry_path(home)}: {err}") from None


def current_champion(home: str | os.PathLike[str], *, timeout: float = sqlite.TIMEOUT_S) -> Champion | None:
    """The current champion (``app.champion.Champion``, with its ``decision_id``), or None if none yet.

    ``timeout``: seconds to wait for a writer's lock before :class:`RegistryBusy`."""
    row = _newest_row(home, "champion", "SELECT * FROM champion WHERE slot = 1", timeout)
    if row is None:
        return None
    out = _decode(row, ("info",))
    out.pop("slot", None)
    if not isinstance(out.get("info"), dict):
        out["info"] = {}
    try:
        return Champion.model_validate(out)
    except ValidationError as err:
        raise RegistryError(
            f"registry {registry_path(home)}: malformed champion row ({one_line(err)})"
        ) from None


def last_demotion(home: str | os.PathLike[str]) -> ChampionDemotion | None:
    """The newest demotion (None: no champion was ever demoted, or the file predates demotions)."""
    row = _newest_row(home, "demotions", "SELECT * FROM demotions ORDER BY id DESC LIMIT 1", sqlite.TIMEOUT_S)
    return (
        None
        if row is None
        else ChampionDemotion.model_validate({k: v for k, v in dict(row).items() if k != "id"})
    )
