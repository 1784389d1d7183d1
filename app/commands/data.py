"""`podracer data synth|import|fetch|info`: fill and inspect the bar store under ``<home>/data/bars``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from app import context
from app.config import load_config
from app.workflows import data as data_flow
from data.errors import DataError
from data.sources.csv import import_files
from data.store import BarStore
from data.synthetic import SyntheticSpec, write_synthetic
from data.universe import changes, check_universe

app = typer.Typer(help="Market data: synthesize, import, fetch, inspect.", no_args_is_help=True)


def _print_report(report: dict, as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    console = context.console
    console.print(
        f"{title}: {len(report['tickers'])} ticker(s) at {report['interval']}, "
        f"{report['files_written']} file(s) written, {report['files_unchanged']} unchanged "
        f"-> {context.home() / 'data' / 'bars'}",
        highlight=False,
    )
    if report.get("dropped_outside_hours"):
        console.print(
            f"dropped {report['dropped_outside_hours']} bar(s) outside regular hours", highlight=False
        )
    table = Table("ticker", "bars", "gaps filled")
    for ticker in report["tickers"]:
        table.add_row(ticker, str(report["bars"][ticker]), str(report["gaps_filled"][ticker]))
    console.print(table)


@app.command("synth")
def synth(
    tickers: int = typer.Option(20, "--tickers", min=1, max=2000, help="Number of synthetic tickers."),
    sessions: int = typer.Option(20, "--sessions", min=1, help="Number of XNAS sessions."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same bars)."),
    signal: float = typer.Option(
        1.0, "--signal", min=0.0, help="Strength of the planted signal (0 = noise)."
    ),
    start: str = typer.Option("2024-01-02", "--start", help="First session on or after this date."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Generate synthetic minute bars (planted signal, see docs/data.md) into the store."""
    spec = SyntheticSpec(num_tickers=tickers, num_sessions=sessions, seed=seed, signal=signal, start=start)
    with context.err_console.status(f"generating {tickers} tickers x {sessions} sessions"):
        report = write_synthetic(context.home(), spec)
    _print_report(report.to_dict(), as_json, "synthetic")


