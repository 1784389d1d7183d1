"""`podracer reconcile [--accept] [--no-books] [--no-replay] [--redo] [--config TOML]`: the paper
journal's books against the Alpaca account's, now; then paper trading against the simulator.

Exit status: 0 when the books match, 1 on a mismatch (the paper loop sends no new orders meanwhile).
``--accept`` makes the broker's positions the journal's opening book (after an outside trade that is
meant to stay): the loop trades again from its next cycle. See app/paper/books.py.

Then the sessions traded since the last replay are replayed in the simulator on the broker's bars
(app/paper/sim_replay.py; ``--redo``: every session) and the record,
``<home>/paper/sim_reconcile.json``, is printed: per session the paper and simulated P&L, fees and
slippage, and the execution figures against ``[paper] max_slippage_gap_bps`` (docs/paper.md).
``--no-books --no-replay`` prints the record as it is, without the broker.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from app import context


def reconcile(
    accept: bool = typer.Option(
        False, "--accept", help="Take the broker's positions as the journal's book from now on."
    ),
    books: bool = typer.Option(True, "--books/--no-books", help="Check the books against the broker's."),
    replay: bool = typer.Option(
        True, "--replay/--no-replay", help="Replay the sessions not yet replayed in the simulator first."
    ),
    redo: bool = typer.Option(False, "--redo", help="Replay every session of the journal again."),
    config: Path = typer.Option(
        None,
        "--config",
        help="TOML config whose \\[paper] max_slippage_gap_bps bounds the gap \\[default: the nightly "
        "schedule's config, else built-in defaults].",
    ),
) -> None:
    """Compare the journal's books with the broker's, then paper fills and P&L with the simulator's."""
    # Imported here, not at module top: they load pandas and alpaca-py, which `podracer --help` must not.
    from app.paper.journal import journal_path
    from app.paper.sim_record import read_record
    from app.paper.sim_report import days_table, figures_table
    from data.errors import PodracerError

    home = context.home()
    if not journal_path(home).is_file():
        raise PodracerError(f"no paper journal in {home}: nothing to reconcile (run `podracer paper` first)")
    matched = _books(home, accept) if books or accept else True
    if replay:
        from app.paper.alpaca_broker import AlpacaBroker
        from app.workflows.paper import reconcile_now, slippage_bound

        try:
            record = reconcile_now(home, AlpacaBroker(), slippage_bound(home, config), redo=redo)
        except PodracerError as err:
            if not (books or accept):
                raise
            # The books' verdict stands (and sets the exit status): the record is shown as it was.
            context.err_console.print(f"replay in the simulator failed: {err}", highlight=False)
            record = read_record(home)
    else:
        record = read_record(home)
    if record is None or not record.days:
        context.console.print("no session replayed in the simulator yet", highlight=False)
    else:
        context.console.print(days_table(record))
        context.console.print(figures_table(record))
        for note in record.notes:
            context.console.print(f"note: {note}", highlight=False)
    if not matched:
        raise typer.Exit(1)


def _books(home: Path, accept: bool) -> bool:
    """The book check (``--accept``: the broker's book taken); prints the table, True when matched."""
    from app.paper.alpaca_broker import AlpacaBroker
    from app.paper.books import accept_broker_book, check_books, implied_positions
    from app.paper.journal import Journal

    broker = AlpacaBroker()
    with Journal.for_home(home) as journal:
        record = (
            accept_broker_book(broker, journal) if accept else check_books(broker, journal, when="reconcile")
        )
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
    return record.matched
