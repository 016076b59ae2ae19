"""Compare: overlay runs; a table with the settings that differ, the paper's figures (same setup
only) and CSV; parallel coordinates of settings against final accuracy.

The pick is the user's and it lasts: in the URL (``?runs=<id>,<id>``), in the session, and in the
runs folder (PICK_FILE) for the next visit. Before any pick the newest runs are shown, and the page
says so; new runs are offered in the menu, never swapped in.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from admm_core import compare as X
from admm_core import runs as R
from admm_core.rundir import file_stamp, read_json_dict, write_text_atomic
from admm_core.rundir import read_metrics_cached as read_metrics
from admm_core.spec.kinds import DEEPFACTO, run_kind
from admm_core.spec.presets import PAPER
from app import ui
from app.dashboard import charts as C
from app.dashboard import follow as FL
from app.dashboard import form as F
from app.dashboard import meta as M
from app.dashboard import workers as W

ss = st.session_state
MAX_DEFAULT = 6  # runs shown before any pick; from then on the pick is the user's
PICK_FILE = ".compare-pick.json"  # in the runs folder: the last pick, for the next visit (not a run: a file)


def _first_pick(names: list[str]) -> list[str] | None:
    """The link's pick (``?runs=``), else the last visit's less the runs deleted since; None when neither."""
    if q := st.query_params.get("runs"):
        return [n for n in q.split(",") if n in names]
    ids = read_json_dict(ui.runs_root() / PICK_FILE).get("runs")
    if not isinstance(ids, list):
        return None
    kept = [n for n in ids if isinstance(n, str) and n in names]
    return kept if kept or not ids else None


def _on_pick() -> None:
    """The user changed the pick: into the URL and the runs folder (a read-only folder keeps the URL's)."""
    ss["cmp_default"] = False
    _mirror_selection()
    try:
        write_text_atomic(ui.runs_root() / PICK_FILE, json.dumps({"runs": ss.get("cmp_runs") or []}), durable=False)
    except OSError:
        pass


def _mirror_selection() -> None:
    sel = ss.get("cmp_runs") or []
    if sel:
        st.query_params["runs"] = ",".join(sel)
    elif "runs" in st.query_params:
        del st.query_params["runs"]


def _stamp(dirs: list) -> tuple:
    """The shown runs' metrics files (size, mtime; None: no file) and states: the charts change only with them."""
    stamps = [file_stamp(d / "metrics.jsonl") for d in dirs]
    return tuple(None if s == (0, 0) else (*s, W.state_of(d).get("state")) for s, d in zip(stamps, dirs))


# a live chart is redrawn at most this often: every 1 s starved a slow browser, which got new figures
# before it had drawn the last ones (docs/reliability.md); the Train page is the one that follows live
REDRAW_EVERY_S = 5.0
MAX_POINTS = 1500  # points drawn per curve (charts.thin: each bucket's first, lowest, highest); the CSV has all
# one number of decimals per column (Streamlit's default drew "98" beside "97.78")
TABLE_FORMATS = {
    "final test %": "%.2f",
    "best test %": "%.2f",
    "Δ vs paper": "%+.2f",
    "wall time s": "%.1f",
    "s / epoch": "%.3f",
    "Z/U memory MiB": "%.3f",
}
TABLE_PLACEHOLDER_PX = 250  # about the data grid of the default 6 runs, so the page does not jump


def placeholders(rows: int, cols: int = 2, height: int = C.OVERLAY_HEIGHT) -> None:
    """Boxes where the charts will be, so the page does not jump when they come."""
    for _ in range(rows):
        for col in st.columns(cols):
            col.container(height=height, border=True).caption("Drawing the chart…")


@st.fragment(key="cmp_parallel")
def parallel_section(rows: list[dict], flat: list[dict], differ: list[str]) -> None:
    """Parallel coordinates, drawn once the page is (WebGL: the browser's slowest chart)."""
    if not FL.after_paint("cmp_parallel"):
        placeholders(1, 1, C.PARALLEL_HEIGHT)
        return
    st.plotly_chart(C.parallel_figure(rows, flat, differ), key="cmp_parcoords", config=ui.PLOTLY_CONFIG)


def gear_label(key: str, methods: list) -> str:
    """A compared setting by its Train form label ("m.lr" → "η — Θ step size", as the first of
    ``methods`` that has it names it); else its short name."""
    if key.startswith("m."):
        for m in methods:
            if key[2:] in (labels := F.method_labels(m)):
                return labels[key[2:]]
    elif key in F.BY_PATH and F.BY_PATH[key].label:
        return F.BY_PATH[key].label
    return X.setting_name(key)


@st.fragment(key="cmp_table_section")
def table_section(rows: list[dict], differ: list[str]) -> None:
    """The runs' table, with ⚙ columns for the settings that differ, and its CSV; drawn once the page
    is (Streamlit's data grid is a heavy chunk that delayed the controls)."""
    if not FL.after_paint("cmp_table_section"):
        st.container(height=TABLE_PLACEHOLDER_PX, border=True).caption("Drawing the table…")
        return
    table = pd.DataFrame(rows)
    methods = list(dict.fromkeys(r.get("method") for r in rows))
    gears = [f"⚙ {k}" for k in differ if k != "method"]  # the method has its own column
    paper = ["paper test %", "Δ vs paper", "paper"]
    lead = ["run", "name", "method", "status", "final test %", "best test %", *paper]
    order = lead + gears + [k for k in table.columns if k not in lead and not k.startswith("⚙ ")]
    # columns no run fills go: an empty name; paper figures none has ("paper", which says why, goes last)
    shown = [k for k in order if k != "name" or table[k].astype(bool).any()]
    none_paper = table["paper test %"].isna().all()
    if none_paper:
        shown = [k for k in shown if k not in paper] + ["paper"]
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        key="cmp_table",
        column_order=shown,
        placeholder="—",  # a value a run lacks (no evaluation yet, a setting its method has not)
        column_config={
            **{k: st.column_config.NumberColumn(format=f) for k, f in TABLE_FORMATS.items()},
            "paper test %": st.column_config.NumberColumn(
                format="%.2f",
                help="final test accuracy the paper reports for this preset and method; only for a run with the "
                "preset's data, sample limits, network, epochs and loss",
            ),
            "paper": st.column_config.TextColumn(help="whether this run's setup is the paper's, and what differs"),
            # not pinned: Streamlit draws a pinned column faded, like an index
            "run": st.column_config.TextColumn(help="the run's folder in the runs folder"),
            # the settings by the Train form's labels (the paper's symbol first); the code name in the help and the CSV
            **{g: st.column_config.Column(f"⚙ {gear_label(g[2:], methods)}", help=f"setting `{g[2:]}`") for g in gears},
        },
    )
    st.caption(
        f"⚙ columns: the settings that differ between the selected runs ({len(gears)}; a setting only one "
        "method's runs have, at one value, is left out); — : the run has no such value (an end-to-end method "
        "has no split). Click a header to sort. "
        "Paper figures (the paper's tables) are shown only for a run whose setup is the paper's"
        + (" (none here: the last column says why; the CSV has every column). " if none_paper else ". ")
        + "Memory is the size of the method's auxiliary state (Z, U and their moments); end-to-end methods keep none."
    )
    st.download_button(
        "Download table (CSV)",
        table[order].to_csv(index=False).encode(),
        icon=":material/download:",
        file_name="compare.csv",
        mime="text/csv",
        key="cmp_csv",
    )


