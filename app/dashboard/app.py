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
    st.Page("screens/paper.py", title="Paper trading"),
]

page = st.navigation(PAGES)
st.sidebar.title("podracer")
ui.run_picker(ui.resolve_home())
page.run()
