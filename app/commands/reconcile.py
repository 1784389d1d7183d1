"""`podracer reconcile [--accept]`: the paper journal's books against the Alpaca account's, now.

Exit status: 0 when they match, 1 on a mismatch (the paper loop sends no new orders meanwhile).
``--accept`` makes the broker's positions the journal's opening book (after an outside trade that is
meant to stay): the loop trades again from its next cycle. See app/paper/books.py.
"""

from __future__ import annotations

import typer
from rich.table import Table

from app import context


def reconcile(
    accept: bool = typer.Option(
        False, "--accept", help="Take the broker's positions as the journal's book from now on."
    ),
) -> None:
    """Compare the journal's fill-implied positions and open orders with the broker's (keys from the env)."""
    # Imported here, not at module top: they load pandas and alpaca-py, which `podracer --help` must not.
    from app.paper.alpaca_broker import AlpacaBroker
    from app.paper.books import accept_broker_book, check_books, implied_positions
    from app.paper.journal import Journal, journal_path
    from data.errors import PodracerError

    home = context.home()
    if not journal_path(home).is_file():
        raise PodracerError(f"no paper journal in {home}: nothing to reconcile (run `podracer paper` first)")
    broker = AlpacaBroker()
    with Journal.for_home(home) as journal:
        if accept:
            record = accept_broker_book(broker, journal)
        else:
            record = check_books(broker, journal, when="reconcile")
        implied = implied_positions(journal)
    held = {s: p.qty for s, p in broker.positions().items()}
    table = Table(title=f"books of {home}: {record.status}")
    for col in ("symbol", "broker", "journal", "difference"):
        table.add_column(col, justify="left" if col == "symbol" else "right")
    for symbol in sorted(set(implied) | set(held)):
        have, want = held.get(symbol, 0.0), implied.get(symbol, 0.0)
        if abs(have) < 1e-12 and abs(want) < 1e-12:
            continue
        diff = have - want
        mark = "" if abs(diff) <= record.tolerance else "[bold red]"
        table.add_row(symbol, f"{have:g}", f"{want:g}", f"{mark}{diff:+g}")
    context.console.print(table)
    for cid in record.outside_orders:
        context.console.print(f"open order {cid} was not placed by podracer", highlight=False)
    if not record.matched:
        context.console.print(
            "mismatch: the paper loop sends no new orders until the books match; reverse the outside "
            "trade, or run `podracer reconcile --accept` to keep the broker's book",
            highlight=False,
        )
        raise typer.Exit(1)
