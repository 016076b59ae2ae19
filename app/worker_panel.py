"""Under the Train page's live panel, in a fragment of its own: a notice when the watched run ends,
and the worker's CPU and memory ("Worker: CPU, memory"). Redrawn when its stamp changes (the watched
run, its state and, only while the section is open, ``system.jsonl``'s size and mtime): a closed
section builds and sends no figure, so it adds nothing to an idle tab.
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
    box["id"] = watched  # set before a full rerun read ?run= (a link, a reload)
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
            icon = ":material/check_circle:" if state == "finished" else ":material/warning:"
            st.toast(text, icon=icon, duration="long")
        notice = ss.get("run_notice")
        if notice and notice[0] == watched and notice[1] == state:  # until the run changes again
            (st.success if state == "finished" else st.warning)(notice[2])
        exp = st.expander("Worker: CPU, memory", key=OPEN_KEY, on_change="rerun")
        if exp.open:
            with exp:
                _system_chart(run_dir, watched)
    FL.follow(KEY, lambda: _stamp(root, box, watched, open_), stamp, every=ASK_EVERY_S)


def _system_chart(run_dir: Path, watched: str) -> None:
    if not (samples := S.read_system(run_dir)):
        st.caption("No samples: the worker writes `system.jsonl` (runs from before this dashboard have none).")
        return
    st.plotly_chart(S.system_figure(samples, watched), key=f"worker-{watched}", config=ui.PLOTLY_CONFIG)
    last, mb = samples[-1], lambda k: f"{(last.get(k) or 0) / S.MB:.0f} MB"
    cpu = last.get("cpu_percent") if last.get("cpu_percent") is not None else "—"
    gpu = f" · GPU {mb('gpu_allocated_bytes')}" if "gpu_allocated_bytes" in last else ""
    st.caption(
        f"{len(samples)} samples (every few seconds and at each epoch) · last: CPU {cpu} % · RSS {mb('rss_bytes')}{gpu}"
    )
