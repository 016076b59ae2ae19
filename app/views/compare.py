"""Compare: overlay runs of different methods; a table beside the paper's figures; CSV."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from admm_core.bench import PAPER
from admm_core.runs import read_metrics
from app import ui
from app.dashboard import charts as C
from app.dashboard import workers as W

ss = st.session_state
st.title("Compare")
st.caption("Overlay any runs — from this dashboard, the CLI or a notebook — and compare them with the paper's figures.")

runs = W.runs(ui.runs_root())
if not runs:
    st.info(
        f"No runs in `{ui.runs_root()}` yet. Start some on the Train page, or with "
        "`python -m admm_core bench --preset digits-mlp --methods block-admm,adam,sgd`."
    )
    st.stop()

c = st.columns([1, 1, 1])
all_data = sorted({W.data_of(r) for r in runs})
all_methods = sorted({W.method_of(r) for r in runs})
all_states = sorted({r["status"].get("state", "unknown") for r in runs})
data_sel = c[0].multiselect("Data set", all_data, default=all_data, key="cmp_data")
method_sel = c[1].multiselect("Method", all_methods, default=all_methods, key="cmp_methods")
state_sel = c[2].multiselect("Status", all_states, default=all_states, key="cmp_states")
pool = [
    r
    for r in runs
    if W.data_of(r) in data_sel and W.method_of(r) in method_sel and r["status"].get("state", "unknown") in state_sel
]
names = [r["name"] for r in pool]
default = names[: min(6, len(names))]
if "cmp_runs" in ss:
    ss["cmp_runs"] = [n for n in ss["cmp_runs"] if n in names]
chosen = st.multiselect(
    "Runs",
    names,
    default=None if "cmp_runs" in ss else default,
    key="cmp_runs",
    format_func=lambda n: f"{n} · {ui.state_label(next(r for r in pool if r['name'] == n)['status'].get('state'))}",
)
if not chosen:
    st.info("Pick at least one run.")
    st.stop()

c = st.columns([1.2, 1, 1, 2])
x_axis = c[0].radio("x axis", ["epoch", "wall time"], horizontal=True, key="cmp_x")
log_y = c[1].toggle("log-scale loss / residuals", value=True, key="cmp_log")
acc_log = c[2].toggle("log-scale accuracy", value=False, key="cmp_acc_log")
smoothing = c[3].slider("Smoothing (moving average weight)", 0.0, 0.95, 0.0, 0.05, key="cmp_smooth")
x_key = "wall_time_s" if x_axis == "wall time" else "epoch"

by_name = {r["name"]: r for r in pool}
series = []
rows = []
for n in chosen:
    r = by_name[n]
    m = read_metrics(r["dir"])
    cfg = r["config"] or {}
    short = n if len(n) <= 28 else n[:15] + "…"  # engine run names start with the launch time
    label = f"{cfg.get('method', '?')} · {short}"
    series.append((label, m))
    rows.append(C.run_row(n, cfg, r["status"], m, PAPER))

g = st.columns(2)
g[0].plotly_chart(
    C.compare_figure(series, "test_accuracy", x_key, smoothing, acc_log, "Test accuracy (%)", percent=True),
    key="cmp_acc",
    config=ui.PLOTLY_CONFIG,
)
g[1].plotly_chart(
    C.compare_figure(series, "train_accuracy", x_key, smoothing, acc_log, "Train accuracy (%)", percent=True),
    key="cmp_tracc",
    config=ui.PLOTLY_CONFIG,
)
g = st.columns(2)
g[0].plotly_chart(
    C.compare_figure(series, "train_loss", x_key, smoothing, log_y, "Train loss per sample"),
    key="cmp_loss",
    config=ui.PLOTLY_CONFIG,
)
g[1].plotly_chart(
    C.compare_figure(series, "residuals", x_key, smoothing, log_y, "Primal residual per block (line style = block)"),
    key="cmp_res",
    config=ui.PLOTLY_CONFIG,
)

st.subheader("Table")
table = pd.DataFrame(rows)
st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    key="cmp_table",
    column_config={
        "paper test %": st.column_config.NumberColumn(
            help="final test accuracy reported in the paper for this preset and method"
        )
    },
)
st.caption(
    "Paper figures: final test accuracy reported in the paper for the same preset and method (admm_core.bench.PAPER). "
    "Memory is the size of the method's auxiliary state (Z, U and their moments); end-to-end methods keep none."
)
st.download_button(
    "Download table (CSV)",
    table.to_csv(index=False).encode(),
    icon=":material/download:",
    file_name="compare.csv",
    mime="text/csv",
    key="cmp_csv",
)
