"""Runs: every run directory with its status, name, tags and size; details of the picked run.

The table and the details are drawn from one list of run records in one fragment, so they never
disagree. The picked run is the dashboard's one selection (by id, ``?run=``), shared with Train.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from pathlib import Path

import pandas as pd
import streamlit as st

from admm_core import runs as R
from admm_core.errors import ConfigError
from admm_core.rundir import file_stamp, read_metrics_cached
from admm_core.spec.config import RunConfig
from admm_core.spec.resources import human as human_bytes
from app import ui
from app.dashboard import archive as AR
from app.dashboard import charts as C
from app.dashboard import follow as FL
from app.dashboard import meta as M
from app.dashboard import workers as W

ss = st.session_state


def _when(ts) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def _moment(ts) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts) if isinstance(ts, (int, float)) and ts else None


# the table's width decides these: up to "updated" it fits a 1280-px window (the details give what is left out)
TABLE_TIME = "MMM D HH:mm"  # to the minute, no year (the details give the whole date)
SPARSE = ("name", "tags", "preset", "error", "note")  # shown only where some run of the page has a value
# no "started" on screen (the details give it): a stamped id begins with it
ORDER = ("run", "status", "data", "method", "preset", "epoch", "test %", "duration", "updated")
ORDER += ("name", "tags", "size", "error", "note")
TEXT_PX = 220  # a free text's column (name, tags, error, note): the rest of it in the cell's tooltip


def _do_delete(name):
    try:
        W.delete_run(ui.runs_root() / name)
        ss["notice"] = f"Deleted {name}."
        if ss.get("watch") == name:
            ui.watch(None)
    except (RuntimeError, OSError) as e:
        ss["notice"] = f"Not deleted: {e}"


def _do_save_meta(name):
    try:
        M.write_meta(ui.runs_root() / name, *(ss.get(f"meta_{k}.{name}", "") for k in ("name", "tags", "note")))
        ss[f"meta_said.{name}"] = ("ok", "Saved.")  # said beside the button, not at the page's top
    except (ConfigError, OSError) as e:
        ss[f"meta_said.{name}"] = ("error", f"Not saved: {e}")


PAGE_SIZE = 50  # rows drawn at once: a folder of a thousand runs is paged, not drawn whole


def _size(r: dict) -> str:
    """On disk: an ended run's size is kept until its status changes, a live run's measured each time."""
    st_ = r["status"]
    return human_bytes(
        R.dir_size(r["dir"], None if st_.get("state") in ui.ACTIVE else (st_.get("state"), st_.get("updated")))
    )


def _page(runs: list[dict]) -> list[dict]:
    """The rows of the page picked under the table."""
    if len(runs) <= PAGE_SIZE:
        return runs
    pages = -(-len(runs) // PAGE_SIZE)
    c = st.columns([1, 4])
    k = c[0].number_input("Page", min_value=1, max_value=pages, value=1, step=1, key="runs_page")
    first = (int(k) - 1) * PAGE_SIZE
    c[1].caption(
        f"runs {first + 1}–{min(first + PAGE_SIZE, len(runs))} of {len(runs)}, newest first; the filter searches all"
    )
    return runs[first : first + PAGE_SIZE]


def table(runs: list[dict]) -> str | None:
    """The runs table; returns the run whose row was just clicked (None if none)."""
    rows = []
    for r in runs:
        cfg, st_, meta = r["config"] or {}, r["status"], r["meta"]
        rows.append(
            {
                "run": r["name"],
                "name": meta["name"],
                "tags": ", ".join(meta["tags"]),
                "status": R.state_label(st_.get("state")),
                "data": R.data_of(r),
                "method": R.method_of(r),
                "preset": cfg.get("preset") or "",
                "epoch": R.epochs_text(r),
                "test %": R.last_test(r),
                "size": _size(r),
                "started": _moment(R.started_at(st_)),
                "duration": R.duration_text(st_),
                "updated": _moment(st_.get("updated")),
                "error": st_.get("error") or "",
                "note": meta["note"],
            }
        )
    # a click on a row picks that run; keyed by the selection's generation, so after the pick the
    # table is a new widget without a selection (the details below show the pick)
    shown = [k for k in ORDER if k not in SPARSE or any(row[k] for row in rows)] if rows else None
    df = pd.DataFrame(rows)
    if rows:
        df["run"] = df["run"].map(ui.short_id)  # the click is read from rows[], by position: their ids stay whole
    event = st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        key=f"runs_table.{ss.get(ui.WATCH_GEN, 0)}",
        on_select="rerun",
        selection_mode="single-row",
        column_order=shown,
        column_config={
            # not pinned: Streamlit draws a pinned column faded like an index
            "run": st.column_config.TextColumn(
                help=f"the run's folder in the runs folder (one over {ui.ID_CHARS} characters shortened: its start "
                "stamp and its trial or seed; the details below give it whole)"
            ),
            **{k: st.column_config.DatetimeColumn(format=TABLE_TIME) for k in ("started", "updated")},
            **{k: st.column_config.TextColumn(width=TEXT_PX) for k in ("name", "tags", "error", "note")},
            "test %": st.column_config.NumberColumn(format="%.2f", help="final, or the last evaluation while it runs"),
            "duration": st.column_config.TextColumn(
                help="from its start (a resumed run: its resume) to its end or now"
            ),
        },
    )
    picked = [rows[i]["run"] for i in (event.selection.rows if event else []) if i < len(rows)]
    return picked[0] if picked else None


def details(r: dict) -> None:
    name, run_dir, status, cfg = r["name"], r["dir"], r["status"], r["config"] or {}
    state = status.get("state", "unknown")
    c = st.columns([2, 3])
    with c[0]:
        title = r["meta"]["name"] or name
        st.markdown(f"#### {ui.state_md(state)} {title}")  # h3 broke "digits-block-admm-s0" at 1280 px
        st.write(
            f"epoch {R.epochs_text(r, ' of ')} · started {_when(R.started_at(status))} · "
            + (f"resumed {_when(status.get('started'))} · " if status.get("first_started") else "")
            + f"updated {_when(status.get('updated'))}"  # "started": not a column of the table
        )
        pid = f" · worker pid {status['pid']}" if status.get("pid") and state in ui.ACTIVE else ""  # live runs only
        st.caption(f"id `{name}`{pid} · {_size(r)} on disk · `{run_dir}`")
        if state in ui.FAILED:
            st.error(f"{state.capitalize()}: {status.get('error')}")
            if tail := W.error_tail(run_dir, 4000):
                with st.expander("error output"):
                    st.code(tail)
        b = st.columns([1.2, 1.2])
        with b[0]:
            ui.resume_controls(r, "runs")
        with b[1]:
            # a link, not a button with a page switch: a switch from this auto-refreshing fragment
            # sometimes left the browser on /runs with Train's form shown and its URL unwritten
            with st.container(key="runs_load_link"):  # drawn as a button (CSS in main())
                st.page_link(
                    ui.TRAIN_PAGE,
                    label="Load into Train",
                    icon=":material/upload:",
                    query_params={ui.LOAD_PARAM: name},
                    disabled=not cfg,
                    width="stretch",
                    help="Put this run's config into the Train form and watch this run there",
                )
        with st.expander("Name, tags and note", expanded=False):
            meta = r["meta"]
            st.text_input("Name", value=meta["name"], key=f"meta_name.{name}", max_chars=M.MAX_NAME)
            st.text_input("Tags (comma-separated)", value=", ".join(meta["tags"]), key=f"meta_tags.{name}")
            st.text_area("Note", value=meta["note"], key=f"meta_note.{name}", max_chars=M.MAX_NOTE, height=80)
            st.button("Save", key=f"meta_save.{name}", on_click=_do_save_meta, args=(name,))
            if said := ss.pop(f"meta_said.{name}", None):
                (st.success if said[0] == "ok" else st.error)(said[1])
        downloads(name, run_dir, cfg)
        with st.expander("Delete this run"):
            sure = st.checkbox(f"Yes, delete {name} and its files", key="runs_del_sure")
            st.button(
                "Delete",
                icon=":material/delete:",
                key="runs_delete",
                disabled=not sure or state in ui.ACTIVE,
                on_click=_do_delete,
                args=(name,),
            )
            if state in ui.ACTIVE:
                st.caption("Stop the run first.")
    with c[1]:
        metrics = read_metrics_cached(run_dir)
        if metrics:
            st.plotly_chart(C.accuracy_figure(metrics), key="runs_acc", config=ui.PLOTLY_CONFIG)
        with st.expander("Configuration", expanded=not metrics):
            full = full_config(cfg)
            if full is not cfg:
                st.caption("Every setting, those left at their defaults included (config.json records only the rest).")
            st.json(full)
        if r.get("summary"):
            with st.expander("summary.json"):
                st.json(r["summary"])


def downloads(name: str, run_dir: Path, cfg: dict) -> None:
    """The run as a zip, its checkpoint, its config and its metrics, each read on the click."""
    root = ui.runs_root()
    try:  # the run as a path: a plain name, no link, inside the allowed root (else nothing is offered)
        W.run_path(root, name)
        inside = True
    except PermissionError:
        inside = False
    ckpt_size = _checkpoint_size(run_dir) if inside else None

    def button(place, label, data, file, mime, key, icon=":material/download:", **kw):
        place.download_button(
            label, data, icon=icon, file_name=f"{name}{file}", mime=mime, key=key, width="stretch", **kw
        )

    button(  # a row each: the checkpoint's label carries its size
        st,
        "Whole run (.zip)" if inside else "Whole run (.zip): not offered, a link out of the runs folder",
        lambda: _read_or_empty(AR.run_zip, root, name),  # built on the click, in memory
        ".zip",
        "application/zip",
        "runs_dl_zip",
        icon=":material/folder_zip:",
        disabled=not inside,
        help="config, metrics, status, summary, name and tags, logs, TensorBoard event files; "
        "the checkpoint is its own download",
    )
    button(
        st,
        "checkpoint.pt" + (" (none)" if ckpt_size is None else f" ({human_bytes(ckpt_size)})"),
        lambda: _read_or_empty(AR.checkpoint_bytes, root, name),
        "-checkpoint.pt",
        "application/octet-stream",
        "runs_dl_ckpt",
        disabled=ckpt_size is None,
        help="what Resume continues from: torch.load(path, weights_only=True) reads it",
    )
    d = st.columns(2)
    button(d[0], "config.json", json.dumps(cfg, indent=2), "-config.json", "application/json", "runs_dl_cfg")
    metrics = lambda: _read_or_empty((run_dir / "metrics.jsonl").read_bytes)  # read on the click
    button(d[1], "metrics.jsonl", metrics, "-metrics.jsonl", "application/x-ndjson", "runs_dl_metrics")


def full_config(cfg: dict) -> dict:
    """The run's whole setup: config.json with the method's settings left at their defaults written
    out too (config.json keeps only those given); config.json itself where it does not read."""
    try:
        run = RunConfig.from_dict(cfg)
    except (ConfigError, TypeError, ValueError):
        return cfg
    return {**run.to_dict(), "method_params": dataclasses.asdict(run.method_settings)}


def _checkpoint_size(run_dir: Path) -> int | None:
    ckpt = run_dir / AR.CHECKPOINT
    try:
        return None if ckpt.is_symlink() else ckpt.stat().st_size
    except OSError:  # none (yet), or gone meanwhile
        return None


def _read_or_empty(read, *args) -> bytes:
    """A download's bytes, read on the click; b"" when the run went meanwhile (deleted, or its folder refused)."""
    try:
        return read(*args)
    except OSError:  # PermissionError (refused), FileNotFoundError (deleted) among them
        return b""


