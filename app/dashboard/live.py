"""What the live panel shows, as a cheap stamp, and its progress text (no Streamlit here).

The Train page's live panel is redrawn only when :func:`live_stamp` changes: its live charts fetch
it with the run's lines (:mod:`app.dashboard.tail`) and tell the page (:mod:`app.dashboard.follow`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from admm_core.rundir import file_stamp
from admm_core.runs import fmt_duration
from app.dashboard import charts as C
from app.dashboard.workers import state_of


def digest(stamp: object) -> str:
    """A short text standing for ``stamp`` (tuples of strings and numbers), the same in any process."""
    return hashlib.blake2b(repr(stamp).encode(), digest_size=8).hexdigest()


def live_stamp(root: str | Path, watched: str | None, state: str | None = None) -> tuple:
    """What the live panel draws itself, cheaply: the runs folder's listing (its run menu), the
    watched run's launch and meta files (a Resume, a new name) and its state (``state``: as the caller
    has just read it). The progress and the lines are the live charts' own, so the worker's status
    rewrites every 0.5 s redraw nothing."""
    root = Path(root)
    out = [str(root), watched, file_stamp(root)]
    if watched:
        run_dir = root / watched
        out += [file_stamp(run_dir / f) for f in ("launch.json", "meta.json")] + [
            state or state_of(run_dir).get("state")
        ]
    return tuple(out)


def progress_text(state: str, status: dict, done: int, epochs: int, metrics: list[dict]) -> tuple[float, str]:
    """(fraction, caption) of the progress bar; the ETA from the measured s/epoch."""
    if state == "starting":
        frac = done / epochs if epochs else 0.0
        return frac, f"starting · epoch {done}/{epochs or '?'} · {100 * frac:.0f}%"
    frac = float(status.get("progress") or (done / epochs if epochs else 0.0))
    if state == "finished":
        frac = 1.0
    text = f"{state} · epoch {done}/{epochs or '?'} · {100 * frac:.0f}%"
    # DeepFacto: setup, backbone, iterations, evaluation; also where a stopped / crashed run ended
    # ("stopped · epoch 9/9 · 100%" said nothing of the attribute evaluation it was stopped in)
    if status.get("phase") and state != "finished":
        text += f" · {status['phase']}"
    if state == "running":
        eta = C.eta_seconds(status, metrics)
        text += " · ETA estimating…" if eta is None else f" · ETA {fmt_duration(eta)}"
    return min(max(frac, 0.0), 1.0), text
