"""Streamlit glue shared by the pages: the home and run being viewed, empty states, error guard.

Environment (set by ``podracer dashboard``): ``PODRACER_HOME`` the home directory,
``PODRACER_DASHBOARD_RUN`` the run to open first (default: the newest).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from app.dashboard import artifacts, loaders
from app.dashboard.cards import Card
from app.dashboard.pods import PodTable
from app.dashboard.verdict_box import VerdictBox
from app.runs import runs_root
from data.errors import PodracerError, one_line

if TYPE_CHECKING:
    import plotly.graph_objects as go

HOME_ENV = "PODRACER_HOME"
RUN_ENV = "PODRACER_DASHBOARD_RUN"
DEFAULT_HOME = "./podracer-home"
RUN_KEY = "run"
_PICKER_KEY = "run_picker"


def resolve_home() -> Path:
    """The home directory the dashboard reads (absolute)."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser().resolve()


def home() -> Path:
    """The home of this session (set by the entry script), else the environment's."""
    return Path(st.session_state.get("home") or resolve_home())


def run_picker(home_dir: Path) -> str | None:
    """Sidebar select box of the runs under the home; returns the chosen run id (or None).

    The choice is kept under a plain session key as well as the widget's: Streamlit clears a
    widget's state whenever a rerun does not render that widget, and the run must survive that.
    """
    st.session_state["home"] = str(home_dir)
    runs = loaders.list_runs(str(home_dir))
    st.sidebar.caption(f"home: `{home_dir}`")
    if not runs:
        st.session_state[RUN_KEY] = None
        st.sidebar.info("No runs yet.")
        return None
    # ``?run=ID`` in the URL (a link to one run) wins over the server's --run, on the first visit.
    linked = st.query_params.get("run")
    wanted = linked if linked in runs else os.environ.get(RUN_ENV)
    current = st.session_state.get(RUN_KEY)
    if linked in runs and not st.session_state.get("_linked"):
        st.session_state["_linked"] = True
        current = None
    if current not in runs:
        if wanted and wanted not in runs:
            st.sidebar.warning(f"run {wanted!r} not found; showing the newest run")
        # First visit, or the selected run was deleted: the requested run, else the newest.
        current = wanted if wanted in runs else runs[0]
        st.session_state[RUN_KEY] = current

    def _remember() -> None:
        st.session_state[RUN_KEY] = st.session_state[_PICKER_KEY]

    st.sidebar.selectbox(
        "Run",
        runs,
        index=runs.index(current),
        key=_PICKER_KEY,
        on_change=_remember,
        help="Runs under <home>/runs, newest first.",
    )
    return st.session_state[RUN_KEY]


def require_run() -> Path:
    """The selected run's directory; without one, an empty state and the page stops here."""
    home_dir = home()
    run = st.session_state.get(RUN_KEY)
    if run is None:
        # Defensive: a page script run without the entry script (``streamlit run screens/x.py``)
        # picks the run the way the sidebar would.
        runs = loaders.list_runs(str(home_dir))
        wanted = os.environ.get(RUN_ENV)
        run = wanted if wanted in runs else (runs[0] if runs else None)
        st.session_state[RUN_KEY] = run
    if not run:
        st.info(
            f"No runs under `{runs_root(home_dir)}` yet. Create one with `podracer demo`, "
            "`podracer train` or `podracer train --tournament`, then reload."
        )
        st.stop()
    try:
        return artifacts.run_path(home_dir, run)
    except PodracerError as err:
        st.warning(str(err))
        st.stop()
    raise AssertionError("unreachable")  # st.stop() raises


@contextlib.contextmanager
def guard(what: str = "") -> Iterator[None]:
    """Show artifact problems as one message instead of a traceback; the rest of the page goes on.

    Missing artifacts are an info box (an empty state, with the command that creates them),
    corrupt ones an error box naming the file, and anything unexpected one error line.
    Streamlit's own stop/rerun signals derive from BaseException and pass through.
    """
    try:
        yield
    except artifacts.ArtifactMissing as err:
        st.info(str(err))
    except PodracerError as err:
        st.error(str(err))
    except Exception as err:  # noqa: BLE001 - a page must never show a traceback
        prefix = f"{what}: " if what else ""
        st.error(f"{prefix}could not render ({one_line(err)})")


# Four cards to a row: at a 1400-px window with the sidebar open the main column is about 930 px,
# and eight cards of ~100 px cut "-12.34%" to "-1…" and "Max drawdown" to "Ma…". At four a card is
# ~215 px: the longest value ("3.5M%", "-100.00%"), delta ("+72.11 pp") and label fit whole, and
# the browser test checks it (scrollWidth <= clientWidth). Less top padding keeps the charts closer.
_PAGE_CSS = """<style>
.block-container { padding-top: 2.5rem; }
[data-testid="stMetricValue"] { font-size: 1.6rem; }
</style>"""


def page_style() -> None:
    """The dashboard's few CSS rules (called once by the entry script, for every page)."""
    st.html(_PAGE_CSS)


def show_cards(cards: list[Card], per_row: int = 4) -> None:
    """Rows of ``st.metric`` cards; each card's tooltip (help) has the exact values."""
    for start in range(0, len(cards), per_row):
        cols = st.columns(per_row, gap="small")
        for col, card in zip(cols, cards[start : start + per_row], strict=False):
            col.metric(
                card.label,
                card.value,
                delta=card.delta,
                delta_color=card.delta_color,
                delta_arrow=card.delta_arrow,
                help=card.help or None,
                border=True,
            )


def show_verdict(box: VerdictBox | None) -> None:
    """The plain-words verdict metrics.json states (green when significant, orange when not, blue when
    not measurable), then its line of selection diagnostics."""
    if box is not None:
        getattr(st, box.kind)(box.text)
        if box.diagnostics:
            st.caption(box.diagnostics)


def show_table(table: PodTable, key: str | None = None, height: int | None = None) -> None:
    """A pods table with numeric, sortable columns in their display formats."""
    config = {
        col: st.column_config.NumberColumn(col, format=fmt)
        for col, fmt in table.formats.items()
        if col in table.frame.columns and pd.api.types.is_numeric_dtype(table.frame[col])
    }
    kwargs = {"height": height} if height else {}
    st.dataframe(table.frame, hide_index=True, column_config=config, key=key, **kwargs)


def plot(fig: go.Figure, key: str | None = None) -> None:
    """A plotly figure at the container's width, without the plotly logo link."""
    st.plotly_chart(fig, key=key, config={"displaylogo": False})
