"""What the live panel shows, as a cheap stamp, and its progress text (no Streamlit here).

The Train page's live panel is redrawn only when :func:`live_stamp` changes: a nested watcher
fragment compares it every few tenths of a second (a handful of ``stat`` calls and one small
JSON read), so an unchanged or ended run costs the server almost nothing and sends no figure.
"""

from __future__ import annotations

from pathlib import Path

from admm_core.rundir import read_json_dict
from app.dashboard import charts as C


def file_stamp(path: Path) -> tuple:
    """(size, mtime ns) of ``path``; (0, 0) when it is missing: a change means it was written."""
    try:
        s = path.stat()
        return (s.st_size, s.st_mtime_ns)
    except OSError:
        return (0, 0)


def live_stamp(root: str | Path, watched: str | None, lines: bool = True) -> tuple:
    """What the live panel shows, cheaply: the runs folder's listing (runs added or deleted), the
    watched run's launch and meta files (size, mtime) and its state. With ``lines`` also its
    metrics file and, from status.json, the epoch and the progress in 5 % steps (the worker
    rewrites it every 0.5 s; redrawing seven charts for each write would cost more than the
    charts' news). Without: the live charts fetch new lines and progress themselves
    (:mod:`app.dashboard.tail`), and the panel is redrawn only when the run's state changes.

    The push thread (or the fallback watcher) compares it and redraws only on a change.
    """
    root = Path(root)

    out = [str(root), watched, file_stamp(root)]
    if watched:
        run_dir = root / watched
        status = read_json_dict(run_dir / "status.json")
        out += [file_stamp(run_dir / f) for f in ("launch.json", "meta.json")] + [status.get("state")]
        if lines:
            progress = status.get("progress")
            out += [file_stamp(run_dir / "metrics.jsonl"), status.get("epoch")]
            out += [int(20 * progress) if isinstance(progress, float) else None]
    return tuple(out)


def progress_text(state: str, status: dict, done: int, epochs: int, metrics: list[dict]) -> tuple[float, str]:
    """(fraction, caption) of the progress bar: epochs from the worker, ETA from the measured s/epoch."""
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
        text += " · ETA estimating…" if eta is None else f" · ETA {C.fmt_duration(eta)}"
    return min(max(frac, 0.0), 1.0), text
