"""A run directory's files: naming, atomic writes, JSON, and the ``metrics.jsonl`` readers.

A run directory holds:

- ``config.json``   the run's config (enough to re-run it); a DeepFacto run's records its ``kind``
- ``metrics.jsonl`` one JSON object per evaluation, appended and flushed as it goes
- ``status.json``   state (running / finished / stopped / crashed / diverged), kind, progress, pid, error
  (:mod:`admm_core.status`)
- ``summary.json``  final and best accuracy, wall time, state memory
- ``checkpoint.pt`` what ``resume`` continues from, written atomically (:mod:`admm_core.checkpoint`)
- ``system.jsonl``  the worker's CPU %, RSS and GPU memory (:class:`admm_core.status.SystemSampler`)

Nothing here imports torch: the dashboard's pages read runs through this module.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from .spec.config import RunConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_runs_dir() -> Path:
    return Path(os.environ.get("ADMM_RUNS", PROJECT_ROOT / "runs"))


MANIFEST = "checkpoint-manifest.json"  # a multi-process checkpoint's manifest (admm_core.distributed)


def read_checkpoint_manifest(run_dir: Path) -> dict | None:
    """The manifest of a run's multi-process checkpoint (world size, epoch, rank files), or None."""
    try:
        return json.loads((Path(run_dir) / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def checkpoint_world(run_dir: Path) -> int | None:
    """World size of the run directory's last checkpoint (None: there is none)."""
    m = read_checkpoint_manifest(run_dir)
    if m is not None:
        return int(m["world_size"])
    return 1 if (Path(run_dir) / "checkpoint.pt").exists() else None


# a run directory's name: its start time in this format, '-', its name (so a listing sorts by time);
# STAMPED matches such a start (what the dashboard shortens a long id around)
STAMP_FORMAT = "%Y%m%d-%H%M%S"
STAMPED = re.compile(r"\d{8}-\d{6}-")


def unique_run_dir(name: str, root: Path | None = None) -> Path:
    """Create and return ``<root>/<time>-<name>``, with -2, -3 … appended if that exists already.

    The directory is created here with ``mkdir(exist_ok=False)``, which is atomic: runs started
    in the same second by several processes each get their own directory.
    """
    root = Path(root or default_runs_dir())
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime(STAMP_FORMAT)}-{name}"
    for i in range(1, 10_000):
        path = root / (stem if i == 1 else f"{stem}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{root}: no free run directory name for {stem}")


def new_run_dir(cfg: "RunConfig", root: Path | None = None) -> Path:
    return unique_run_dir(f"{cfg.preset or cfg.data.name}-{cfg.method}-s{cfg.train.seed}", root)


def _temp_of(path: Path) -> Path:
    """The temporary a writer of ``path`` writes first: beside it, one per process and thread."""
    return path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")


def _write_temp(path: Path, write: Callable[[BinaryIO], None], durable: bool) -> Path:
    """``write(f)`` into :func:`_temp_of` ``path``, flushed and (``durable``) fsynced: the temporary.
    An OSError names ``path`` (not the temporary) and leaves no temporary behind."""
    tmp = _temp_of(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: Path, write: Callable[[BinaryIO], None], durable: bool = True, check=None) -> None:
    """The one atomic writer: ``write(f)`` into a temporary beside ``path``, flushed, fsynced
    (``durable``), ``check(temporary)`` (a read-back, when given), then renamed over ``path``.

    Readers never see half a file (a dashboard reading config.json while a worker rewrites it),
    concurrent writers never share a temporary, and a kill, a full disk or a failed check leaves the
    previous file whole: an OSError names ``path`` (not the temporary), and the temporary is removed.
    """
    path = Path(path)
    tmp = _write_temp(path, write, durable)
    try:
        if check is not None:
            check(tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, durable: bool = True) -> None:
    """:func:`write_atomic` of ``text`` (UTF-8)."""
    write_atomic(path, lambda f: f.write(text.encode()), durable)


def write_files_atomic(files: dict) -> None:
    """Replace several files together ({path: text}): every temporary is written and fsynced
    first, then all are renamed. A full disk while writing any of them changes none of them
    (a DeepFacto evaluation's attributes.json, summary.json and config.json stay one set)."""
    tmps = []
    try:
        for path, text in files.items():
            tmps.append((_write_temp(Path(path), lambda f, t=text: f.write(t.encode()), True), Path(path)))
        for tmp, path in tmps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in tmps:
            tmp.unlink(missing_ok=True)


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no space, quota, file-size limit


def os_error_line(e: BaseException) -> str:
    """One line for an error; a full disk (or quota, or file-size limit) says what failed and
    what to do: the last good checkpoint is kept, free space and resume."""
    if not (isinstance(e, OSError) and e.errno in DISK_FULL):
        return f"{type(e).__name__}: {e}"
    where = e.filename or "a file"
    try:
        free = f"{shutil.disk_usage(Path(where).parent).free / 2**20:.1f} MiB free there"
    except (OSError, TypeError, ValueError):
        free = "free space unknown"
    return (
        f"disk full: {e.strerror} writing {where} ({free}); the last good checkpoint is kept: "
        f"free some space, then resume the run"
    )


def write_json(path: Path, obj, durable: bool = True) -> None:
    """Atomic JSON write (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2), durable=durable)


def file_stamp(path: Path) -> tuple[int, int]:
    """(size, mtime ns) of ``path``; (0, 0) when it is missing: a change means it was written."""
    try:
        s = os.stat(path)
        return (s.st_size, s.st_mtime_ns)
    except OSError:
        return (0, 0)


def read_json(path: Path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):  # missing, unreadable, garbled or not UTF-8
        return default


_STAMPED: dict[str, tuple[tuple[int, int, int], object]] = {}


def read_json_stamped(path: Path, default=None):
    """:func:`read_json`, parsed again only when the file's mtime, size or inode changed.

    For listings that poll many run folders every second (the dashboard): a finished run's
    config and summary are read once. The value is shared between calls: do not mutate it.
    """
    try:
        st = os.stat(path)
    except OSError:
        return default
    stamp, key = (st.st_mtime_ns, st.st_size, st.st_ino), str(path)
    hit = _STAMPED.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    value = read_json(path, default)
    if time.time() - st.st_mtime < 2.0:  # file clocks tick coarsely: a fresh file may change unseen
        return value
    if len(_STAMPED) > 20_000:  # a bound, not an LRU: listings re-fill it in one pass
        _STAMPED.clear()
    _STAMPED[key] = (stamp, value)
    return value


def read_json_dict(path: Path) -> dict:
    """A JSON object from ``path``; {} when it is missing, garbled or not an object."""
    d = read_json(path, {})
    return d if isinstance(d, dict) else {}


def read_metrics(run_dir: Path) -> list[dict]:
    """All complete lines of metrics.jsonl (a line being written is skipped)."""
    out = []
    try:
        with open(Path(run_dir) / "metrics.jsonl") as f:
            for line in f:
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if isinstance(m, dict) and isinstance(m.get("epoch"), int):  # a cut line can parse as a number
                    out.append(m)
    except OSError:
        pass
    return out


def _metrics_lines(data: bytes) -> list[dict]:
    """The metrics records among complete lines ``data`` (bytes ending in a newline), as read_metrics keeps them."""
    if not data:
        return []
    try:  # one parse for the whole batch; a garbled line sends us to the line-by-line path
        rows = json.loads(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
        if len(rows) != data.count(b"\n"):  # a record over two lines (a stray newline): as read_metrics does
            raise ValueError
    except ValueError:
        rows = []
        for line in data.split(b"\n"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return [m for m in rows if isinstance(m, dict) and isinstance(m.get("epoch"), int)]


class MetricsTail:
    """What the incremental reader knows of one metrics.jsonl: the records of its complete lines,
    the byte offset after the last of them, the bytes just before that offset, and ``gen``, a
    number that changes whenever the file is read again from its start (replaced, shrunk or
    rewritten in place): a caller holding ``n`` lines of generation ``gen`` needs only the rest."""

    __slots__ = ("ident", "offset", "check", "lines", "gen")

    def __init__(self, ident: tuple):
        self.ident, self.offset, self.check, self.lines, self.gen = ident, 0, b"", [], next(_GENS)


_Tail = MetricsTail  # the old name
_GENS = count(1)  # generations over all files: a tail dropped and read again gets a new one
_TAILS: OrderedDict[str, MetricsTail] = OrderedDict()  # metrics path -> its tail, least recently read first
_TAILS_LOCK = threading.Lock()
TAIL_FILES = 64  # files kept (a Compare page shows a handful; the Runs page reads only live runs')
TAIL_LINES = 400_000  # and records kept over all files (about 1 KB each): the oldest files go first
_CHECK = 64  # bytes before the offset compared on each read: a file rewritten in place is read again


def read_metrics_cached(run_dir: Path) -> list[dict]:
    """:func:`read_metrics`, reading only the lines appended since the last call for this file.

    The dashboard redraws live runs' charts every second; a 100,000-epoch run's file has tens of
    thousands of lines, and parsing them all on every redraw was most of the page's server time.
    The file is read again from its start when it was replaced (another inode), shrank, or its
    bytes before the kept offset changed (rewritten in place, as ``reset_metrics`` does on a
    resume). A half-written last line is parsed if it already is a whole record (as read_metrics
    does) but not kept: the next call reads it again. Returns a new list each call; the records
    in it are shared between calls: do not mutate them.
    """
    return metrics_since(run_dir)[2]


def metrics_since(
    run_dir: Path, n: int = 0, gen: int | None = None, partial: bool = True
) -> tuple[int, int, list[dict]]:
    """``(gen, start, lines)``: the metrics records of ``run_dir`` from record ``start`` on, read
    incrementally (:func:`read_metrics_cached`). ``start`` is ``n`` when ``gen`` is the file's
    current generation (:class:`MetricsTail`), else 0: a reader that keeps what it was given and
    asks with its count and generation gets only what is new, or everything after a rewrite. A
    half-written last line that already parses is included when ``partial`` (as read_metrics
    does); a caller that counts what it was given passes ``partial=False``."""
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        f = open(path, "rb")
    except OSError:
        with _TAILS_LOCK:
            _TAILS.pop(path, None)
        return 0, 0, []
    with f, _TAILS_LOCK:
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino)
        tail = _TAILS.get(path)
        if (
            tail is None
            or tail.ident != ident
            or st.st_size < tail.offset
            or (tail.check and os.pread(f.fileno(), len(tail.check), tail.offset - len(tail.check)) != tail.check)
        ):
            tail = MetricsTail(ident)
        f.seek(tail.offset)
        data = f.read()
        cut = data.rfind(b"\n") + 1
        if cut:
            tail.lines.extend(_metrics_lines(data[:cut]))
            tail.offset += cut
            tail.check = data[max(0, cut - _CHECK) : cut] if cut >= _CHECK else (tail.check + data[:cut])[-_CHECK:]
        _TAILS[path] = tail
        _TAILS.move_to_end(path)
        while len(_TAILS) > TAIL_FILES or (len(_TAILS) > 1 and sum(len(t.lines) for t in _TAILS.values()) > TAIL_LINES):
            _TAILS.popitem(last=False)
        start = n if gen == tail.gen and 0 <= n <= len(tail.lines) else 0
        out = tail.lines[start:]
        g = tail.gen
    if partial and cut < len(data):  # a line being written (or a last line without its newline)
        out += _metrics_lines(data[cut:] + b"\n")
    return g, start, out


def reset_metrics(run_dir: Path, keep_through: int | None = None, stale=("summary.json", "error.txt")) -> None:
    """Start ``metrics.jsonl``: empty for a new run; on resume keep the lines up to epoch
    ``keep_through`` (those the checkpoint covers). ``stale`` files of an earlier end go."""
    path = Path(run_dir) / "metrics.jsonl"
    kept = [] if keep_through is None else [m for m in read_metrics(run_dir) if m["epoch"] <= keep_through]
    path.write_text("".join(json.dumps(m) + "\n" for m in kept))
    for name in stale:
        (Path(run_dir) / name).unlink(missing_ok=True)


def append_metrics(run_dir: Path, m: dict) -> None:
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        f.write(json.dumps(m) + "\n")
        f.flush()
