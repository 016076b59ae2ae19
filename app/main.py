"""Block-ADMM workbench dashboard: the pages (Train, Compare, Heatmaps, Runs, Sweeps). Serve them with
``streamlit run app/serve.py`` from the project root (``streamlit run app/main.py`` draws them too,
but nothing then follows a run). Runs live in $ADMM_RUNS (default ./runs); data sets come from $ADMM_DATA.
"""

import streamlit as st

from app import ui
from app.dashboard import follow, workers

st.set_page_config(page_title="Block-ADMM workbench", page_icon=":material/view_column:", layout="wide")

pages = [
    st.Page("views/train.py", title="Train", icon=":material/model_training:", default=True),  # served at /
    st.Page("views/compare.py", title="Compare", icon=":material/stacked_line_chart:", url_path="compare"),
    st.Page("views/heatmaps.py", title="Heatmaps", icon=":material/face:", url_path="heatmaps"),
    st.Page("views/runs.py", title="Runs", icon=":material/folder_open:", url_path="runs"),
    st.Page("views/sweeps.py", title="Sweeps", icon=":material/tune:", url_path="sweeps"),
]
ui.stacks_on_usr1()
nav = st.navigation(pages)

with st.sidebar:
    st.caption("Block-ADMM workbench")
    st.text_input(
        "Runs folder",
        value=str(workers.runs_root()),
        key="runs_root",
        help="Where run directories are read and written ($ADMM_RUNS, default ./runs); it must lie "
        "inside $ADMM_RUNS_ROOT (default: that same folder). Set ADMM_RUNS_ROOT=. to browse bench_out/.",
    )
    if problem := ui.runs_root_problem():
        st.error(problem)  # the one message; pages then show no runs
    if not follow.available():
        st.warning("Started without app/serve.py: pages show the runs as they were when drawn (reload to update).")
    ui.keep_chart_views()  # charts keep their zoom and hidden legend entries across redraws
    ui.explain_refused_uploads()  # a file the uploader refuses in the browser is named, with why

nav.run()
