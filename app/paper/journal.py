"""The paper-trading journal: every decision, order, fill, reconciliation, P&L snapshot and error.

One SQLite file, ``<home>/paper/journal.sqlite``, in WAL mode so the dashboard can read while a cycle
writes; each cycle's rows go in short transactions. Rows are append-only except ``orders``, which is
keyed by ``client_order_id`` (a retried cycle updates its order's status instead of duplicating it).
Every row a cycle writes carries the ``bundle_id`` that decided it (a fill: its order's), and
``sessions`` names the bundle in charge of each session (:meth:`Journal.start_session`). The schema
and the migration of older journals: ``app.paper.journal_schema``.

Re-running a decision bar is idempotent: an order row is upserted by a rule that never downgrades
(``STATUS_RANK``: a final status stays final, ``filled_qty`` only grows), and a fill row is written
only when the cumulative filled quantity grew. An order journaled ``submitted`` that the broker does
not know after the submit window (a kill -9 between the journal and the POST, or a POST that never
arrived) is closed as ``not_submitted`` and never looked up again. ``order_counts`` counts orders by
their final status (what the dashboard shows).

API keys never reach this file: every text value is scrubbed of the values of ``APCA_API_KEY_ID`` and
``APCA_API_SECRET_KEY`` before it is written (belt and braces: no caller puts them in a message).

``read_journal(home)`` returns the tables as pandas DataFrames for the dashboard (see docs/paper.md);
it, ``latest_pnl`` and ``order_counts`` live in ``app.paper.journal_read`` and are named here too.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from app.paper.journal_read import journal_path, latest_pnl, order_counts, read_journal
from app.paper.journal_schema import (
    OPEN_STATUSES,
    STATUS_RANK,
    TABLES,
    SessionOwner,
    finite,
    holdings_json,
    migrate,
)
from data import sqlite
from data.scrub import scrub


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def journal_ts(ts: pd.Timestamp | datetime | None) -> str:
    """A bar's time as the journal writes it (``decision_ts``): ISO 8601, ``""`` for none."""
    return "" if ts is None else pd.Timestamp(ts).isoformat()


def _scrub(value: Any) -> Any:
    """Every API key value in a string masked (``data.scrub``, the one scrubber)."""
    return scrub(value)


