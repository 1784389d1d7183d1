"""Streamlit entry point of the podracer dashboard: ``streamlit run app/dashboard/streamlit_app.py``.

Started by ``podracer dashboard`` (which sets PODRACER_HOME and PODRACER_DASHBOARD_RUN, and puts
the checkout on PYTHONPATH). It only reads artifacts; every page shows an empty state when what it
needs has not been written yet. Streamlit puts this script's folder first on ``sys.path``: no module
here may be named like a package it imports (an ``app.py`` here would shadow the ``app`` package).
"""

from __future__ import annotations

import streamlit as st

# An emoji favicon, not a ":material/...:" one (nor page icons, which become the favicon of their
# page): Streamlit fetches material-symbol favicons from fonts.gstatic.com, and the dashboard must
# work offline; an emoji becomes an inline SVG.
st.set_page_config(page_title="podracer", page_icon="🏁", layout="wide")

from app.dashboard import ui  # noqa: E402

# The page scripts live in screens/, not pages/: a folder named pages/ beside the entry script makes
# Streamlit emulate its old multipage mode, where a deep link (/positions) runs the page file
# without this script (no page config, no run picker, the file names as navigation).
PAGES = [
    st.Page("screens/overview.py", title="Overview", default=True),
    st.Page("screens/tournament.py", title="Tournament"),
    st.Page("screens/training.py", title="Training"),
    st.Page("screens/positions.py", title="Positions & trades"),
    st.Page("screens/nightly.py", title="Nightly"),
    st.Page("screens/walkforward.py", title="Walk-forward"),
    st.Page("screens/paper.py", title="Paper trading"),
]

page = st.navigation(PAGES)
ui.page_style()
st.sidebar.title("podracer")
ui.run_picker(ui.resolve_home())
page.run()
