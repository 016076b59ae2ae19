"""A run directory as one zip, built in memory for the Runs page's download button.

The run is named by the page (a URL's ``?run=`` included), so it is found through
:func:`workers.run_path`: one plain name, no symlink, inside the allowed runs root, else
PermissionError. Inside the run, only regular files are zipped: a symbolic link (to a file or a
folder anywhere on the machine) is left out, not followed. The checkpoint (``*.pt``, large for a
big Z/U state) is left out of the zip unless asked for; the page offers it as a download of its own.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

from app.dashboard import workers as W

CHECKPOINT = "checkpoint.pt"


def _files(run_dir: Path, checkpoint: bool) -> list[Path]:
    """The run's regular files, relative to it, sorted: no link, no half-written ``.tmp``, no ``.pt``
    unless ``checkpoint``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(run_dir):  # followlinks=False: linked folders not entered
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for f in filenames:
            p = Path(dirpath) / f
            if p.is_symlink() or not p.is_file() or p.suffix == ".tmp" or (p.suffix == ".pt" and not checkpoint):
                continue
            out.append(p.relative_to(run_dir))
    return sorted(out)


def run_zip(root: str | Path, name: str, checkpoint: bool = False) -> bytes:
    """The zip of run ``name`` under ``root``, its files under a folder ``<name>/``; PermissionError
    when ``name`` is not a run inside the allowed root, FileNotFoundError when it is no folder. A file
    that goes while zipping (a live run's rewrite) is skipped."""
    run_dir = W.run_path(root, name)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run = {name!r}: no such run directory in {root}")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for rel in _files(run_dir, checkpoint):
            try:
                z.writestr(f"{run_dir.name}/{rel.as_posix()}", (run_dir / rel).read_bytes())
            except OSError:
                continue
    return buf.getvalue()


def checkpoint_bytes(root: str | Path, name: str) -> bytes:
    """The run's ``checkpoint.pt`` (b"" when it has none or it cannot be read), confined as above."""
    path = W.run_path(root, name) / CHECKPOINT
    try:
        return b"" if path.is_symlink() else path.read_bytes()
    except OSError:
        return b""