KEY = "runs_panel"  # the fragment's key
ASK_EVERY_S = 1.0  # the page asks for the stamp (a stat per run) this often, so it redraws at most this often


def runs_stamp(root: str | Path, live: frozenset) -> tuple:
    """What the Runs page shows, cheaply: the runs folder's listing and each run directory's mtime
    (an atomic rewrite changes it), except for the runs ``live`` at the last draw, whose status.json
    is rewritten every 0.5 s: for them what their row shows. A stat per run (plain strings: cheaper
    than pathlib)."""
    root = str(root)
    try:
        with os.scandir(root) as it:
            names = sorted(e.name for e in it)
    except OSError:
        return (root, None)
    out: list = [root, file_stamp(root)]
    for n in names:
        d = os.path.join(root, n)
        if n in live:
            status = W.state_of(d)
            shown = status.get("state"), R.run_done_epochs(Path(d), status), R.last_eval(Path(d)), status.get("error")
            out.append((n, *shown, file_stamp(os.path.join(d, "meta.json"))))
        else:
            out.append((n, file_stamp(d)))
    return tuple(out)


@st.fragment(key=KEY)
def runs_panel() -> None:
    """The table and the picked run's details, redrawn when :func:`runs_stamp` differs from the drawn
    one (asked every ASK_EVERY_S by :mod:`app.dashboard.follow`)."""
    root = str(ui.runs_root())
    before = ss.get("runs_live", frozenset())
    stamp = runs_stamp(root, before)  # before reading: a change while drawing redraws again
    runs = ui.list_runs()  # one read: the table and the details show the same records
    live = frozenset(r["name"] for r in runs if r["status"].get("state") in ui.ACTIVE)
    ss["runs_live"] = live
    if live != before:  # a run started or ended: stamped by other files now, redraw once more
        stamp = None
    _runs_body(runs)
    FL.follow(KEY, lambda: runs_stamp(root, live), stamp, every=ASK_EVERY_S)  # last: no gap above the table


