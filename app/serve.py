"""The dashboard: app/main.py's pages with the dashboard's read-only routes (``streamlit run app/serve.py``).

Streamlit's ``st.App`` adds :func:`app.dashboard.follow.routes`: ``GET /api/admm/live/<token>`` (the
live charts fetch the metrics lines they lack and the run's state) and ``GET /api/admm/stamp/<token>``
(a page asks whether what it shows changed on disk). Every ``streamlit run`` flag applies.
"""

import streamlit as st

from app import ui
from app.dashboard import follow

ui.stacks_on_usr1()  # as soon as the server starts (app/main.py does it too, for `streamlit run app/main.py`)

app = st.App("main.py", routes=follow.routes())
