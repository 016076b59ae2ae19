"""Server-side push for the live panel: rerun a session's fragment when its files change.

Streamlit only reruns a fragment when the browser asks (a widget, or ``run_every``'s timer),
and each such round trip costs the server tens of milliseconds of CPU even for a fragment that
draws nothing (about 24 % of a core at 4 polls a second on the loaded 2-core test machine).
Here one thread in the server process watches every subscribed tab's stamp (a few ``stat``
calls, :func:`app.dashboard.live.live_stamp`) every :data:`TICK_S`, less often the longer it has
not changed (:data:`QUIET_FRACTION`), and, on a change, asks that session to rerun that one
fragment, exactly as the browser's timer would. A tab on an unchanged or ended run then costs
next to nothing.

This uses Streamlit internals (the session manager, ``AppSession``'s script runner, pinned
streamlit==1.67.0): :func:`subscribe` returns False when they are not there, and the caller
falls back to a browser-polled watcher fragment.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

TICK_S = 0.1  # how often the thread compares a stamp that changed lately (stat calls only)
# A stamp unchanged for q seconds (since its fragment's last draw) is next asked after
# QUIET_FRACTION * q, at least TICK_S, at most QUIET_MAX_S: one whose fragment redraws every second
# is still asked every 0.1 s, a tab on a finished run (or on a live Train run whose charts fetch
# their own lines, so its stamp moves only with the state) once a second; a change is seen at most
# 5 % of the quiet time late, and never more than 1 s.
QUIET_FRACTION = 0.05
QUIET_MAX_S = 1.0

# A rerun pushed into a tab whose browser has not yet drawn the page it was just sent blanks the tab
# (issue 36): Streamlit's frontend compares a run's new_session with React state that is not yet
# committed, takes the fragment run for a new page and clears the page, and the fragment's next
# delta then fails ("Bad delta path index 7 (should be between [0, 6])"), which unmounts the whole
# app. A run the browser asks for itself cannot meet this: it asks after drawing. So after a
# session's first run of a page, its pushes wait until its browser has drawn it
# (:func:`app.dashboard.painted.gate` calls :func:`hold`, then :func:`release` on the sentinel's answer).
ENABLED = os.environ.get("ADMM_DASH_PUSH", "1") != "0"  # 0: the pages' browser-polled fallbacks instead
HOLD_MAX_S = 10.0  # a browser that never answers (no script) gets its pushes after this long

_lock = threading.Lock()
_subs: dict[tuple[str, str], dict] = {}  # (session id, fragment key) -> {fid, stamp_fn, stamp}
_held: dict[str, float] = {}  # session id -> until when (monotonic) its pushes wait for its browser
_thread: threading.Thread | None = None
_wake = threading.Event()  # set by subscribe: a new subscription is asked at the next tick


def throttled(fn: Callable[[], tuple], every: float) -> Callable[[], tuple]:
    """``fn`` called at most every ``every`` s, its last value in between: the push thread asks a
    stamp up to every 0.1 s, and a stamp may read status files, check a pid or stat a thousand runs."""
    last = [float("-inf"), None]

    def call():
        t = time.monotonic()  # taken before fn: an ask ``every`` s after the last one is not served stale
        if t - last[0] >= every - TICK_S / 2:
            last[1], last[0] = fn(), t
        return last[1]

    return call


def subscribe(fragment_key: str, stamp_fn: Callable[[], tuple], stamp: tuple, every: float = 0.0) -> bool:
    """Rerun the calling session's fragment ``fragment_key`` when ``stamp_fn()`` differs from
    ``stamp`` (what the fragment just drew). Call it from the fragment on every draw; a new
    call replaces the session's previous subscription. False when push is not available.

    ``every``: no rerun sooner than this many seconds after this draw, and ``stamp_fn`` is not
    asked before then. A :func:`throttled` stamp alone does not space redraws: each draw
    subscribes a fresh one, so four live runs writing several lines a second redrew a page as
    fast as it could draw (44 Compare redraws in 20 s, issue 36)."""
    try:
        from streamlit.runtime import Runtime
        from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

        ctx = get_script_run_ctx()
        fid = ctx.fragment_storage.resolve_target(fragment_key)[0]
        session = Runtime.instance()._session_mgr.get_active_session_info(ctx.session_id).session
        loop = session._event_loop
    except Exception:  # noqa: BLE001 - no runtime (AppTest) or moved internals: the caller polls
        return False
    with _lock:
        _subs[(ctx.session_id, fragment_key)] = {
            "fid": fid,
            "stamp_fn": stamp_fn,
            "stamp": stamp,
            "session": session,
            "loop": loop,
            "every": every,
            "drawn": time.monotonic(),
        }
        _ensure_thread()
    _wake.set()
    return True


def _session_id() -> str | None:
    """The calling session's id where push can reach it (as in :func:`subscribe`), else None."""
    try:
        from streamlit.runtime import Runtime
        from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

        sid = get_script_run_ctx().session_id
        Runtime.instance()._session_mgr.get_active_session_info(sid).session  # noqa: B018 - the check
        return sid
    except Exception:  # noqa: BLE001 - no runtime (AppTest) or moved internals: nothing is pushed
        return None


