"""What the live panel shows, as a cheap stamp (no Streamlit here).

The Train page's live panel is redrawn only when :func:`live_stamp` changes: a nested watcher
fragment compares it every few tenths of a second (a handful of ``stat`` calls and one small
JSON read), so an unchanged or ended run costs the server almost nothing and sends no figure.
"""

from __future__ import annotations

from pathlib import Path

from admm_core.runs import read_json_dict


def file_stamp(path: Path) -> tuple:
    """(size, mtime ns) of ``path``; (0, 0) when it is missing: a change means it was written."""
    try:
        s = path.stat()
        return (s.st_size, s.st_mtime_ns)
    except OSError:
        return (0, 0)


def live_stamp(root: str | Path, watched: str | None) -> tuple:
    """What the live panel shows, cheaply: the runs folder's listing (runs added or deleted), the
    watched run's metrics, launch and meta files (size, mtime), and from its status.json the state,
    epoch and progress in 5 % steps (the worker rewrites it every 0.5 s; redrawing seven charts
    for each write would cost more than the charts' news).

    The watcher compares it every REFRESH_S and redraws only on a change.
    """
    root = Path(root)

    out = [str(root), watched, file_stamp(root)]
    if watched:
        run_dir = root / watched
        status = read_json_dict(run_dir / "status.json")
        progress = status.get("progress")
        out += [file_stamp(run_dir / f) for f in ("launch.json", "metrics.jsonl", "meta.json")]
        out += [status.get("state"), status.get("epoch"), int(20 * progress) if isinstance(progress, float) else None]
    return tuple(out)