@st.fragment(key="cmp_charts")
def charts_section(recs, x_key, log_y, acc_log, smoothing, group_by, spread) -> None:
    """The charts of the run records ``recs``, redrawn while one is live when a shown run writes a
    new evaluation or changes state, at most every REDRAW_EVERY_S (:mod:`dashboard.follow`)."""
    if not FL.after_paint("cmp_charts"):  # the controls above are drawn first
        placeholders(2 if any(run_kind(r["config"] or {}, r.get("status")) != DEEPFACTO for r in recs) else 1)
        return
    dirs = [r["dir"] for r in recs]
    stamp = _stamp(dirs)
    nets, faces = [], []  # DeepFacto runs get their own charts: verification accuracy, per epoch
    cfgs = [r["config"] or {} for r in recs]
    legends = X.legend_labels(cfgs, [r["meta"]["name"] for r in recs])  # what differs
    grouped = group_by != "nothing"
    groups = X.group_labels(cfgs, [r["meta"]["tags"] for r in recs], group_by) if grouped else [""] * len(recs)
    for r, cfg, legend, group in zip(recs, cfgs, legends, groups):
        item = X.Series(r["name"], legend, read_metrics(r["dir"]), group)
        (faces if run_kind(cfg, r.get("status")) == DEEPFACTO else nets).append(item)

    runs = {"nets": nets, "faces": faces}
    charts = [(name, c) for name, c in X.COMPARE_CHARTS.items() if runs[c.runs]]
    for i in range(0, len(charts), 2):
        if charts[i][1].runs == "faces" and (i == 0 or charts[i - 1][1].runs == "nets"):
            st.markdown("**DeepFacto runs** (per epoch: one iteration over their training images)")
        for col, (name, c) in zip(st.columns(2), charts[i : i + 2]):
            title = c.title + ((" (block mean)" if grouped else " (dash = block)") if c.key == "residuals" else "")
            look = C.Overlay(x_key, smoothing, acc_log if c.percent else log_y, title, c.percent, max_points=MAX_POINTS)
            items = runs[c.runs]
            if not grouped:
                fig = C.compare_figure([(s.legend, s.metrics) for s in items], c.key, look)
            else:
                by_group: dict[str, list] = {}
                for s in items:
                    by_group.setdefault(s.group, []).append(s.metrics)
                fig = C.group_figure(list(by_group.items()), c.key, look, spread)
            col.plotly_chart(fig, key="cmp_" + name.replace(" ", "_"), config=ui.PLOTLY_CONFIG)
    st.download_button(
        "Download the charts' data (CSV)",
        # built on the click: on every redraw of a live chart it was a pass over every line
        lambda: X.compare_csv(nets, faces, x_key),
        icon=":material/download:",
        file_name="compare-series.csv",
        mime="text/csv",
        key="cmp_series_csv",
    )
    if any((s or (0, 0, None))[2] in ui.ACTIVE for s in stamp):
        st.caption(f":green-badge[live] redrawn every {REDRAW_EVERY_S:g} s while a shown run writes new evaluations")
        FL.follow("cmp_charts", lambda: _stamp(dirs), stamp, every=REDRAW_EVERY_S)


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

    c = st.columns([1, 1.6, 1.1, 1.3])
    facets = {
        "cmp_data": ("Data set", R.data_of),
        "cmp_methods": ("Method / kind", lambda r: X.run_kind(r["config"])),
        "cmp_states": ("Status", lambda r: r["status"].get("state", "unknown")),
    }
    sel = {}
    for col, (key, (label, of)) in zip(c, facets.items()):
        values = sorted({of(r) for r in runs})
        # wrap: in a column the chips otherwise stay on one row and the last is cut ("block-adm…")
        sel[key] = col.multiselect(label, values, default=values, key=key, wrap=True)
    text = c[3].text_input("Filter (name, tags, note…)", key="cmp_filter")
    by_id = {r["name"]: r for r in runs}
    pool = [r for r in runs if all(of(r) in sel[k] for k, (_, of) in facets.items()) and M.matches(r, text)]
    names = [r["name"] for r in pool]
    if "cmp_runs" not in ss:  # a new session: the link's pick, else the last visit's, else the newest
        pick = _first_pick(list(by_id))
        ss["cmp_default"] = pick is None
        ss["cmp_runs"] = pick if pick is not None else names[: min(MAX_DEFAULT, len(names))]
    # picked runs stay picked while a filter hides them from the pool
    options = names + [n for n in ss["cmp_runs"] if n not in names and n in by_id]
    ss["cmp_runs"] = [n for n in ss["cmp_runs"] if n in by_id]
    st.multiselect(
        "Runs",
        options,
        key="cmp_runs",
        on_change=_on_pick,
        format_func=lambda n: ui.run_label(by_id[n]),
    )
    if ss.get("cmp_default"):
        st.caption(
            f"Nothing picked yet: the {len(ss['cmp_runs'])} newest runs. Your pick stays as you make it "
            "(in the link and for your next visit); new runs are added to the menu, not to the pick."
        )
    _mirror_selection()
    chosen = ss["cmp_runs"]
    if not chosen:
        st.info("Pick at least one run.")
        return

    c = st.columns([1.2, 1.6, 2])
    x_axis = c[0].radio("x axis", ["epoch", "wall time"], horizontal=True, key="cmp_x")
    with c[1]:  # one above the other, each label whole (side by side at 1280 px: "log-scale loss / …")
        log_y = st.toggle("log-scale loss / residuals", value=True, key="cmp_log", wrap=True)
        acc_log = st.toggle("log-scale accuracy", value=False, key="cmp_acc_log", wrap=True)
    smoothing = c[2].slider("Smoothing (moving average weight)", 0.0, 0.95, 0.0, 0.05, key="cmp_smooth")
    x_key = "wall_time_s" if x_axis == "wall time" else "epoch"
    cfgs = [by_id[n]["config"] or {} for n in chosen]
    c = st.columns([1.2, 1, 2.8])
    group_by = c[0].selectbox(
        "Group runs by",
        X.group_options(cfgs),
        key="cmp_group",
        format_func=C.group_option_label,
        help="One line per group: the mean of its runs, in a band of ± one standard deviation or min to max. "
        "'seeds' pools the runs alike in every setting but the seed; 'method × lr' the runs of one method "
        "and one learning rate. Only a setting alone or a tag pools different methods. A group whose runs differ "
        "in more than the seed says so in its legend ('pools epochs 6 / 20'); n is the number of runs at each x "
        "(in the hover; a range in the legend where runs end or begin at different x).",
    )
    spread = c[1].radio("Band", ["std", "range"], horizontal=True, key="cmp_spread", disabled=group_by == "nothing")
    recs = [by_id[n] for n in chosen]
    charts_section(recs, x_key, log_y, acc_log, smoothing, group_by, spread)
    rows, differ = X.compare_table(recs, [read_metrics(r["dir"]) for r in recs], PAPER)
    st.subheader("Table")
    table_section(rows, differ)
    st.subheader("Settings against final accuracy")
    if len(chosen) < 2 or not differ:
        st.caption("Pick two or more runs whose settings differ to see them in parallel coordinates.")
    else:
        parallel_section(rows, [X.settings_of(cfg) for cfg in cfgs], differ)


main()
