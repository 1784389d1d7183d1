"""The books: the journal's fill-implied positions and open orders, checked against the broker's.

What the journal implies a symbol holds is its **opening book** (the offsets adopted at the first
check of a journal, or by ``podracer reconcile --accept``: the broker's quantity less what the
journal's fills implied at that moment) plus the signed filled quantity of every order the journal
placed (``orders.filled_qty``, which only grows). :func:`check_books` compares that with the broker's
positions, and the broker's open orders with the journal's (an open order the journal never placed
is someone else's), at the start of every cycle and after its orders.

A difference beyond ``tolerance`` shares (or an outside open order) is a **mismatch**: the cycle
sends no new orders while it lasts (``app.paper.cycle``), the difference is journaled (an event
``books_mismatch`` when it appears or changes, ``books_clear`` when the books match again) and the
state goes to ``<home>/paper/reconcile.json`` (:class:`BookRecord`, written atomically), which
``podracer status`` and the alert hook read. It clears by itself when the books match again (the
outside trade reversed), or when the operator accepts the broker's book as the new opening book.

Before comparing, the journal's open orders are looked up once more (their fills recorded), and a
mismatch is re-read once: an order that fills between two reads is not an outside trade.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from app.paper.broker import Broker, Order, Position
from app.paper.disk import write_state
from app.paper.journal import Journal
from data.artifact import Artifact
from data.errors import ArtifactError, PodracerError

RECORD_NAME = "reconcile.json"
# Shares: wire quantities carry 9 decimals and fractional fills round there; anything larger is real.
DEFAULT_TOLERANCE = 1e-4


def record_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/paper/reconcile.json``: the last book check (:class:`BookRecord`)."""
    return Path(home) / "paper" / RECORD_NAME


@dataclass(frozen=True)
class BookDiff:
    """One symbol whose broker quantity differs from the journal's fill-implied quantity."""

    symbol: str
    broker_qty: float
    journal_qty: float

    @property
    def diff(self) -> float:
        return self.broker_qty - self.journal_qty

    def describe(self) -> str:
        return (
            f"{self.symbol}: broker holds {self.broker_qty:g}, the journal's fills imply {self.journal_qty:g}"
        )


class BookRecord(Artifact):
    """The last book check, as ``reconcile.json`` holds it (``status`` reads ``matched`` or ``mismatch``).

    ``since``: when the current state began (the first check that found it); ``checked_at``: the
    last check; ``diffs``: ``[symbol, broker_qty, journal_qty]`` rows; ``outside_orders``: client ids
    of open orders at the broker that the journal never placed. A file written before the document
    base carried no ``schema_version`` and reads as version 1."""

    FILE = RECORD_NAME
    SCHEMA_VERSION = 1

    status: Literal["matched", "mismatch"]
    checked_at: str
    since: str
    when: str  # "cycle_start" | "after_cycle" | "reconcile" (the command) | "accept"
    tolerance: float
    diffs: list[list[Any]] = Field(default_factory=list)
    outside_orders: list[str] = Field(default_factory=list)
    message: str = ""

    @property
    def matched(self) -> bool:
        return self.status == "matched"


def implied_positions(journal: Journal) -> dict[str, float]:
    """Opening book + the signed filled quantity of every order the journal placed, per symbol."""
    book = journal.opening_book()
    for symbol, qty in journal.filled_by_symbol().items():
        book[symbol] = book.get(symbol, 0.0) + qty
    return book


def compare(
    implied: Mapping[str, float],
    broker: Mapping[str, float],
    tolerance: float,
) -> list[BookDiff]:
    """The symbols whose quantities differ by more than ``tolerance`` shares, sorted (pure)."""
    out = []
    for symbol in sorted(set(implied) | set(broker)):
        have, want = float(broker.get(symbol, 0.0)), float(implied.get(symbol, 0.0))
        if abs(have - want) > tolerance:
            out.append(BookDiff(symbol, have, want))
    return out


def outside_orders(broker_open: list[Order], journal: Journal) -> list[str]:
    """Client ids of the broker's open orders that the journal never placed."""
    ours = journal.client_order_ids()
    return sorted(o.client_order_id for o in broker_open if o.client_order_id not in ours)


def _quantities(positions: Mapping[str, Position]) -> dict[str, float]:
    return {symbol: p.qty for symbol, p in positions.items()}


