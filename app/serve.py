"""The dashboard with its live-chart data route. Run from the project root:

    streamlit run app/serve.py

The pages are app/main.py's; Streamlit's ``st.App`` (ASGI, uvicorn) adds one read-only route,
``GET /api/admm/live/<token>``, through which the Train page's live charts fetch only the metrics
lines they do not have yet (app/dashboard/tail.py). Every ``streamlit run`` flag and
``.streamlit/config.toml`` setting applies as for ``streamlit run app/main.py``, which still works:
then each new point is pushed through a page rerun instead.
"""

import os

import streamlit as st
from starlette.routing import Route

from app import ui
from app.dashboard import tail

ui.stacks_on_usr1()  # as soon as the server starts (app/main.py does it too, for `streamlit run app/main.py`)

os.environ[tail.ENV] = tail.ROUTE  # read by the pages (same process): the route is mounted

app = st.App("main.py", routes=[Route(tail.ROUTE + "/{token}", tail.endpoint, methods=["GET"])])
