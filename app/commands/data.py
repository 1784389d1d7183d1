"""`podracer data synth|import|fetch|info`: fill and inspect the bar store under ``<home>/data/bars``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from app import context

# Each command imports what it uses in its body: pandas and torch stay off `--help` (app.commands).
app = typer.Typer(help="Market data: synthesize, import, fetch, inspect.", no_args_is_help=True)


@app.command("synth")
def synth(
    tickers: int = typer.Option(20, "--tickers", min=1, max=2000, help="Number of synthetic tickers."),
    sessions: int = typer.Option(20, "--sessions", min=1, help="Number of XNAS sessions."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same bars)."),
    signal: float = typer.Option(1.0, "--signal", min=0.0, help="Planted signal strength (0 = noise)."),
    start: str = typer.Option("2024-01-02", "--start", help="First session on or after this date."),
    shape: str = typer.Option(
        "minute_momentum", "--shape", help="minute_momentum, daily_cross_section, nonlinear."
    ),
    target_ic: float = typer.Option(
        None, "--target-ic", help="Planted level as a daily rank IC (not --signal)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Generate synthetic minute bars (planted signal, see docs/data.md) into the store."""
    from app import render
    from data.synthetic import SyntheticSpec, write_synthetic

    knobs = {"signal": signal, "start": start, "shape": shape, "target_ic": target_ic}
    spec = SyntheticSpec(num_tickers=tickers, num_sessions=sessions, seed=seed, **knobs)
    with context.err_console.status(f"generating {tickers} tickers x {sessions} sessions"):
        report = write_synthetic(context.home(), spec)
    render.data_report(report.to_dict(), as_json, "synthetic")


@app.command("import")
def import_(
    files: list[Path] = typer.Argument(
        ..., help="CSV files (timestamp or date, ticker, open, high, low, close, volume)."
    ),
    interval: str | None = typer.Option(
        None, "--interval", help="1m, 5m, 15m, 30m, 1h, 1d \\[default: inferred]."
    ),
    adjust: Path | None = typer.Option(None, "--adjust", help="Lean factor file (split/dividend adjust)."),
    raw: bool = typer.Option(False, "--raw", help="The files hold raw bars (adjusted on load, as fetched)."),
    extended_hours: bool = typer.Option(False, "--extended-hours", help="Keep 04:00-20:00 ET bars."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Validate, align and store CSV bars (all or nothing: a bad row stores nothing)."""
    from app import render
    from data.sources.csv import import_files

    with context.err_console.status(f"importing {len(files)} file(s)"):
        home, hours = context.home(), extended_hours
        report = import_files(files, home, interval=interval, adjust=adjust, extended_hours=hours, raw=raw)
    render.data_report(report.to_dict(), as_json, "imported")


@app.command("fetch")
def fetch(
    source: str = typer.Option(..., "--source", help="yfinance or alpaca."),
    tickers: list[str] = typer.Option(
        [], "--tickers", help="Tickers, comma-separated or repeated (added to --universe's members)."
    ),
    universe: str = typer.Option("", "--universe", help="nasdaq100: the index members on --as-of."),
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
    same command after an interruption to fetch only the missing chunks (Alpaca keys: APCA_API_*).
    """
    from app import render
    from app.workflows import data as data_flow

    symbols = data_flow.fetch_tickers(universe, as_of, start, tickers)
    window = {"start": start, "end": end, "interval": interval, "extended_hours": extended_hours}
    report = data_flow.fetch(
        context.home(), source=source, tickers=symbols, progress=not (as_json or quiet), batch=batch,
        max_wait_s=max_wait, **window,
    ).to_dict()  # fmt: skip
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    render.fetch_summary(report, source)


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
    from app import render
    from data.universe import changes, check_universe

    check_universe(name)
    result = changes(as_of, since)
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    render.universe_changes(name, result)


@app.command("info")
def info(
    config: Path | None = typer.Option(None, "--config", help="TOML config: its data.universe, as_of."),
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
    from app import render
    from app.workflows import data as data_flow

    summary = data_flow.store_summary(context.home(), config, universe, as_of)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    render.store_info(summary)
