"""Compare: overlay runs; a table with the settings that differ, the paper's figures (same setup
only) and CSV; parallel coordinates of settings against final accuracy.

The selection is in the URL (``?runs=<id>,<id>``), so a comparison is a shareable link.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from admm_core.bench import PAPER
from admm_core.runs import read_metrics
from app import ui
from app.dashboard import charts as C
from app.dashboard import meta as M
from app.dashboard import workers as W

ss = st.session_state
MAX_DEFAULT = 6


def _url_selection(names: list[str]) -> list[str] | None:
    q = st.query_params.get("runs")
    if not q:
        return None
    return [n for n in q.split(",") if n in names]


def _mirror_selection() -> None:
    sel = ss.get("cmp_runs") or []
    if sel:
        st.query_params["runs"] = ",".join(sel)
    elif "runs" in st.query_params:
        del st.query_params["runs"]


def main() -> None:
    st.title("Compare")
    st.caption(
        "Overlay any runs — from this dashboard, the CLI or a notebook — with the settings that differ "
        "between them and the paper's figures where the setup is the paper's."
    )
    runs = ui.list_runs()
    if not runs:
        st.info(
            f"No runs in `{ui.runs_root()}` yet. Start some on the Train page, or with "
            "`python -m admm_core bench --preset digits-mlp --methods block-admm,adam,sgd`."
        )
        return

    c = st.columns([1, 1, 1, 1.4])
    all_data = sorted({W.data_of(r) for r in runs})
    all_methods = sorted({W.method_of(r) for r in runs})
    all_states = sorted({r["status"].get("state", "unknown") for r in runs})
    data_sel = c[0].multiselect("Data set", all_data, default=all_data, key="cmp_data")
    method_sel = c[1].multiselect("Method", all_methods, default=all_methods, key="cmp_methods")
    state_sel = c[2].multiselect("Status", all_states, default=all_states, key="cmp_states")
    text = c[3].text_input("Filter (name, tags, note…)", key="cmp_filter")
    by_id = {r["name"]: r for r in runs}
    pool = [
        r
        for r in runs
        if W.data_of(r) in data_sel
        and W.method_of(r) in method_sel
        and r["status"].get("state", "unknown") in state_sel
        and M.matches(r, text)
    ]
    names = [r["name"] for r in pool]
    if "cmp_runs" not in ss:
        from_url = _url_selection(list(by_id))
        ss["cmp_runs"] = from_url if from_url is not None else names[: min(MAX_DEFAULT, len(names))]
    # picked runs stay picked while a filter hides them from the pool
    options = names + [n for n in ss["cmp_runs"] if n not in names and n in by_id]
    ss["cmp_runs"] = [n for n in ss["cmp_runs"] if n in by_id]
    st.multiselect(
        "Runs",
        options,
        key="cmp_runs",
        on_change=_mirror_selection,
        format_func=lambda n: ui.run_label(by_id[n]),
    )
    _mirror_selection()
    chosen = ss["cmp_runs"]
    if not chosen:
        st.info("Pick at least one run.")
        return

    c = st.columns([1.2, 1, 1, 2])
    x_axis = c[0].radio("x axis", ["epoch", "wall time"], horizontal=True, key="cmp_x")
    log_y = c[1].toggle("log-scale loss / residuals", value=True, key="cmp_log")
    acc_log = c[2].toggle("log-scale accuracy", value=False, key="cmp_acc_log")
    smoothing = c[3].slider("Smoothing (moving average weight)", 0.0, 0.95, 0.0, 0.05, key="cmp_smooth")
    x_key = "wall_time_s" if x_axis == "wall time" else "epoch"

    series, rows, cfgs = [], [], []
    for n in chosen:
        r = by_id[n]
        m = read_metrics(r["dir"])
        cfg = r["config"] or {}
        label = r["meta"]["name"] or (n if len(n) <= 28 else n[:15] + "…")  # ids start with the launch time
        series.append((f"{cfg.get('method', '?')} · {label}", m))
        rows.append(C.run_row(n, cfg, r["status"], m, PAPER, r["meta"]))
        cfgs.append(cfg)

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
        C.compare_figure(
            series, "residuals", x_key, smoothing, log_y, "Primal residual per block (line style = block)"
        ),
        key="cmp_res",
        config=ui.PLOTLY_CONFIG,
    )

    st.subheader("Table")
    differ = C.differing_settings(cfgs)
    flat = [C.settings_of(cfg) for cfg in cfgs]
    for row, f in zip(rows, flat):
        for k in differ:
            v = f.get(k)
            row[f"⚙ {k}"] = v if v is None or isinstance(v, (int, float, str)) else str(v)
    table = pd.DataFrame(rows)
    lead = ["run", "name", "method", "final test %", "paper test %", "Δ vs paper", "paper"]
    order = lead + [f"⚙ {k}" for k in differ] + [k for k in table.columns if k not in lead and not k.startswith("⚙ ")]
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        key="cmp_table",
        column_order=order,
        column_config={
            "paper test %": st.column_config.NumberColumn(
                help="final test accuracy the paper reports for this preset and method; only for a run with the "
                "preset's data, sample limits, network, epochs and loss"
            ),
            "paper": st.column_config.TextColumn(help="whether this run's setup is the paper's, and what differs"),
        },
    )
    st.caption(
        f"⚙ columns: the settings that differ between the selected runs ({len(differ)}); click a header to sort. "
        "Paper figures (admm_core.bench.PAPER) are shown only for a run whose setup is the paper's. "
        "Memory is the size of the method's auxiliary state (Z, U and their moments); end-to-end methods keep none."
    )
    st.download_button(
        "Download table (CSV)",
        table[order].to_csv(index=False).encode(),
        icon=":material/download:",
        file_name="compare.csv",
        mime="text/csv",
        key="cmp_csv",
    )
    st.subheader("Settings against final accuracy")
    if len(chosen) < 2 or not differ:
        st.caption("Pick two or more runs whose settings differ to see them in parallel coordinates.")
    else:
        st.plotly_chart(C.parallel_figure(rows, flat, differ), key="cmp_parcoords", config=ui.PLOTLY_CONFIG)


main()