def hold(max_s: float = HOLD_MAX_S) -> bool:
    """Push nothing into the calling session until :func:`release` (its browser has drawn the page
    it is being sent) or ``max_s`` from now. False where there is no session (nothing is pushed)."""
    sid = _session_id()
    if sid is None:
        return False
    t = time.monotonic()
    with _lock:
        for k in [k for k, until in _held.items() if until <= t]:  # ended sessions' holds
            del _held[k]
        _held[sid] = t + max_s
    return True


def release() -> None:
    """The calling session's browser has drawn its page: pushes into it may go on."""
    sid = _session_id()
    with _lock:
        _held.pop(sid, None)
    _wake.set()


def _is_held(sid: str, t: float) -> bool:
    with _lock:
        return _held.get(sid, t) > t


def unsubscribe(fragment_key: str) -> None:
    """Stop pushing to the calling session's ``fragment_key`` (e.g. nothing watched)."""
    try:
        from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

        sid = get_script_run_ctx().session_id
    except Exception:  # noqa: BLE001
        return
    with _lock:
        _subs.pop((sid, fragment_key), None)


def _ensure_thread() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run, daemon=True, name="admm-live-push")
        _thread.start()


def _run() -> None:
    # Each wake-up costs the server about 0.4 ms of CPU on the 2-core test machine, so the thread
    # sleeps until the earliest subscription is next due (a new one wakes it at once).
    while True:
        _wake.wait(_next_wait())
        _wake.clear()
        with _lock:
            items = list(_subs.items())
        for key, sub in items:
            t = time.monotonic()
            if t < _next_ask(sub):
                continue
            if _is_held(key[0], t):  # its browser is still drawing the page: ask again at the next tick
                sub["next"] = t + TICK_S
                continue
            sub["next"] = t + min(QUIET_MAX_S, max(TICK_S, QUIET_FRACTION * (t - sub.get("drawn", t))))
            try:
                gone = not _alive(key[0])
                now = None if gone else sub["stamp_fn"]()
            except Exception:  # noqa: BLE001 - a vanished folder etc.: try again next tick
                sub["next"] = t + TICK_S
                continue
            if gone:
                with _lock:
                    if _subs.get(key) is sub:
                        del _subs[key]
                continue
            if now == sub["stamp"]:
                continue
            if sub["session"]._scriptrunner is None:  # never into a running run
                sub["stamp"] = now  # once per change; the redraw subscribes again with what it drew
                sub["loop"].call_soon_threadsafe(_rerun_fragment, sub, sub["session"], sub["fid"])
            else:
                sub["next"] = t + TICK_S  # a change waits: ask again soon


def _next_ask(sub: dict) -> float:
    """When the thread may next ask ``sub``'s stamp (monotonic time)."""
    return max(sub.get("next", 0.0), sub.get("drawn", 0.0) + sub.get("every", 0.0))


def _next_wait() -> float:
    """Seconds until the earliest subscription is due: at least TICK_S, at most QUIET_MAX_S."""
    with _lock:
        first = min((_next_ask(sub) for sub in _subs.values()), default=float("inf"))
    return min(QUIET_MAX_S, max(TICK_S, first - time.monotonic()))


def _alive(session_id: str) -> bool:
    from streamlit.runtime import Runtime

    return Runtime.instance().is_active_session(session_id)


def _rerun_fragment(sub: dict, session, fid: str) -> None:
    """On the server's event loop: what ``AppSession.request_rerun`` does for the browser's
    ``run_every`` timer, without widget states (the session keeps its own). Only into an idle
    session: a run in progress (the page's first full run, a click) is never interrupted; the
    thread tries again at its next tick."""
    from streamlit.runtime.app_session import AppSessionState
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

    if session._state == AppSessionState.SHUTDOWN_REQUESTED or not session.has_fragment(fid):
        return
    cs = session._client_state
    data = RerunData(
        query_string=cs.query_string,
        page_script_hash=cs.page_script_hash,
        fragment_id=fid,
        is_auto_rerun=True,
        cached_message_hashes=frozenset(cs.cached_message_hashes),
        context_info=cs.context_info if cs.HasField("context_info") else None,
    )
    if session._scriptrunner is not None:
        sub["stamp"], sub["next"] = None, 0.0  # busy now: the thread's next tick asks again
        _wake.set()
        return
    session._create_scriptrunner(data)