@app.command("import")
def import_(
    files: list[Path] = typer.Argument(
        ..., help="CSV files (timestamp or date, ticker, open, high, low, close, volume)."
    ),
    interval: str | None = typer.Option(
        None, "--interval", help="1m, 5m, 15m, 30m, 1h, 1d [default: inferred]."
    ),
    adjust: Path | None = typer.Option(
        None, "--adjust", help="Lean factor file for split/dividend adjustment."
    ),
    extended_hours: bool = typer.Option(False, "--extended-hours", help="Keep 04:00-20:00 ET bars."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Validate, align and store CSV bars (all or nothing: a bad row stores nothing)."""
    with context.err_console.status(f"importing {len(files)} file(s)"):
        report = import_files(
            files, context.home(), interval=interval, adjust=adjust, extended_hours=extended_hours
        )
    _print_report(report.to_dict(), as_json, "imported")


@app.command("fetch")
def fetch(
    source: str = typer.Option(..., "--source", help="yfinance or alpaca."),
    tickers: list[str] = typer.Option(
        [], "--tickers", help="Tickers, comma-separated or repeated (added to --universe's members)."
    ),
    universe: str = typer.Option(
        "", "--universe", help="nasdaq100: the index members on --as-of ('' = none)."
    ),
    as_of: str | None = typer.Option(
        None, "--as-of", help="Membership date for --universe (YYYY-MM-DD) (default: --start)."
    ),
    start: str = typer.Option(..., "--start", help="First date (YYYY-MM-DD)."),
    end: str = typer.Option(..., "--end", help="Last date (YYYY-MM-DD, inclusive)."),
    interval: str = typer.Option("1m", "--interval", help="1m, 5m, 15m, 30m, 1h, 1d."),
    extended_hours: bool = typer.Option(False, "--extended-hours", help="Keep 04:00-20:00 ET bars."),
    batch: int = typer.Option(10, "--batch", min=1, max=200, help="Tickers per request chunk."),
    max_wait: float = typer.Option(
        120.0, "--max-wait", min=0, help="Most seconds to wait out HTTP 429 rate limits in total."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Download bars from yfinance or Alpaca into the store, chunk by chunk (ticker batch x month).

    Each chunk is written as it arrives and recorded in <home>/data/fetch_manifest.sqlite: rerun the
    same command after an interruption to fetch only the missing chunks. Alpaca keys:
    APCA_API_KEY_ID / APCA_API_SECRET_KEY.
    """
    names = [t.strip() for item in tickers for t in item.split(",") if t.strip()]
    if source not in ("yfinance", "alpaca"):
        raise DataError(f"unknown source {source!r} (yfinance or alpaca)")
    symbols = data_flow.fetch_tickers(universe, as_of, start, names)
    if not symbols:
        raise DataError("data fetch: give --tickers and/or --universe nasdaq100")
    report = data_flow.fetch(
        context.home(),
        source=source,
        tickers=symbols,
        start=start,
        end=end,
        interval=interval,
        extended_hours=extended_hours,
        progress=not (as_json or quiet),
        batch=batch,
        max_wait_s=max_wait,
    ).to_dict()
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    chunks = report["chunks"]
    _print_report(report, False, f"fetched ({source})")
    context.console.print(
        f"chunks: {chunks['fetched']} fetched, {chunks['skipped']} already stored, {chunks['failed']} failed; "
        f"{report['bars_fetched']:,} bars received"
        + (
            f"; rate limited {report['requests_throttled']} time(s), waited {report['waited_s']:.0f} s"
            if report["requests_throttled"]
            else ""
        ),
        highlight=False,
    )


@app.command("universe")
def universe_(
    as_of: str = typer.Option(..., "--as-of", help="Membership date (YYYY-MM-DD)."),
    since: str | None = typer.Option(
        None, "--since", help="Joins and leaves after this date (default: one year before --as-of)."
    ),
    name: str = typer.Option("nasdaq100", "--universe", help="Index (nasdaq100)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """List an index's members on --as-of, and the joins and leaves in (--since, --as-of]."""
    check_universe(name)
    result = changes(as_of, since)
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    console = context.console
    console.print(f"[bold]{name}[/] on {result['as_of']}: {len(result['members'])} members", highlight=False)
    console.print(" ".join(result["members"]), highlight=False)
    table = Table(
        "change", "date", "symbol", "name", title=f"joins and leaves {result['since']} .. {result['as_of']}"
    )
    for kind in ("joins", "leaves"):
        for row in result[kind]:
            table.add_row(kind[:-1], row["date"], row["symbol"], row["name"])
    console.print(table)


@app.command("info")
def info(
    config: Path | None = typer.Option(
        None, "--config", help="TOML config: its data.universe and data.as_of."
    ),
    universe: str | None = typer.Option(None, "--universe", help="nasdaq100: show which members are stored."),
    as_of: str | None = typer.Option(
        None,
        "--as-of",
        help="Membership date (default: the config's data.as_of, else the first stored month).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarize the store: tickers, interval, sessions, date range, rows, gaps filled (and, with a
    universe, which of its members are stored)."""
    cfg = load_config(config).data if config is not None or universe is None else None
    name = universe if universe is not None else (cfg.universe if cfg is not None else "")
    date_ = as_of or (cfg.as_of if cfg is not None else "")
    summary = BarStore(context.home()).info()
    if check_universe(name):
        summary["universe"] = data_flow.universe_coverage(context.home(), summary, name, date_)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    console = context.console
    if not summary["intervals"]:
        console.print(f"no bars in {summary['root']} (try `podracer data synth` or `podracer data import`)")
        return
    for interval, part in summary["intervals"].items():
        console.print(
            f"[bold]{interval}[/]: {len(part['tickers'])} ticker(s), {part['sessions']} session(s) "
            f"{part['start']} .. {part['end']}, {part['rows']} rows, {part['gaps_filled']} gaps filled",
            highlight=False,
        )
        part_universe = summary.get("universe", {}).get(interval)
        if part_universe:
            console.print(
                f"universe {part_universe['universe']} on {part_universe['as_of']}: "
                f"{len(part_universe['stored'])} of {len(part_universe['members'])} members stored"
                + (f"; missing {', '.join(part_universe['missing'])}" if part_universe["missing"] else ""),
                highlight=False,
            )
        table = Table("ticker", "sessions", "start", "end", "rows", "gaps filled")
        for ticker, row in part["by_ticker"].items():
            table.add_row(
                ticker,
                str(row["sessions"]),
                row["start"],
                row["end"],
                str(row["rows"]),
                str(row["gaps_filled"]),
            )
        console.print(table)
