"""`podracer dashboard`: serve the Streamlit dashboard over the home's artifacts (read only)."""

from __future__ import annotations

from pathlib import Path

import typer

from app import context


def dashboard(
    home: Path = typer.Option(
        None,
        "--home",
        help="Home directory to read (default: the global --home / $PODRACER_HOME).",
        show_default=False,
    ),
    port: int = typer.Option(8501, "--port", min=1, max=65535, help="Port to serve on."),
    run: str = typer.Option(
        None, "--run", help="Run to open first (default: the newest).", show_default=False
    ),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to bind; anything but loopback exposes your results to the network.",
    ),
) -> None:
    """Serve the dashboard (champion vs buy-and-hold, tournament, training, positions, nightly, paper)."""
    # Imported here, like every command's workflow, so `podracer --help` stays fast (app.commands).
    from app.dashboard.launch import serve_dashboard

    serve_dashboard(Path(home) if home else context.home(), port=port, run=run, host=host)