def _runs_body(runs: list[dict]) -> None:
    if not runs:
        ui.show_notice()
        st.info("No runs yet. Start one on the Train page or with `python -m admm_core train --preset digits-mlp`.")
        return
    shown = [r for r in runs if M.matches(r, ss.get("runs_filter", ""))]
    page = _page(shown)
    clicked = table(page)
    ui.show_notice()
    by_name = {r["name"]: r for r in shown}
    picked = ui.watched()
    names = [r["name"] for r in page] + (
        [picked] if picked in by_name and picked not in {r["name"] for r in page} else []
    )
    # no on_change (a refresh carrying a stale value re-fired it, as on Train); the key carries the
    # selection's generation, so the menu is a new widget showing the run picked anywhere else
    chosen = st.selectbox(
        "Details of run",
        names,
        index=names.index(picked) if picked in by_name else None,
        key=f"runs_sel.{ss.get(ui.WATCH_GEN, 0)}",
        placeholder="Pick a run",
        format_func=lambda n: ui.run_label(by_name[n]),
    )
    new = clicked if clicked and clicked != picked else chosen if chosen and chosen != picked else None
    if new:
        ui.watch(new)
        st.rerun()  # the whole page: it writes ?run= and redraws the table without a selection
    if picked not in by_name:
        st.caption(
            "Pick a run to see its details."
            if picked is None
            else f"`{picked}` is not in this list (filter or folder)."
        )
        return
    details(by_name[picked])


def main() -> None:
    st.title("Runs")
    st.caption(
        f"Run directories in `{ui.runs_root()}` — started here, from the CLI or from a notebook. "
        "A crashed or diverged run is shown with its error."
    )
    st.text_input(
        "Filter",
        key="runs_filter",
        placeholder="words in the id, name, tags, note, method, data set or preset",
    )
    if picked := ui.watched():
        st.query_params["run"] = picked
    # Load into Train is a link (a real navigation, see docs/dashboard.md): give it a button's frame
    st.html(
        "<style>.st-key-runs_load_link a{border:1px solid rgba(128,128,128,.45);border-radius:.5rem;"
        "justify-content:center;padding:.3rem .75rem;min-height:2.5rem}"
        ".st-key-runs_load_link a:hover{border-color:currentColor}</style>"
    )
    runs_panel()


main()
