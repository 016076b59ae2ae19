"""The dashboard: the pages of app/main.py with the dashboard's routes. Run from the project root:

    streamlit run app/serve.py

Streamlit's ``st.App`` (ASGI, uvicorn) adds two read-only routes (:func:`app.dashboard.follow.routes`):
``GET /api/admm/live/<token>``, through which the Train page's live charts fetch the metrics lines
they do not have yet and the run's state (app/dashboard/tail.py), and ``GET /api/admm/stamp/<token>``,
through which a page asks whether what it shows changed on disk (app/dashboard/follow.py). Every
``streamlit run`` flag and ``.streamlit/config.toml`` setting applies.
"""

import streamlit as st

from app import ui
from app.dashboard import follow

ui.stacks_on_usr1()  # as soon as the server starts (app/main.py does it too, for `streamlit run app/main.py`)

app = st.App("main.py", routes=follow.routes())
