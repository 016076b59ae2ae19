"""How a fragment follows files on disk: the browser asks, the component reports, Streamlit reruns.

A fragment takes a cheap *stamp* of the files it read (a few ``stat`` calls) and ends with
:func:`follow`: a zero-height component (``follow/index.html``) asks the stamp route
(``GET {ROUTE}/<token>``, mounted by app/serve.py) every ``every`` seconds and, when the stamp is not
the drawn one, sets its value, which reruns the fragment. So an unchanged tab costs one small HTTP
answer per period, nothing in the server runs on a timer, and every rerun is one the browser asked
for once it had drawn the page (a rerun pushed into a tab still drawing blanked it:
docs/reliability.md, "The blank tab"). :func:`after_paint` is the same component answering once the
browser has painted the page. Without the routes (AppTest, ``streamlit run``) nothing follows and
:func:`after_paint` says "now".
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.dashboard import tail
from app.dashboard.live import digest

ROUTE = "/api/admm/stamp"
ENV = "ADMM_ROUTES_MOUNTED"  # set by routes() in app/serve.py's process: the pages may use them
# a token nobody asked for this long is forgotten (its tab closed); a page that comes back gets a new one
FORGET_S = 600.0
_FOLDER = Path(__file__).with_name("follow")
_TOKENS = "follow.tokens"  # session state: fragment key -> this tab's token for it
_PAINTED = "follow.painted"  # session state: the fragments whose sentinel has answered

_lock = threading.Lock()
_stamps: dict[str, list] = {}  # token -> [stamp function, when last asked or granted (monotonic)]
_component = None


def routes() -> list:
    """The dashboard's read-only routes (app/serve.py): the live charts' lines and the stamps."""
    from starlette.routing import Route

    os.environ[ENV] = "1"  # the pages run in this process
    return [
        Route(tail.ROUTE + "/{token}", tail.endpoint, methods=["GET"]),
        Route(ROUTE + "/{token}", endpoint, methods=["GET"]),
    ]


def available() -> bool:
    return os.environ.get(ENV) == "1"


def component():
    global _component
    if _component is None:
        from streamlit.components.v1 import declare_component

        _component = declare_component("admm_follow", path=str(_FOLDER))
    return _component


def grant(key: str, stamp_fn: Callable[[], object]) -> str:
    """This tab's token for fragment ``key``, now standing for ``stamp_fn`` (called in the route)."""
    import streamlit as st

    token = st.session_state.setdefault(_TOKENS, {}).setdefault(key, secrets.token_urlsafe(16))
    register(token, stamp_fn)
    return token


def register(token: str, stamp_fn: Callable[[], object]) -> None:
    """``token`` stands for ``stamp_fn`` from now on; tokens not asked for FORGET_S are forgotten."""
    now = time.monotonic()
    with _lock:
        for t in [t for t, (_, asked) in _stamps.items() if now - asked > FORGET_S]:
            del _stamps[t]
        _stamps[token] = [stamp_fn, now]


def answer(token: str) -> bytes | None:
    """The digest of the stamp now; None for an unknown token (a 404), b"" when it failed (a 503)."""
    with _lock:
        entry = _stamps.get(token)
        if entry is not None:
            entry[1] = time.monotonic()
    if entry is None:
        return None
    try:
        stamp = entry[0]()
    except Exception:  # noqa: BLE001 - a folder vanishing meanwhile: the page asks again next period
        return b""
    return json.dumps({"stamp": digest(stamp)}).encode()


async def endpoint(request):  # the stamp functions stat files: off the event loop
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response

    out = await run_in_threadpool(answer, request.path_params["token"])
    if out is None:
        return Response("unknown token", status_code=404, media_type="text/plain")
    if not out:
        return Response("try again", status_code=503, media_type="text/plain")
    return Response(out, media_type="application/json", headers={"Cache-Control": "no-store"})


def follow(key: str, stamp_fn: Callable[[], object], drawn: object, every: float = 1.0) -> None:
    """Rerun the calling fragment when ``stamp_fn()`` is no longer ``drawn`` (what it just drew; None:
    once more at once), asked every ``every`` s, never sooner after a drawing. Call it inside the
    fragment, on every drawing; without the routes it does nothing."""
    if not available():
        return
    component()(
        route=ROUTE,
        token=grant(key, stamp_fn),
        drawn="" if drawn is None else digest(drawn),
        every_ms=int(1000 * every),
        key=f"follow.{key}",
        default=None,
    )


def after_paint(key: str) -> bool:
    """May the fragment ``key`` (called from inside it) draw its heavy elements now? True once the
    browser has painted the page around its first drawing (a sentinel then answers, which reruns it);
    before, the caller draws placeholders. ``ADMM_DASH_CHARTS_AFTER_PAINT=0``: always (the ablation
    of experiments/first_paint.py)."""
    if not available() or os.environ.get("ADMM_DASH_CHARTS_AFTER_PAINT") == "0":
        return True
    import streamlit as st

    done = st.session_state.setdefault(_PAINTED, set())
    answer_key = f"follow.{key}.painted"
    if key in done or st.session_state.get(answer_key):
        done.add(key)
        return True
    component()(paint=True, key=answer_key, default=None)
    return False
