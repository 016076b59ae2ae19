"""Charts after controls: a fragment's plotly charts are sent once the browser has drawn the page.

Streamlit loads its plotly code (a 4.7 MB chunk) when the first chart arrives, and evaluating it
and drawing the charts holds the browser's main thread for 1–2 s on a loaded 2-core machine.
Sent in the same run as the controls above them, the charts decided when anything was shown:
Compare's run picker appeared with its first chart, 3.2 s after the navigation with nothing else
running (docs/reliability.md, "First paint"). Here a tab's first draw of such a fragment sends a
sentinel instead (a zero-height component, ``painted/index.html``): it answers two animation
frames after it is rendered, i.e. once the frame with the controls has been painted, and its
answer reruns the fragment, which then draws, and the push thread reruns the tab's other waiting
fragments. Where no answer comes (no script, an old browser), the push thread reruns them after
``BACKSTOP_S``. Without push (AppTest, other
Streamlit internals) the fragment draws at once, and so it does with ``ADMM_DASH_CHARTS_AFTER_PAINT=0``
(the ablation row of ``experiments/first_paint.py``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import streamlit as st

from app.dashboard import push as P

BACKSTOP_S = 5.0  # the fragment draws this long after the first ask even if no sentinel answers
_TAB = "painted"  # session state: {"answered": bool, "asked": {fragment key: time}, "done": {fragment keys}}
_FOLDER = Path(__file__).with_name("painted")
_component = None


def sentinel():
    """The declared component (its folder ships with the app)."""
    global _component
    if _component is None:
        from streamlit.components.v1 import declare_component

        _component = declare_component("admm_painted", path=str(_FOLDER))
    return _component


def ready(fragment_key: str) -> bool:
    """May the fragment ``fragment_key`` (called from inside it) draw its charts now?

    True once the browser has painted the tab (its first sentinel answered, or ``BACKSTOP_S``
    passed), and from then on: a filter's rerun, a live redraw (plotly is loaded by then). False
    before: the caller draws light placeholders and returns. A fragment that waits is rerun by the
    push thread as soon as any of the tab's sentinels has answered (one answer is enough: the tab
    has been painted; Streamlit reran only the first of two fragments whose sentinels answered in
    the same frame, and the second waited for its backstop)."""
    if os.environ.get("ADMM_DASH_CHARTS_AFTER_PAINT", "1") == "0":
        return True
    ss = st.session_state
    # a plain dict: the push thread reads it (session state may only be read in the page's run)
    tab = ss.setdefault(_TAB, {"answered": False, "asked": {}, "done": set()})
    if fragment_key in tab["done"]:
        return True
    answer = f"{_TAB}.{fragment_key}.answer"
    tab["answered"] = tab["answered"] or bool(ss.get(answer))
    first = fragment_key not in tab["asked"]
    asked = tab["asked"].setdefault(fragment_key, time.monotonic())

    def due() -> bool:
        return tab["answered"] or time.monotonic() - asked >= BACKSTOP_S

    if due():
        tab["done"].add(fragment_key)
        P.unsubscribe(fragment_key)  # nothing to wait for any more
        return True
    # the push subscription doubles as the test for push: without it nothing would rerun the fragment
    if first and not P.subscribe(fragment_key, lambda: "draw" if due() else "wait", "wait"):
        tab["done"].add(fragment_key)
        return True
    sentinel()(key=answer, default=False)
    return False


_GATE = "paint_gate"  # session state: {"page": the page of the last full run, "acked": drawn, "n": sentinels used}


@st.fragment
def gate(page: str) -> None:
    """Hold the tab's pushes (:func:`app.dashboard.push.hold`) from a full run of a page the tab
    has not drawn yet (a new tab; a move to another page, or back) until a sentinel here answers
    (the browser has drawn the page), then release them. ``page``: the page's URL path. Called at
    the end of every full run (app/main.py); the answer reruns only this fragment (with the same
    ``page``), and once the page is drawn it draws nothing. Without push (AppTest,
    ``ADMM_DASH_PUSH=0``) it does nothing."""
    if not P.ENABLED:
        return
    state = st.session_state.setdefault(_GATE, {"page": None, "acked": False, "n": 0})
    if state["page"] != page:  # a sentinel of its own: an answer for the page before is not this one's
        state.update(page=page, acked=False, n=state["n"] + 1)
    if state["acked"]:
        return
    key = f"{_GATE}.{state['n']}"
    if st.session_state.get(key):  # the answer: drawn
        state["acked"] = True
        P.release()
        return
    if P.hold():
        sentinel()(key=key, default=False)