def _refresh(broker: Broker, journal: Journal) -> None:
    """Record what the broker says now of every order the journal still thinks open (fills only grow)."""
    for row in journal.open_orders():
        order = broker.order_by_client_id(row["client_order_id"])
        if order is None:
            continue
        if order.filled_qty > 0:
            journal.fill(
                client_order_id=order.client_order_id,
                ticker=order.symbol,
                side=order.side,
                filled_qty=order.filled_qty,
                filled_avg_price=order.filled_avg_price,
                status=order.status,
            )
        journal.update_order(
            order.client_order_id,
            status=order.status,
            filled_qty=order.filled_qty,
            filled_avg_price=order.filled_avg_price,
            broker_order_id=order.id,
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def adopt_opening_book(journal: Journal, positions: Mapping[str, Position], reason: str) -> dict[str, float]:
    """Make the broker's ``positions`` the journal's book from now on: the opening offsets become
    broker quantity less fill-implied quantity, per symbol. Returns the offsets stored."""
    filled = journal.filled_by_symbol()
    have = _quantities(positions)
    offsets = {s: have.get(s, 0.0) - filled.get(s, 0.0) for s in sorted(set(have) | set(filled))}
    offsets = {s: q for s, q in offsets.items() if q != 0.0}
    journal.set_opening_book(offsets, reason)
    return offsets


def read_record(home: str | os.PathLike[str]) -> BookRecord | None:
    """The last book check, or None before the first; an unreadable file is a one-line error."""
    path = record_path(home)
    if not path.is_file():
        return None
    try:
        return BookRecord.read(path)
    except ArtifactError as err:
        problem = str(err)[len(str(path)) :].lstrip(":").strip().removeprefix("is ")
        raise ArtifactError(
            f"{path} is unreadable ({problem}): the paper loop rewrites it each cycle"
        ) from None


def _record(
    path: Path,
    previous: BookRecord | None,
    diffs: list[BookDiff],
    outside: list[str],
    when: str,
    tolerance: float,
) -> BookRecord:
    status = "matched" if not diffs and not outside else "mismatch"
    parts = [d.describe() for d in diffs] + [
        f"open order {cid} was not placed by podracer" for cid in outside
    ]
    now = _now()
    since = previous.since if previous is not None and previous.status == status else now
    record = BookRecord(
        status=status,
        checked_at=now,
        since=since,
        when=when,
        tolerance=tolerance,
        diffs=[[d.symbol, d.broker_qty, d.journal_qty] for d in diffs],
        outside_orders=outside,
        message="; ".join(parts),
    )
    write_state(path, lambda: record.write(path))  # a full disk: the last good one stays
    return record


def check_books(
    broker: Broker,
    journal: Journal,
    *,
    when: str,
    tolerance: float = DEFAULT_TOLERANCE,
    positions: Mapping[str, Position] | None = None,
) -> BookRecord:
    """Compare the journal's books with the broker's (see the module docstring); journal a change of
    state, write ``reconcile.json`` next to the journal and return the record.

    ``positions``: the broker's positions read just before (saves a request); re-read on a mismatch.
    A journal never checked before adopts the broker's book as its opening book."""
    path = journal.path.parent / RECORD_NAME
    previous = _read_quiet(path)
    _refresh(broker, journal)
    held = dict(positions) if positions is not None else broker.positions()
    if not journal.has_opening_book():
        offsets = adopt_opening_book(journal, held, "first book check of this journal")
        journal.event("books_opened", f"opening book adopted from the broker: {json.dumps(offsets)}")
    diffs = compare(implied_positions(journal), _quantities(held), tolerance)
    outside = outside_orders(broker.open_orders(), journal)
    if diffs or outside:
        # An order may have filled between the reads: look again before calling it a mismatch.
        _refresh(broker, journal)
        diffs = compare(implied_positions(journal), _quantities(broker.positions()), tolerance)
        outside = outside_orders(broker.open_orders(), journal)
    record = _record(path, previous, diffs, outside, when, tolerance)
    was = previous.status if previous is not None else "matched"
    if not record.matched and (was != "mismatch" or previous is None or previous.message != record.message):
        journal.event("books_mismatch", f"the books do not reconcile: {record.message}", "warning")
    elif record.matched and was == "mismatch":
        journal.event("books_clear", "the books reconcile again with the broker")
    return record


def _read_quiet(path: Path) -> BookRecord | None:
    """The previous record, None when absent or unreadable (it is rewritten now)."""
    try:
        return read_record(path.parent.parent)
    except PodracerError:
        return None


def accept_broker_book(
    broker: Broker, journal: Journal, *, tolerance: float = DEFAULT_TOLERANCE
) -> BookRecord:
    """The operator's answer to a mismatch: the broker's positions become the opening book (the
    journal keeps the difference as an event), and the record is rewritten as matched."""
    path = journal.path.parent / RECORD_NAME
    previous = _read_quiet(path)
    _refresh(broker, journal)
    held = broker.positions()
    before = compare(implied_positions(journal), _quantities(held), tolerance)
    adopt_opening_book(journal, held, "accepted by the operator")
    what = "; ".join(d.describe() for d in before) or "no difference"
    journal.event("books_accepted", f"the broker's book accepted as the opening book ({what})", "warning")
    outside = outside_orders(broker.open_orders(), journal)
    record = _record(path, previous, [], outside, "accept", tolerance)
    if record.matched and previous is not None and previous.status == "mismatch":
        journal.event("books_clear", "the books reconcile again with the broker")
    return record
