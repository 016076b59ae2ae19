"""The live charts' data channel: a run's new metrics lines over one HTTP route (no Streamlit here).

Pushing each point through Streamlit cost a fragment rerun per open tab per point. Instead the live
charts' page asks ``GET {ROUTE}/{token}?n=&gen=`` (twice a second while the run is live, every 2 s
once it has ended) and gets the lines it lacks (:func:`admm_core.rundir.metrics_since`; a new
generation means start over), the panel's status and the digest of
:func:`app.dashboard.live.live_stamp`, which reruns the panel when it changes. The page never names
a path: :func:`grant` gives a random token per run directory (an unknown one is a 404).
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from pathlib import Path

from admm_core.compare import finite
from admm_core.rundir import metrics_since, read_json_dict
from admm_core.runs import done_epochs
from app.dashboard.live import digest, live_stamp, progress_text
from app.dashboard.workers import ACTIVE, state_of

ROUTE = "/api/admm/live"

_lock = threading.Lock()
_tokens: dict[str, str] = {}  # token -> run dir
_token_of: dict[str, str] = {}  # run dir -> token


def _clean(v):
    """NaN and ±inf as null: Python writes them into JSON, a browser's JSON.parse refuses them."""
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return None if isinstance(v, float) and not math.isfinite(v) else v


def grant(run_dir: str | Path) -> str:
    """The token (stable per dir) that lets the live charts' page read ``run_dir``'s lines and status."""
    key = str(Path(run_dir))
    with _lock:
        if key not in _token_of:
            tok = secrets.token_urlsafe(16)
            _token_of[key], _tokens[tok] = tok, key
        return _token_of[key]


def panel_status(run_dir: Path, lines: list[dict], status: dict | None = None) -> dict:
    """What the panel shows beside the charts: state, the progress bar's fraction and text, the
    latest test accuracy. ``status``: :func:`state_of` as already read."""
    status = status or state_of(run_dir)
    state = status.get("state", "unknown")
    epochs = status.get("epochs")
    if not epochs:
        epochs = (read_json_dict(Path(run_dir) / "config.json").get("train") or {}).get("epochs") or 0
    frac, text = progress_text(state, status, done_epochs(status, lines), int(epochs), lines)
    last = lines[-1] if lines else {}
    acc = last.get("test_accuracy")
    return {
        "state": state,
        "live": state in ACTIVE,
        "progress": round(frac, 4),
        "text": text,
        "test": None if not finite(acc) else f"test {100 * acc:.2f}% at epoch {last.get('epoch', '?')}",
        "last_time": last.get("time") if finite(last.get("time")) else None,
    }


def body(token: str, n: int, gen: int) -> bytes | None:
    """The route's answer for ``token`` as strict JSON: the complete lines from ``n`` on (all when
    ``gen`` is not the reader's generation), the panel's status and stamp; None for an unknown token."""
    with _lock:
        run_dir = _tokens.get(token)
    if run_dir is None:
        return None
    # the status before the lines: a worker appends its last line, then writes 'finished', and the
    # page stops asking once it reads an ended state, so the lines it gets with it must be complete
    st = state_of(run_dir)
    stamp = digest(live_stamp(Path(run_dir).parent, Path(run_dir).name, st.get("state")))
    g, _, lines = metrics_since(Path(run_dir), 0, None, partial=False)  # all: the status reads the last
    start = n if gen == g and 0 <= n <= len(lines) else 0
    status = panel_status(Path(run_dir), lines, st)
    new = lines[start:]
    try:
        text = json.dumps(new, allow_nan=False)
    except ValueError:  # NaN or ±inf in a line: null for the browser's JSON.parse
        text = json.dumps(_clean(new))
    head = json.dumps({"gen": g, "start": start, "status": status, "stamp": stamp, "now": time.time()})
    return (head[:-1] + ',"lines":' + text + "}").encode()


async def endpoint(request):  # the files are read off the event loop
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response

    def arg(name: str) -> int:
        try:
            return int(request.query_params.get(name, "0"))
        except ValueError:
            return -1

    out = await run_in_threadpool(body, request.path_params["token"], arg("n"), arg("gen"))
    if out is None:
        return Response("unknown run", status_code=404, media_type="text/plain")
    return Response(out, media_type="application/json", headers={"Cache-Control": "no-store"})
