"""Runs: every run directory with its status, config and size; stop, resume, delete, download."""

from __future__ import annotations

import datetime as dt
import json

import pandas as pd
import streamlit as st

from admm_core.runs import read_metrics
from app import ui
from app.dashboard import charts as C
from app.dashboard import workers as W

ss = st.session_state
st.title("Runs")
st.caption(
    f"Run directories in `{ui.runs_root()}` — started here, from the CLI or from a notebook. "
    "A crashed worker is shown with its last error."
)


def _when(ts) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def _do_stop(name):
    W.stop_run(ui.runs_root() / name)


def _do_resume(name, epochs):
    try:
        W.resume_run(ui.runs_root() / name, epochs)
    except RuntimeError as e:
        ss["runs_notice"] = str(e)


def _do_delete(name):
    try:
        W.delete_run(ui.runs_root() / name)
        ss["runs_notice"] = f"Deleted {name}."
    except (RuntimeError, OSError) as e:
        ss["runs_notice"] = f"Not deleted: {e}"


@st.fragment(run_every=2.0)
def run_table():
    runs = W.runs(ui.runs_root())
    if not runs:
        st.info("No runs yet. Start one on the Train page or with `python -m admm_core train --preset digits-mlp`.")
        return
    rows = []
    for r in runs:
        cfg, st_ = r["config"] or {}, r["status"]
        summ = r.get("summary") or {}
        rows.append(
            {
                "run": r["name"],
                "status": ui.state_label(st_.get("state")),
                "data": W.data_of(r),
                "method": W.method_of(r),
                "preset": cfg.get("preset"),
                "epoch": f"{st_.get('epoch', 0)}/{st_.get('epochs') or (cfg.get('train') or {}).get('epochs', '?')}",
                "test %": None if summ.get("test_accuracy") is None else round(100 * summ["test_accuracy"], 2),
                "size": W.human_bytes(W.dir_size(r["dir"])),
                "updated": _when(st_.get("updated")),
                "error": st_.get("error") or "",
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="runs_table")


run_table()
if ss.get("runs_notice"):
    st.info(ss.pop("runs_notice"))

runs = W.runs(ui.runs_root())
if not runs:
    st.stop()
names = [r["name"] for r in runs]
if ss.get("runs_sel") not in names:
    ss.pop("runs_sel", None)
name = st.selectbox(
    "Details of run",
    names,
    key="runs_sel",
    format_func=lambda n: f"{n} · {ui.state_label(next(r for r in runs if r['name'] == n)['status'].get('state'))}",
)
r = next(x for x in runs if x["name"] == name)
run_dir, status, cfg = r["dir"], r["status"], r["config"] or {}
state = status.get("state", "unknown")

c = st.columns([2, 3])
with c[0]:
    st.markdown(f"### {ui.state_md(state)}")
    st.write(f"epoch {status.get('epoch', 0)} of {status.get('epochs', '?')} · updated {_when(status.get('updated'))}")
    if status.get("pid"):
        st.caption(f"worker pid {status['pid']} · {W.human_bytes(W.dir_size(run_dir))} on disk · `{run_dir}`")
    if state == "crashed":
        st.error(f"Crashed: {status.get('error')}")
        err = run_dir / "error.txt"
        tail = err.read_text(errors="replace")[-4000:] if err.exists() else W.log_tail(run_dir)
        if tail:
            with st.expander("error output"):
                st.code(tail)
    b = st.columns(3)
    if state in ("running", "starting"):
        b[0].button("Stop", icon=":material/stop:", key="runs_stop", on_click=_do_stop, args=(name,))
    else:
        target = b[0].number_input(
            "epochs", min_value=1, value=int((cfg.get("train") or {}).get("epochs", 1)), key="runs_resume_epochs"
        )
        b[1].button(
            "Resume",
            icon=":material/play_arrow:",
            key="runs_resume",
            on_click=_do_resume,
            args=(name, target),
            disabled=state == "unknown",
        )
    if b[2].button("Load into Train", key="runs_load", disabled=not cfg):
        ui.load_into_train(cfg)
    d = st.columns(2)
    d[0].download_button(
        "config.json",
        json.dumps(cfg, indent=2),
        icon=":material/download:",
        file_name=f"{name}-config.json",
        mime="application/json",
        key="runs_dl_cfg",
    )
    metrics_path = run_dir / "metrics.jsonl"
    d[1].download_button(
        "metrics.jsonl",
        metrics_path.read_bytes() if metrics_path.exists() else b"",
        icon=":material/download:",
        file_name=f"{name}-metrics.jsonl",
        mime="application/x-ndjson",
        key="runs_dl_metrics",
    )
    with st.expander("Delete this run"):
        sure = st.checkbox(f"Yes, delete {name} and its files", key="runs_del_sure")
        st.button(
            "Delete",
            icon=":material/delete:",
            key="runs_delete",
            disabled=not sure or state in ("running", "starting"),
            on_click=_do_delete,
            args=(name,),
        )
        if state in ("running", "starting"):
            st.caption("Stop the run first.")
with c[1]:
    metrics = read_metrics(run_dir)
    if metrics:
        st.plotly_chart(C.accuracy_figure(metrics), key="runs_acc", config=ui.PLOTLY_CONFIG)
    with st.expander("config.json", expanded=not metrics):
        st.json(cfg)
    if r.get("summary"):
        with st.expander("summary.json"):
            st.json(r["summary"])
