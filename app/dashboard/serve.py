"""Process entry of the dashboard server: ``python -m app.dashboard.serve [streamlit run options]``.

Equivalent to ``streamlit run app/dashboard/streamlit_app.py [options]``, except that the heavy imports
(pandas, pyarrow, plotly and its validators) happen once at server start instead of during the
first visitor's page load: on a 2-core machine that is about a second of the first render.
"""

from __future__ import annotations

import sys

from app.dashboard import artifacts, cards, charts, pods, series  # noqa: F401 - loaded once, at server start
from app.dashboard.launch import APP_PATH


def warm_up() -> None:
    """Import and exercise what the first page run needs, so it is already loaded when it comes."""
    import pandas as pd
    import plotly.graph_objects as go
    import pyarrow.parquet  # noqa: F401 - imported for its side effect: loaded once

    stamps = pd.date_range("2024-01-02", periods=4, freq="D", tz="UTC")
    equity = pd.DataFrame({"champion": [1.0, 1.1, 1.0, 1.2]}, index=stamps)
    # Building and serialising once loads plotly's per-trace validators (the slow part of a first figure).
    for fig in (
        charts.equity_figure(equity),
        charts.underwater_figure(series.drawdown(equity)),
        charts.monthly_heatmap(series.monthly_returns(equity["champion"].pct_change().dropna())),
        go.Figure(go.Scatter(x=[0, 1], y=[0, 1], stackgroup="w")),
    ):
        fig.to_json()


def main(argv: list[str] | None = None) -> int:
    """Warm up, then hand over to Streamlit's own command line (``streamlit run APP argv...``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    warm_up()
    from streamlit.web import cli as streamlit_cli

    sys.argv = ["streamlit", "run", str(APP_PATH), *args]
    try:
        streamlit_cli.main(prog_name="streamlit")
    except SystemExit as done:
        return int(done.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
