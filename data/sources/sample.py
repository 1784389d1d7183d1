"""The small real sample shipped with podracer: minute bars of SPY, IBM, BAC, AIG, 2013-10-04..11.

From QuantConnect Lean's test data (Apache-2.0; see ``data/resources/README.md`` and the license
text next to the file). Raw prices, pre/post-market included in the file (dropped by alignment
unless extended hours are asked for), minutes without trades absent.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from data.align import Panel, align_panel, align_ticker
from data.sources.csv import read_csv

SAMPLE_FILE = "real_sample_minute.csv.gz"
SAMPLE_TICKERS = ("AIG", "BAC", "IBM", "SPY")


def real_sample_path() -> Path:
    """Path of the shipped sample CSV (inside the installed package)."""
    return Path(str(resources.files("data") / "resources" / SAMPLE_FILE))


def real_sample_panel(
    interval: str = "1m", min_coverage: float = 0.5, coverage_frac: float = 1.0, carry_leading: bool = False
) -> Panel:
    """The sample aligned to the XNAS grid as one dense panel (``data.align.align_panel``)."""
    bars = read_csv(real_sample_path())
    frames = {
        str(ticker): align_ticker(group, interval, source=SAMPLE_FILE).frame
        for ticker, group in bars.groupby("ticker", sort=True)
    }
    return align_panel(
        frames, interval, min_coverage=min_coverage, coverage_frac=coverage_frac, carry_leading=carry_leading
    )
