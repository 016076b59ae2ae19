"""The live charts' data channel: a run's new metrics lines over one HTTP route (issue 33).

Pushing each new point through Streamlit cost a fragment rerun per open tab per point (figures
built, the whole series re-sent, the component re-rendered): with eight tabs on a 2-core machine
the points were 9–11 s behind the disk. Here the live charts' page asks ``GET {ROUTE}/{token}?n=&gen=``
twice a second and gets only the lines it does not have; Streamlit does nothing until the run's
state changes.

- One :class:`Tail` per run directory, shared by every tab: it keeps the complete lines read so
  far and the byte offset, so a request reads only what was appended since (a replaced or
  truncated file starts a new generation, and the page starts over).
- The page never names a path: the Streamlit page :func:`grant`\\ s a random token for the run
  directory it shows, and the route serves that directory's ``metrics.jsonl`` and status, nothing
  else (an unknown token is a 404).
- The route is mounted by ``app/serve.py`` (``streamlit run app/serve.py``, Streamlit's ``st.App``),
  which sets ``ADMM_LIVE_ROUTE``; where it is not (``streamlit run app/main.py``, AppTest) the panel
  passes the lines in the component's arguments and redraws on each change, as before.

No Streamlit here.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
from collections import OrderedDict
from pathlib import Path

from admm_core.rundir import read_json_dict

ROUTE = "/api/admm/live"
ENV = "ADMM_LIVE_ROUTE"  # set by app/serve.py: the route is mounted in this process
MAX_TAILS = 256
READ_LIMIT = 8 << 20  # bytes read per request at most: a huge backlog arrives over a few polls
CHECK = 64  # bytes before the offset compared on each read: a file rewritten in place is read again

_lock = threading.Lock()
_tails: OrderedDict[str, Tail] = OrderedDict()  # run dir -> its tail (least recently used first)
_tokens: dict[str, str] = {}  # token -> run dir
_token_of: dict[str, str] = {}  # run dir -> token


def route() -> str | None:
    """The route's path when it is served by this process, else None (then the page pushes)."""
    return os.environ.get(ENV) or None


def _clean(v):
    """NaN and ±inf as null: Python writes them into JSON, a browser's JSON.parse refuses them."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


class Tail:
    """The complete lines of one run's metrics.jsonl, read incrementally.

    ``raw[i]`` is line i as JSON text a browser can parse, ``lines[i]`` the same line parsed;
    only dicts with an integer ``epoch`` count (as :func:`admm_core.runs.read_metrics`), and a
    line still being written (no newline yet) waits for the next read.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.gen = 0
        self._reset()

    def _reset(self, ino: int | None = None) -> None:
        self.gen += 1
        self.ino, self.offset, self.check = ino, 0, b""
        self.raw: list[str] = []
        self.lines: list[dict] = []

    def update(self) -> None:
        try:
            f = open(self.path, "rb")
        except OSError:
            if self.offset:
                self._reset()
            return
        with f:
            st = os.fstat(f.fileno())
            # replaced (another inode), truncated, or rewritten in place (a resume keeps the lines its
            # checkpoint covers: runs.reset_metrics) so that the bytes before the offset changed
            if self.ino is not None and (
                st.st_ino != self.ino
                or st.st_size < self.offset
                or (self.check and os.pread(f.fileno(), len(self.check), self.offset - len(self.check)) != self.check)
            ):
                self._reset()
            self.ino = st.st_ino
            if st.st_size == self.offset:
                return
            f.seek(self.offset)
            chunk = f.read(min(st.st_size - self.offset, READ_LIMIT))
        end = chunk.rfind(b"\n") + 1
        if not end:
            return  # no complete line yet
        self.offset += end
        self.check = (self.check + chunk[:end])[-CHECK:]
        for text in chunk[:end].decode("utf-8", errors="replace").splitlines():
            try:
                m = json.loads(text)
            except ValueError:
                continue
            if not (isinstance(m, dict) and isinstance(m.get("epoch"), int) and not isinstance(m["epoch"], bool)):
                continue
            if "NaN" in text or "Infinity" in text:
                m = _clean(m)
                text = json.dumps(m)
            self.lines.append(m)
            self.raw.append(text.strip())


