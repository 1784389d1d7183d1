"""Streamlit entry point of the podracer dashboard: ``streamlit run app/dashboard/app.py``.

Started by ``podracer dashboard`` (which sets PODRACER_HOME and PODRACER_DASHBOARD_RUN). It only
reads artifacts; every page shows an empty state when what it needs has not been written yet.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Streamlit puts this script's folder first on sys.path, where this very file would shadow the
# ``app`` package ("app is not a package"). Drop it so ``import app.dashboard`` finds the package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_ROOT = str(_HERE.parent.parent)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
for _name in [m for m in sys.modules if m == "app" and not hasattr(sys.modules[m], "__path__")]:
    del sys.modules[_name]

import streamlit as st  # noqa: E402

st.set_page_config(page_title="podracer", page_icon=":material/sports_motorsports:", layout="wide")

from app.dashboard import ui  # noqa: E402

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/monitoring:", default=True),
    st.Page("pages/tournament.py", title="Tournament", icon=":material/emoji_events:"),
    st.Page("pages/training.py", title="Training", icon=":material/show_chart:"),
    st.Page("pages/positions.py", title="Positions & trades", icon=":material/pie_chart:"),
    st.Page("pages/nightly.py", title="Nightly", icon=":material/schedule:"),
    st.Page("pages/paper.py", title="Paper trading", icon=":material/receipt_long:"),
]

page = st.navigation(PAGES)
st.sidebar.title("podracer")
ui.run_picker(ui.resolve_home())
page.run()
