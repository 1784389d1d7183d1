"""The tournament's leaderboard: top-K pods, every pod tried, and an event log, in one SQLite file.

``<run>/leaderboard.sqlite`` is in WAL mode and every update is one transaction, so a killed
orchestrator leaves the board exactly as of its last committed update and readers (the dashboard)
never block the writer. Only the orchestrator process writes; workers never touch the file.

Tables:
- ``pods``: every pod tried (lineage, hyper-parameters, status, score); never deleted from.
- ``entries``: the current top-K by score; a row leaves only when a better pod pushes it out.
- ``events``: an append-only log (started/scored/inserted/rejected/pruned/failed/resumed).
- ``meta``: small key/value state of the run (budget spent, elapsed time).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from data import sqlite
from data.errors import PodracerError

FILENAME = "leaderboard.sqlite"
EVENT_KINDS = ("started", "scored", "inserted", "rejected", "pruned", "failed", "resumed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pods (
    pod_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    parent_id TEXT,
    generation INTEGER NOT NULL,
    algo TEXT NOT NULL,
    hparams TEXT NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL,
    score REAL,
    metrics TEXT,
    round_steps INTEGER NOT NULL DEFAULT 0,
    env_steps INTEGER NOT NULL DEFAULT 0,
    checkpoint TEXT,
    error TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    pod_id TEXT PRIMARY KEY REFERENCES pods(pod_id),
    parent_id TEXT,
    generation INTEGER NOT NULL,
    algo TEXT NOT NULL,
    hparams TEXT NOT NULL,
    score REAL NOT NULL,
    metrics TEXT NOT NULL,
    env_steps INTEGER NOT NULL,
    checkpoint TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    pod_id TEXT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dumps(obj: Any) -> str:
    # NaN/inf are not JSON: store them as null so every reader can parse the payload.
    return json.dumps(_finite(obj), sort_keys=True, default=str)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


class Leaderboard:
    """Writer side of ``<run>/leaderboard.sqlite`` (one per orchestrator process)."""

    def __init__(self, run_dir: str | Path, size: int) -> None:
        if size < 1:
            raise PodracerError(f"leaderboard size must be >= 1, got {size}")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / FILENAME
        self.size = size
        if not self.path.exists():
            self._create()
        # Autocommit: each update is one BEGIN IMMEDIATE transaction of our own (sqlite.transaction).
        self._conn = sqlite.connect(self.path)
        try:
            sqlite.use_wal(self._conn, synchronous="FULL")
            # executescript commits implicitly, so the schema is created outside our own transactions.
            self._conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:  # a corrupt or foreign file: the user's to fix, one line
            self._conn.close()
            raise PodracerError(f"cannot open leaderboard {self.path}: {err}") from None

    def _create(self) -> None:
        """Create the file with its schema under a temp name, then rename it into place, so a reader
        never sees a board without its tables."""
        tmp = self.path.with_name(f".{FILENAME}.{os.getpid()}.tmp")
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
        conn = sqlite.connect(tmp, timeout=5.0, row_factory=None)
        try:
            sqlite.use_wal(conn, synchronous=None)  # persistent: stored in the file header
            conn.executescript(_SCHEMA)
        finally:
            conn.close()  # checkpoints the WAL into the file and removes it
        os.replace(tmp, self.path)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Leaderboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        with sqlite.transaction(self._conn) as conn:
            yield conn.cursor()

    @staticmethod
    def _event(cur: sqlite3.Cursor, pod_id: str | None, kind: str, payload: Mapping[str, Any]) -> None:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        cur.execute(
            "INSERT INTO events (time, pod_id, kind, payload) VALUES (?, ?, ?, ?)",
            (time.time(), pod_id, kind, _dumps(payload)),
        )

    # --- writes ----------------------------------------------------------------------------------
    def start_pod(
        self,
        pod_id: str,
        *,
        seq: int,
        parent_id: str | None,
        generation: int,
        algo: str,
        hparams: Mapping[str, Any],
        seed: int,
        checkpoint: str,
    ) -> None:
        """Record a pod handed to a worker (status ``running``) and its ``started`` event."""
        now = time.time()
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO pods (pod_id, seq, parent_id, generation, algo, hparams, seed, status,"
                " checkpoint, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                (pod_id, seq, parent_id, generation, algo, _dumps(hparams), seed, checkpoint, now, now),
            )
            payload = {"parent_id": parent_id, "generation": generation, "hparams": dict(hparams)}
            self._event(cur, pod_id, "started", payload)

    def record_score(
        self,
        pod_id: str,
        *,
        score: float,
        metrics: Mapping[str, Any],
        round_steps: int,
        env_steps: int,
        elapsed_s: float = 0.0,
    ) -> str:
        """Store a finished pod's validation score and insert it if it makes the top K.

        One transaction: the pod row, the ``scored`` event, then either ``inserted`` (plus a
        ``pruned`` event for the entry it pushes out when the board is full) or ``rejected``.
        Returns ``"inserted"`` or ``"rejected"``. A pod enters a full board only by beating the
        worst entry strictly, so an equal score never evicts an older entry.
        """
        if not math.isfinite(score):
            raise ValueError(f"pod {pod_id}: score {score} is not finite (record it as failed)")
        now = time.time()
        with self._tx() as cur:
            row = cur.execute("SELECT * FROM pods WHERE pod_id = ?", (pod_id,)).fetchone()
            if row is None:
                raise PodracerError(f"leaderboard: unknown pod {pod_id}")
            cur.execute(
                "UPDATE pods SET status='scored', score=?, metrics=?, round_steps=?, env_steps=?,"
                " updated=? WHERE pod_id=?",
                (score, _dumps(metrics), round_steps, env_steps, now, pod_id),
            )
            self._bump_meta(cur, round_steps, elapsed_s)
            self._event(cur, pod_id, "scored", {"score": score, "env_steps": env_steps})
            count = cur.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            worst = cur.execute(
                "SELECT pod_id, score FROM entries ORDER BY score ASC, created DESC LIMIT 1"
            ).fetchone()
            if count >= self.size and worst is not None and not score > worst["score"]:
                cur.execute("UPDATE pods SET status='rejected' WHERE pod_id=?", (pod_id,))
                self._event(cur, pod_id, "rejected", {"score": score, "worst": worst["score"]})
                return "rejected"
            cur.execute(
                "INSERT INTO entries (pod_id, parent_id, generation, algo, hparams, score, metrics,"
                " env_steps, checkpoint, status, created, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?)",
                (
                    pod_id,
                    row["parent_id"],
                    row["generation"],
                    row["algo"],
                    row["hparams"],
                    score,
                    _dumps(metrics),
                    env_steps,
                    row["checkpoint"],
                    now,
                    now,
                ),
            )
            cur.execute("UPDATE pods SET status='leader' WHERE pod_id=?", (pod_id,))
            self._event(cur, pod_id, "inserted", {"score": score})
            while cur.execute("SELECT COUNT(*) FROM entries").fetchone()[0] > self.size:
                out = cur.execute(
                    "SELECT pod_id, score FROM entries ORDER BY score ASC, created DESC LIMIT 1"
                ).fetchone()
                cur.execute("DELETE FROM entries WHERE pod_id=?", (out["pod_id"],))
                cur.execute("UPDATE pods SET status='pruned', updated=? WHERE pod_id=?", (now, out["pod_id"]))
                self._event(cur, out["pod_id"], "pruned", {"score": out["score"], "by": pod_id})
            return "inserted"

    def record_failure(
        self, pod_id: str, error: str, *, round_steps: int = 0, elapsed_s: float = 0.0
    ) -> None:
        """Mark a pod failed (raised, NaN, lost worker); its steps still count against the budget."""
        now = time.time()
        with self._tx() as cur:
            cur.execute(
                "UPDATE pods SET status='failed', error=?, round_steps=?, updated=? WHERE pod_id=?",
                (error[:2000], round_steps, now, pod_id),
            )
            self._bump_meta(cur, round_steps, elapsed_s)
            self._event(cur, pod_id, "failed", {"error": error[:2000]})

    def mark_resumed(self, info: Mapping[str, Any], *, rerun: bool = False) -> list[str]:
        """On ``--resume``: pods left ``running`` by the killed orchestrator become ``failed``.

        Their round never reported back, so nothing of theirs is on the board; they are replaced
        by new pods. Returns their ids. With ``rerun`` they stay ``running`` instead (the caller runs
        them again with the same spec) and the ``resumed`` event lists them under ``rerun``.
        """
        now = time.time()
        with self._tx() as cur:
            lost = [r[0] for r in cur.execute("SELECT pod_id FROM pods WHERE status='running' ORDER BY seq")]
            if rerun:
                self._event(cur, None, "resumed", {**info, "interrupted": [], "rerun": lost})
                return lost
            for pod_id in lost:
                cur.execute(
                    "UPDATE pods SET status='failed', error='interrupted: orchestrator stopped',"
                    " updated=? WHERE pod_id=?",
                    (now, pod_id),
                )
                self._event(cur, pod_id, "failed", {"error": "interrupted: orchestrator stopped"})
            self._event(cur, None, "resumed", {**info, "interrupted": lost})
        return lost

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx() as cur:
            cur.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, _dumps(value)))

    @staticmethod
    def _bump_meta(cur: sqlite3.Cursor, round_steps: int, elapsed_s: float) -> None:
        for key, delta in (("env_steps_spent", round_steps), ("pod_seconds", elapsed_s)):
            row = cur.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            value = (json.loads(row[0]) if row else 0) + delta
            cur.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, _dumps(value)))

    # --- reads (writer side) ---------------------------------------------------------------------
    def entries(self) -> list[dict[str, Any]]:
        """The board, best first (ties: the older entry first)."""
        return _read_entries(self._conn)

    def pods(self) -> list[dict[str, Any]]:
        return _read_pods(self._conn)

    def events(self) -> list[dict[str, Any]]:
        return _read_events(self._conn)

    def meta(self) -> dict[str, Any]:
        return {r["key"]: json.loads(r["value"]) for r in self._conn.execute("SELECT key, value FROM meta")}

    def next_seq(self) -> int:
        row = self._conn.execute("SELECT MAX(seq) FROM pods").fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def env_steps_spent(self) -> int:
        return int(self.meta().get("env_steps_spent", 0))


# --- read helpers for the dashboard and reports (read-only connections) --------------------------
def _row(r: sqlite3.Row, json_cols: tuple[str, ...]) -> dict[str, Any]:
    out = dict(r)
    for col in json_cols:
        if col in out:
            out[col] = _loads(out[col])
    return out


def _read_entries(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM entries ORDER BY score DESC, created ASC").fetchall()
    out = []
    for rank, r in enumerate(rows, start=1):
        out.append({"rank": rank, **_row(r, ("hparams", "metrics"))})
    return out


def _read_pods(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM pods ORDER BY seq ASC").fetchall()
    return [_row(r, ("hparams", "metrics")) for r in rows]


def _read_events(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM events ORDER BY id ASC").fetchall()
    return [_row(r, ("payload",)) for r in rows]


@contextmanager
def _reader(run_dir: str | Path) -> Iterator[sqlite3.Connection]:
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        raise PodracerError(f"no leaderboard in {run_dir} (expected {FILENAME})")
    # Read-only URI: a reader can never create, lock for writing, or alter the board.
    conn = sqlite.connect(path, read_only=True)
    try:
        yield conn
    finally:
        conn.close()


def read_leaderboard(run_dir: str | Path) -> list[dict[str, Any]]:
    """The current top-K of ``<run_dir>/leaderboard.sqlite``, best first, with a 1-based ``rank``."""
    with _reader(run_dir) as conn:
        return _read_entries(conn)


def read_pods(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every pod tried, in launch order, with its lineage (``parent_id``, ``generation``) and status."""
    with _reader(run_dir) as conn:
        return _read_pods(conn)


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """The event log, oldest first."""
    with _reader(run_dir) as conn:
        return _read_events(conn)