def tail(run_dir: str | Path) -> Tail:
    """The shared, updated tail of ``run_dir``."""
    key = str(Path(run_dir))
    with _lock:
        t = _tails.get(key)
        if t is None:
            t = _tails[key] = Tail(Path(key))
            while len(_tails) > MAX_TAILS:
                _tails.popitem(last=False)
        _tails.move_to_end(key)
        t.update()
        return t


def grant(run_dir: str | Path) -> str:
    """A token that lets the live charts' page read ``run_dir``'s lines and status (stable per dir)."""
    key = str(Path(run_dir))
    with _lock:
        if key not in _token_of:
            tok = secrets.token_urlsafe(16)
            _token_of[key], _tokens[tok] = tok, key
        return _token_of[key]


def done_epochs(status: dict, lines: list[dict]) -> int:
    """Epochs done: the status, else the last evaluation (a resumed run is 'starting' again)."""
    done = int(status.get("epoch") or 0)
    if (status.get("state") == "starting" or not done) and lines:
        done = max(done, int(lines[-1].get("epoch") or 0))
    return done


def panel_status(run_dir: Path, lines: list[dict], status: dict | None = None) -> dict:
    """What the panel shows beside the charts: state, the progress bar's fraction and text, the
    latest test accuracy (None before the first line). ``status``: status.json as already read."""
    from app.dashboard import charts as C
    from app.dashboard.live import progress_text

    if status is None:
        status = read_json_dict(Path(run_dir) / "status.json")
    state = status.get("state", "unknown")
    epochs = status.get("epochs")
    if not epochs:
        epochs = (read_json_dict(Path(run_dir) / "config.json").get("train") or {}).get("epochs") or 0
    frac, text = progress_text(state, status, done_epochs(status, lines), int(epochs), lines)
    last = lines[-1] if lines else {}
    acc = last.get("test_accuracy")
    return {
        "state": state,
        "live": state in ("starting", "running"),
        "progress": round(frac, 4),
        "text": text,
        "test": None if not C._finite(acc) else f"test {100 * acc:.2f}% at epoch {last.get('epoch', '?')}",
        "last_time": last.get("time") if C._finite(last.get("time")) else None,
    }


def body(token: str, n: int, gen: int) -> bytes | None:
    """The route's answer for ``token``: the lines from ``n`` on (all of them when ``gen`` is not
    the tail's generation, e.g. after a reset) and the panel's status, as JSON; None for an
    unknown token."""
    with _lock:
        run_dir = _tokens.get(token)
    if run_dir is None:
        return None
    # the status before the lines: a worker appends its last line, then writes 'finished', and the
    # page stops asking once it reads an ended state, so the lines it gets with it must be complete
    st = read_json_dict(Path(run_dir) / "status.json")
    t = tail(run_dir)
    with _lock:
        start = n if gen == t.gen and 0 <= n <= len(t.raw) else 0
        raw, lines, g = t.raw[start:], list(t.lines), t.gen
    status = panel_status(t.run_dir, lines, st)
    head = json.dumps({"gen": g, "start": start, "status": status, "now": time.time()})
    return (head[:-1] + ',"lines":[' + ",".join(raw) + "]}").encode()


async def endpoint(request):
    """Starlette handler for ``GET {ROUTE}/{token}?n=&gen=``."""
    from starlette.responses import Response

    def arg(name: str) -> int:
        try:
            return int(request.query_params.get(name, "0"))
        except ValueError:
            return -1

    out = body(request.path_params["token"], arg("n"), arg("gen"))
    if out is None:
        return Response("unknown run", status_code=404, media_type="text/plain")
    return Response(out, media_type="application/json", headers={"Cache-Control": "no-store"})