class Journal:
    """Append-mostly SQLite journal (WAL). Use as a context manager or call ``close()``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite.connect(self.path, row_factory=None)
        # NORMAL (WAL): a power cut may lose the last commits but never corrupts the file.
        sqlite.use_wal(self._conn, synchronous="NORMAL")
        migrate(self._conn)
        # The bundle and session of the cycle under way: events written meanwhile carry them (None
        # outside a cycle, and the session before the market was found open).
        self.bundle_id: str | None = None
        self.session: str | None = None

    @classmethod
    def for_home(cls, home: str | os.PathLike[str]) -> Journal:
        return cls(journal_path(home))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE ... COMMIT (rolled back on error)."""
        with sqlite.transaction(self._conn) as conn:
            yield conn

    def _insert(self, table: str, row: dict[str, Any]) -> None:
        row = {"recorded_at": _now(), **{k: _scrub(v) for k, v in row.items()}}
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as conn:
            conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))

    # -- writers --
    def event(self, kind: str, message: str, level: str = "info", *, bundle_id: str | None = None) -> None:
        """An event row; its ``bundle_id`` is ``bundle_id`` when given, else the cycle's (``self.bundle_id``);
        its ``session``, the cycle's (``self.session``)."""
        row = {
            "level": level,
            "kind": kind,
            "message": message,
            "bundle_id": bundle_id or self.bundle_id,
            "session": self.session,
        }
        self._insert("events", row)

    def start_session(
        self, session: str, *, bundle_id: str, bundle_path: str | None, run_id: str | None, source: str
    ) -> SessionOwner:
        """Name the bundle in charge of ``session`` unless one already is (the first cycle's stays:
        a restart mid-session finds it here). Returns the owner as stored."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO sessions (session, recorded_at, bundle_id, bundle_path, run_id, source) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (session, _now(), bundle_id, bundle_path, run_id, source),
            )
        owner = self.session_owner(session)
        assert owner is not None  # just written, or there before
        return owner

    def session_owner(self, session: str, *, before: bool = False) -> SessionOwner | None:
        """The bundle in charge of ``session`` (YYYY-MM-DD), or None before its first cycle; ``before``:
        of the newest session traded before ``session`` (None when there was none)."""
        where = "session<? ORDER BY session DESC LIMIT 1" if before else "session=?"
        row = self._conn.execute(
            f"SELECT session, bundle_id, bundle_path, run_id, source FROM sessions WHERE {where}", (session,)
        ).fetchone()
        return None if row is None else SessionOwner(*row)

    def decision(
        self,
        *,
        decision_ts: str,
        bundle_id: str,
        dry_run: bool,
        equity: float,
        cash: float,
        tickers: list[str],
        current_weights: list[float],
        target_weights: list[float],
        policy_weights: list[float],
        skipped: list[str],
        note: str = "",
        session: str | None = None,
        account_equity: float | None = None,
        holdings: dict[str, tuple[float, float]] | None = None,
        prices: list[float] | None = None,
    ) -> None:
        """One decision; ``session``, ``account_equity``, ``holdings`` and ``prices``: the marks of the
        per-champion record (``app.paper.journal_schema``)."""
        self._insert(
            "decisions",
            {
                "decision_ts": decision_ts,
                "bundle_id": bundle_id,
                "dry_run": int(dry_run),
                "equity": equity,
                "cash": cash,
                "tickers": json.dumps(tickers),
                "current_weights": json.dumps([float(x) for x in current_weights]),
                "target_weights": json.dumps([float(x) for x in target_weights]),
                "policy_weights": json.dumps([float(x) for x in policy_weights]),
                "skipped": json.dumps(skipped),
                "note": note,
                "session": session,
                "account_equity": account_equity,
                "holdings": None if holdings is None else holdings_json(holdings),
                "prices": None if prices is None else json.dumps([finite(p) for p in prices]),
            },
        )

    def order(
        self,
        *,
        client_order_id: str,
        decision_ts: str,
        bundle_id: str,
        ticker: str,
        side: str,
        qty: float,
        est_price: float | None,
        status: str,
        broker_order_id: str | None = None,
        filled_qty: float = 0.0,
        filled_avg_price: float | None = None,
        message: str = "",
        model_price: float | None = None,
    ) -> None:
        """Insert or update the order row of ``client_order_id``: never a duplicate, never a downgrade
        (``model_price``, the execution model's predicted fill price, is kept from the first write)."""
        row = {
            "recorded_at": _now(),
            "client_order_id": client_order_id,
            "decision_ts": decision_ts,
            "bundle_id": bundle_id,
            "ticker": ticker,
            "side": side,
            "qty": float(qty),
            "est_price": est_price,
            "est_notional": None if est_price is None else float(qty) * float(est_price),
            "status": status,
            "broker_order_id": broker_order_id,
            "filled_qty": float(filled_qty),
            "filled_avg_price": filled_avg_price,
            "message": _scrub(message),
            "model_price": model_price,
        }
        with self.transaction() as conn:
            old = conn.execute(
                "SELECT status, broker_order_id, filled_qty, filled_avg_price, message FROM orders "
                "WHERE client_order_id=?",
                (client_order_id,),
            ).fetchone()
            if old is None:
                cols = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                conn.execute(f"INSERT INTO orders ({cols}) VALUES ({marks})", tuple(row.values()))
                return
            self._merge(conn, client_order_id, old, row)

    @staticmethod
    def _merge(conn: sqlite3.Connection, cid: str, old: tuple[Any, ...], new: dict[str, Any]) -> None:
        """Apply ``new`` to the stored order row ``old`` without lowering its status or fill."""
        old_status, old_broker_id, old_filled, old_price, old_message = old
        old_rank, new_rank = STATUS_RANK.get(old_status, 2), STATUS_RANK.get(new["status"], 2)
        status = new["status"] if new_rank >= old_rank and old_rank < 4 else old_status
        new_filled = float(new.get("filled_qty") or 0.0)
        filled, price = (
            (new_filled, new.get("filled_avg_price"))
            if new_filled > (old_filled or 0.0)
            else (old_filled, old_price)
        )
        broker_id = new.get("broker_order_id") or old_broker_id
        message = new.get("message") or old_message
        if (status, filled, price, broker_id, message) == (
            old_status,
            old_filled,
            old_price,
            old_broker_id,
            old_message,
        ):
            return  # nothing new: recorded_at keeps the time of the last real change
        conn.execute(
            "UPDATE orders SET recorded_at=?, status=?, filled_qty=?, filled_avg_price=?, broker_order_id=?, "
            "message=? WHERE client_order_id=?",
            (_now(), status, filled, price, broker_id, _scrub(message), cid),
        )

    def update_order(
        self,
        client_order_id: str,
        *,
        status: str,
        filled_qty: float,
        filled_avg_price: float | None,
        broker_order_id: str,
    ) -> None:
        """Update an existing order row after a later look-up (fills, cancel); never a downgrade."""
        with self.transaction() as conn:
            old = conn.execute(
                "SELECT status, broker_order_id, filled_qty, filled_avg_price, message FROM orders "
                "WHERE client_order_id=?",
                (client_order_id,),
            ).fetchone()
            if old is not None:
                new = {
                    "status": status,
                    "filled_qty": filled_qty,
                    "filled_avg_price": filled_avg_price,
                    "broker_order_id": broker_order_id,
                    "message": "",
                }
                self._merge(conn, client_order_id, old, new)

    def mark_not_submitted(self, client_order_id: str, message: str) -> None:
        """Close a ``submitted`` row the broker does not know: the order never reached it."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE orders SET recorded_at=?, status='not_submitted', message=? "
                "WHERE client_order_id=? AND status='submitted'",
                (_now(), _scrub(message), client_order_id),
            )

    def fill(
        self,
        *,
        client_order_id: str,
        ticker: str,
        side: str,
        filled_qty: float,
        filled_avg_price: float | None,
        status: str,
    ) -> bool:
        """Record the cumulative fill of an order, only if it grew (a re-run never repeats a fill).
        The row carries the order's ``bundle_id`` and ``decision_ts``."""
        with self.transaction() as conn:
            (seen,) = conn.execute(
                "SELECT MAX(filled_qty) FROM fills WHERE client_order_id=?", (client_order_id,)
            ).fetchone()
            order = conn.execute(
                "SELECT bundle_id, decision_ts FROM orders WHERE client_order_id=?", (client_order_id,)
            ).fetchone()
        if seen is not None and float(filled_qty) <= seen + 1e-12:
            return False
        bundle_id, decision_ts = order if order is not None else (None, None)
        self._insert(
            "fills",
            {
                "client_order_id": client_order_id,
                "ticker": ticker,
                "side": side,
                "filled_qty": float(filled_qty),
                "filled_avg_price": filled_avg_price,
                "status": status,
                "bundle_id": bundle_id,
                "decision_ts": decision_ts,
            },
        )
        return True

    def position(
        self,
        *,
        decision_ts: str | None,
        ticker: str,
        qty: float,
        market_value: float | None,
        expected_qty: float | None,
        bundle_id: str | None = None,
    ) -> None:
        diff = None if expected_qty is None else float(qty) - float(expected_qty)
        self._insert(
            "positions",
            {
                "decision_ts": decision_ts,
                "ticker": ticker,
                "qty": float(qty),
                "market_value": market_value,
                "expected_qty": expected_qty,
                "diff": diff,
                "bundle_id": bundle_id,
            },
        )

    def pnl(
        self,
        *,
        decision_ts: str | None,
        equity: float,
        cash: float,
        last_equity: float | None,
        bundle_id: str | None = None,
        holdings: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        """A P&L snapshot; ``holdings``: the broker's positions ``{symbol: (qty, price)}`` behind it."""
        day_pnl = None if last_equity is None else equity - last_equity
        day_ret = None if not last_equity else equity / last_equity - 1.0
        self._insert(
            "pnl",
            {
                "decision_ts": decision_ts,
                "equity": equity,
                "cash": cash,
                "last_equity": last_equity,
                "day_pnl": day_pnl,
                "day_return": day_ret,
                "bundle_id": bundle_id,
                "holdings": None if holdings is None else holdings_json(holdings),
            },
        )

    # -- readers --
    def decision_at(
        self, decision_ts: str, bundle_id: str, dry_run: bool
    ) -> tuple[list[float], list[float]] | None:
        """(policy weights, target weights) of the first decision ``bundle_id`` took at ``decision_ts``
        (same dry-run mode), or None when it has not decided that bar."""
        row = self._conn.execute(
            "SELECT policy_weights, target_weights FROM decisions WHERE decision_ts=? AND bundle_id=? "
            "AND dry_run=? ORDER BY id LIMIT 1",
            (decision_ts, bundle_id, int(dry_run)),
        ).fetchone()
        return None if row is None else (json.loads(row[0]), json.loads(row[1]))

    def filled_by_decision(
        self, bundle_id: str, before: str
    ) -> tuple[list[str], dict[str, dict[str, float]]]:
        """``bundle_id``'s decisions before ``before`` (sent for real, in time order) and the signed
        shares each filled per ticker (buys +, sells -): the replay of its impact memory."""
        decisions = [
            str(r[0])
            for r in self._conn.execute(
                "SELECT DISTINCT decision_ts FROM decisions WHERE bundle_id=? AND dry_run=0 AND decision_ts<? "
                "ORDER BY decision_ts",
                (bundle_id, before),
            )
        ]
        fills: dict[str, dict[str, float]] = {}
        for ts, ticker, signed in self._conn.execute(
            "SELECT decision_ts, ticker, SUM(CASE WHEN side='sell' THEN -filled_qty ELSE filled_qty END) "
            "FROM orders WHERE bundle_id=? AND filled_qty > 0 AND decision_ts<? GROUP BY decision_ts, ticker",
            (bundle_id, before),
        ):
            fills.setdefault(str(ts), {})[str(ticker)] = float(signed)
        return decisions, fills

    def has_event(self, kind: str, bundle_id: str, *, since: str | None = None) -> bool:
        """Whether an event of ``kind`` names ``bundle_id`` (``since``: in that session or a later one)."""
        sql = "SELECT 1 FROM events WHERE kind=? AND bundle_id=? AND (? IS NULL OR session >= ?) LIMIT 1"
        return self._conn.execute(sql, (kind, bundle_id, since, since)).fetchone() is not None

    def has_sent(self, bundle_id: str, dry_run: bool) -> bool:
        """Whether an order of ``bundle_id`` went to the broker (any status but never sent: ``not_sent``,
        ``blocked``); in a dry run, whether it journaled any ``dry_run`` order."""
        sql = (
            "SELECT 1 FROM orders WHERE bundle_id=? AND status='dry_run' LIMIT 1"
            if dry_run
            else "SELECT 1 FROM orders WHERE bundle_id=? AND status NOT IN ('not_sent', 'blocked', 'dry_run') LIMIT 1"
        )
        return self._conn.execute(sql, (bundle_id,)).fetchone() is not None

    def book_tickers(self) -> set[str]:
        """Every ticker a bundle in this journal decided on: the book the per-champion record counts."""
        rows = self._conn.execute(
            "SELECT DISTINCT tickers FROM decisions UNION SELECT DISTINCT tickers FROM daily"
        ).fetchall()
        return {str(t) for (text,) in rows for t in json.loads(text)}

    def set_opening_book(self, book: dict[str, float], reason: str) -> None:
        """Record the offsets the books start from now (``app.paper.books``); the newest row is in force."""
        self._insert("opening_books", {"reason": reason, "book": json.dumps(dict(sorted(book.items())))})

    def has_opening_book(self) -> bool:
        """True once the books were checked (or accepted) at least once."""
        return self._conn.execute("SELECT 1 FROM opening_books LIMIT 1").fetchone() is not None

    def opening_book(self) -> dict[str, float]:
        """The offsets in force: ``{symbol: qty}`` (empty before the first book check)."""
        row = self._conn.execute("SELECT book FROM opening_books ORDER BY id DESC LIMIT 1").fetchone()
        return {} if row is None else {str(s): float(q) for s, q in json.loads(row[0]).items()}

    def filled_by_symbol(self) -> dict[str, float]:
        """Shares filled per symbol over every order this journal placed: buys add, sells subtract."""
        rows = self._conn.execute(
            "SELECT ticker, SUM(CASE WHEN side='sell' THEN -filled_qty ELSE filled_qty END) FROM orders "
            "WHERE filled_qty > 0 GROUP BY ticker"
        ).fetchall()
        return {str(t): float(q) for t, q in rows}

    def client_order_ids(self) -> set[str]:
        """Every client order id this journal holds (whatever its status)."""
        return {str(r[0]) for r in self._conn.execute("SELECT client_order_id FROM orders")}

    def open_orders(self) -> list[dict[str, Any]]:
        """Orders we submitted whose last known status is still open at the broker (or unknown)."""
        marks = ", ".join("?" for _ in OPEN_STATUSES)
        cur = self._conn.execute(
            "SELECT client_order_id, ticker, side, qty, filled_qty, status, recorded_at FROM orders "
            f"WHERE status IN ({marks})",
            OPEN_STATUSES,
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise ValueError(f"unknown journal table {name!r}")
        return pd.read_sql_query(f"SELECT * FROM {name} ORDER BY rowid", self._conn)


__all__ = ["Journal", "journal_path", "journal_ts", "latest_pnl", "order_counts", "read_journal"]
