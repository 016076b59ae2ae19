"""Under the Train page's live panel: a notice when the watched run ends, and the worker's CPU
and memory as a chart ("Worker: CPU, memory"), in a fragment of its own.

Redrawn when its stamp changes (the follow component asks the dashboard's route for it:
:mod:`app.dashboard.follow`): the watched run, its state and, only while the section is open, the
size and mtime of ``system.jsonl``. A closed section builds and sends no figure (its expander reruns
the fragment when opened), so it adds nothing to an idle tab.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from admm_core.rundir import file_stamp
from app import ui
from app.dashboard import follow as FL
from app.dashboard import system as S
from app.dashboard import workers as W

ss = st.session_state
KEY = "worker"  # the fragment's key
OPEN_KEY = "worker_open"  # the expander's state


def _stamp(root: str, box: dict, watched: str | None, open_: bool) -> tuple:
    """Cheap: the watched run (as the live panel set it last, which may be after this panel's last
    drawing), its state, and system.jsonl (size, mtime) while the section is open."""
    run = box.get("id", watched)
    if not run:
        return (run,)
    run_dir = Path(root) / run
    return (run, W.state_of(run_dir).get("state"), file_stamp(run_dir / "system.jsonl") if open_ else None)


ASK_EVERY_S = 0.5  # how often the page asks for the stamp (as the push thread did): a notice soon after the end


@st.fragment(key=KEY)
def worker_panel() -> None:
    """The notice line (and a toast, once per state change) and the worker's system chart."""
    root, watched = str(ui.runs_root()), ui.watched()
    box = ss.setdefault(ui.WATCH_BOX, {})
    box.setdefault("id", watched)
    if box["id"] != watched:  # set before a full rerun read ?run= (a link, a reload)
        box["id"] = watched
    open_ = bool(ss.get(OPEN_KEY))
    stamp = _stamp(root, box, watched, open_)
    if watched:
        run_dir = Path(root) / watched
        status = W.state_of(run_dir)
        state = status.get("state") or "unknown"
        seen = ss.setdefault("run_states_seen", {})  # run id -> the state this tab last saw
        if S.next_notice(seen, watched, state):
            text = S.notice_text(watched, state, status)
            ss["run_notice"] = (watched, state, text)
            # material icons: the system fonts lack the ✅ emoji (the toast showed an empty box)
            st.toast(
                text, icon=":material/check_circle:" if state == "finished" else ":material/warning:", duration="long"
            )
        notice = ss.get("run_notice")
        if notice and notice[0] == watched and notice[1] == state:  # until the run changes again
            (st.success if state == "finished" else st.warning)(notice[2])
        exp = st.expander("Worker: CPU, memory", key=OPEN_KEY, on_change="rerun")
        if exp.open:
            samples = S.read_system(run_dir)
            with exp:
                if samples:
                    st.plotly_chart(S.system_figure(samples, watched), key=f"worker-{watched}", config=ui.PLOTLY_CONFIG)
                    last = samples[-1]
                    st.caption(
                        f"{len(samples)} samples (every few seconds and at each epoch) · last: CPU "
                        f"{last.get('cpu_percent') if last.get('cpu_percent') is not None else '—'} % · RSS "
                        f"{(last.get('rss_bytes') or 0) / S.MB:.0f} MB"
                        + (
                            f" · GPU {last['gpu_allocated_bytes'] / S.MB:.0f} MB"
                            if "gpu_allocated_bytes" in last
                            else ""
                        )
                    )
                else:
                    st.caption(
                        "No samples: the worker writes `system.jsonl` (runs from before this dashboard have none)."
                    )
    FL.follow(KEY, lambda: _stamp(root, box, watched, open_), stamp, every=ASK_EVERY_S)
