"""Run directories and the training loop every face (CLI, dashboard, notebooks) uses.

A run directory holds:

- ``config.json``   the :class:`RunConfig` (enough to re-run it)
- ``metrics.jsonl`` one JSON object per evaluation, appended and flushed as it goes
- ``status.json``   state (running / finished / stopped / crashed / diverged), progress, pid, error
- ``summary.json``  final and best accuracy, wall time, state memory
- ``checkpoint.pt`` network + method state + epoch, written atomically; ``resume`` continues it
- ``system.jsonl``  the worker's CPU %, RSS and GPU memory every :data:`SYSTEM_S` and at each epoch
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import json
import math
import os
import pickle
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import data as data_mod
from . import distributed as dist_mod
from .config import RunConfig
from .errors import CheckpointError, ConfigError, DeviceError, check
from .lazy import torch
from .losses import get_loss
from .methods.base import TrainBatch
from .profile import phase

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TRAIN_EVAL_LIMIT = 10_000  # train loss/accuracy are measured on the first 10k training samples


def default_runs_dir() -> Path:
    return Path(os.environ.get("ADMM_RUNS", PROJECT_ROOT / "runs"))


def unique_run_dir(name: str, root: Path | None = None) -> Path:
    """Create and return ``<root>/<time>-<name>``, with -2, -3 … appended if that exists already.

    The directory is created here with ``mkdir(exist_ok=False)``, which is atomic: runs started
    in the same second by several processes each get their own directory.
    """
    root = Path(root or default_runs_dir())
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"
    for i in range(1, 10_000):
        path = root / (stem if i == 1 else f"{stem}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{root}: no free run directory name for {stem}")


def new_run_dir(cfg: RunConfig, root: Path | None = None) -> Path:
    return unique_run_dir(f"{cfg.preset or cfg.data.name}-{cfg.method}-s{cfg.train.seed}", root)


def resolve_device(name: str) -> torch.device:
    return torch.device(device_name(name))


def device_name(name: str) -> str:
    """``name`` with ``auto`` resolved ('cuda' when a CUDA device is available, else 'cpu');
    DeviceError for 'cuda' without one. The check :func:`resolve_device` makes, without torch."""
    if name == "auto":
        return "cuda" if cuda_device_count() else "cpu"
    if name == "cuda" and not cuda_device_count():
        raise DeviceError("train.device = 'cuda': no CUDA device is available here (use auto or cpu)")
    return name


_CUDA_PROBE = """import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int(0)
    ok = cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0
    print(n.value if ok else 0)
except OSError:
    print(0)
"""


def cuda_device_count() -> int:
    """CUDA devices torch sees here: ``torch.cuda.device_count()`` (0 when none is available).

    Where torch is not imported yet (the dashboard's pages: ``import torch`` alone is ~500 MB of
    the server), asked without it: 0 for a torch build without CUDA (no ``libc10_cuda.so`` in
    its lib/) or a machine without the NVIDIA driver; else the driver's own count (``cuInit``,
    ``cuDeviceGetCount``, which honour CUDA_VISIBLE_DEVICES as torch does), from a short
    subprocess so the server does not load libcuda, once per process."""
    real = sys.modules.get("torch")
    if real is not None:
        return real.cuda.device_count() if real.cuda.is_available() else 0
    return _driver_cuda_count()


@functools.cache
def _driver_cuda_count() -> int:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    libs = [Path(d) / "lib" for d in (spec.submodule_search_locations or [])] if spec else []
    if not any((d / "libc10_cuda.so").exists() for d in libs) or not Path("/proc/driver/nvidia").exists():
        return 0
    try:
        out = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=60)
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def write_text_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Atomic write: a temporary beside ``path``, flushed, fsynced (``durable``) and renamed over it.

    Readers never see half a file (a dashboard reading config.json while a worker rewrites it),
    concurrent writers never share a temporary, and a full disk leaves the previous file whole:
    the error names ``path`` (not the temporary) and the temporary is removed.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_files_atomic(files: dict) -> None:
    """Replace several files together ({path: text}): every temporary is written and fsynced
    first, then all are renamed. A full disk while writing any of them changes none of them
    (a DeepFacto evaluation's attributes.json, summary.json and config.json stay one set)."""
    tmps = []
    try:
        for path, text in files.items():
            path = Path(path)
            tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
            tmps.append((tmp, path))
            try:
                with open(tmp, "w") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise OSError(e.errno, e.strerror, str(path)) from None
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


class _Tail:
    """What :func:`read_metrics_cached` knows of one metrics.jsonl: the records of its complete
    lines, the byte offset after the last of them, and the bytes just before that offset."""

    __slots__ = ("ident", "offset", "check", "lines")

    def __init__(self, ident: tuple):
        self.ident, self.offset, self.check, self.lines = ident, 0, b"", []


_TAILS: OrderedDict[str, _Tail] = OrderedDict()  # metrics path -> its tail, least recently read first
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
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        f = open(path, "rb")
    except OSError:
        with _TAILS_LOCK:
            _TAILS.pop(path, None)
        return []
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
            tail = _Tail(ident)
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
        out = list(tail.lines)
    if cut < len(data):  # a line being written (or a last line without its newline)
        out += _metrics_lines(data[cut:] + b"\n")
    return out


HEARTBEAT_S = 5.0  # a live worker touches RUN/heartbeat this often, whatever phase it is in
HEARTBEAT_STALE_S = 120.0  # a worker on another host silent this long is taken as lost
SYSTEM_S = 5.0  # the heartbeat thread appends a system.jsonl sample this often (and at each epoch)
SYSTEM_MIN_S = 1.0  # epochs faster than this add no extra samples (a tiny run would write one per epoch)


def _rss_bytes() -> int | None:
    """Resident set size now (VmRSS of /proc/self/status); None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class SystemSampler:
    """One line of ``system.jsonl`` per :meth:`sample`: ``time``, ``epoch``, ``cpu_percent`` (this
    process's user + system CPU time over the wall time since the previous sample, × 100: 100 is
    one core busy, more with several threads), ``rss_bytes`` (VmRSS) and, once the process uses
    CUDA, ``gpu_allocated_bytes`` / ``gpu_max_allocated_bytes`` / ``gpu_reserved_bytes`` of the
    current device. Reads ``os.times`` and /proc only (no psutil); CUDA is never initialised here.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._last = (time.monotonic(), sum(os.times()[:2]))

    def sample(self, epoch: int | None = None) -> dict:
        now, cpu = time.monotonic(), sum(os.times()[:2])
        dt = now - self._last[0]
        rec: dict = {"time": time.time(), "epoch": epoch}
        # over less than 0.2 s (the first sample) the tick-granular CPU time says nothing
        rec["cpu_percent"] = round(100.0 * max(0.0, cpu - self._last[1]) / dt, 1) if dt >= 0.2 else None
        self._last = (now, cpu)
        rec["rss_bytes"] = _rss_bytes()
        if torch.cuda.is_initialized():  # a CPU run never initialises CUDA, and neither does this
            rec["gpu_allocated_bytes"] = torch.cuda.memory_allocated()
            rec["gpu_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
            rec["gpu_reserved_bytes"] = torch.cuda.memory_reserved()
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return rec


class RunBusy(ConfigError):
    """The run directory is being trained by a live process already (its ``run.lock`` is held)."""


def _lock_holder(run_dir: Path) -> str:
    st = read_json_dict(Path(run_dir) / "status.json")
    return f"pid {st['pid']}" if isinstance(st.get("pid"), int) else "another process"


def claim_run(run_dir: Path):
    """Take RUN/run.lock (``flock``, exclusive, not waiting) for the life of a training process;
    returns the open file (closing it, or the process ending, releases the claim). Raises
    :class:`RunBusy` when a live worker holds it: two resumes of one run never both train it."""
    fd = open(Path(run_dir) / "run.lock", "a")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fd.close()
        raise RunBusy(
            f"run = {str(run_dir)!r}: being trained already by {_lock_holder(run_dir)}; stop it first"
        ) from None
    return fd


def run_busy(run_dir: Path) -> bool:
    """Whether a live process holds the run's claim (:func:`claim_run`); takes nothing."""
    try:
        claim_run(run_dir).close()
    except RunBusy:
        return True
    except OSError:  # no such folder / unwritable: nobody can be training there
        return False
    return False


def proc_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), None if unknown:
    with the pid it names one process, so a recycled pid is not taken for the worker."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class RunStatus:
    """``status.json`` of a run and the end of its life, for every training loop (the engine's
    :func:`train`, DeepFacto's): running → finished / stopped (``summary.json`` written) or
    crashed (``error.txt`` written, the error in the status).

    The writer claims the run (:func:`claim_run`, RunBusy when another live process trains it),
    records its pid, process start time and host, and touches ``heartbeat`` every
    :data:`HEARTBEAT_S` from a thread: liveness is read from the worker itself, never from
    the dashboard that launched it. ``write=False`` (a rank other than 0 under torchrun) keeps
    the record in memory only.
    """

    def __init__(self, run_dir: Path, epochs: int, write: bool = True, **extra):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "status.json"
        self.write = write
        self._claim = claim_run(self.run_dir) if write else None
        self.status = {
            "state": "running",
            "pid": os.getpid(),
            "pid_start": proc_start(os.getpid()),
            "host": socket.gethostname(),
            "started": time.time(),
            "updated": time.time(),
            "epoch": 0,
            "epochs": epochs,
            "progress": 0.0,
            "error": None,
            **extra,
        }
        self._written = 0.0
        self._beating = threading.Event()
        self._wake = threading.Event()  # an epoch ended: sample now
        if write:
            try:
                write_json(self.path, self.status)
            except BaseException:
                self._release()
                raise
            self._thread = threading.Thread(target=self._beat, daemon=True, name="heartbeat")
            self._thread.start()

    def _beat(self) -> None:
        beat = self.run_dir / "heartbeat"
        sampler = SystemSampler(self.run_dir / "system.jsonl")
        last_beat = last_sample = 0.0
        while not self._beating.is_set():
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S or not last_beat:
                try:
                    beat.touch()  # an mtime: needs no free space
                except OSError:
                    pass
                last_beat = now
            if now - last_sample >= SYSTEM_S or (self._wake.is_set() and now - last_sample >= SYSTEM_MIN_S):
                self._wake.clear()
                try:
                    sampler.sample(self.status.get("epoch"))
                except Exception:  # noqa: BLE001 - a full disk, a CUDA query: never the run's problem
                    pass
                last_sample = now
            due = min(last_beat + HEARTBEAT_S, last_sample + SYSTEM_S) - time.monotonic()
            if self._wake.is_set():  # woken within SYSTEM_MIN_S of the last sample: sample when allowed
                due = min(due, last_sample + SYSTEM_MIN_S - time.monotonic())
                self._beating.wait(max(0.0, due))
            else:
                self._wake.wait(max(0.0, due))  # an epoch's end, the next beat or sample, or release
        try:
            sampler.sample(self.status.get("epoch"))  # the last one: how the run ended
        except Exception:  # noqa: BLE001
            pass

    def _release(self) -> None:
        self._beating.set()
        self._wake.set()
        if getattr(self, "_thread", None) is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)  # its last system.jsonl sample is on disk when the run ends
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    def update(self, force: bool = False, **kw) -> None:
        """Merge ``kw``; written at most every 0.5 s unless ``force`` (a fast loop polls often)."""
        self.status.update(kw, updated=time.time())
        if self.write and (force or time.time() - self._written > 0.5):
            write_json(self.path, self.status, durable=force)
            self._written = time.time()
        if force and "epoch" in kw:
            self._wake.set()  # the heartbeat thread samples system.jsonl

    def finish(self, summary: dict, **kw) -> dict:
        try:
            if self.write:
                write_json(self.run_dir / "summary.json", summary)
            kw = {"elapsed_s": time.time() - self.status["started"], **kw}
            self.update(force=True, state="finished", progress=1.0, **kw)
        finally:
            self._release()
        return summary

    def stop(self, summary: dict) -> dict:
        return self.end(summary, "stopped")

    def end(self, summary: dict, state: str, **kw) -> dict:
        """An end other than finishing (stopped, diverged): summary written, state and ``kw`` recorded.

        A write that fails (a full disk) still ends the run as asked, with the error as its one
        line (status.json rewritten in place if need be, as :meth:`crash` does), and is raised: the
        caller's handler runs outside the loop's crash handler, so no reader is left with 'running'.
        """
        try:
            if self.write:
                write_json(self.run_dir / "summary.json", summary)
            self.update(force=True, state=state, **kw)
        except OSError as e:
            self.crash(e, state=state)
            raise
        finally:
            self._release()
        return summary

    def crash(self, e: BaseException, error_file: str = "error.txt", state: str = "crashed") -> None:
        """Record the crash: the status first (one line, a full disk says so), then the traceback.

        On a full disk the atomic write has no room for its temporary: status.json is then
        rewritten in place (truncating it frees its blocks), so no reader is left with 'running'.
        ``state``: an end that was asked for (stopped) and failed only while being written.
        """
        self.status.update(state=state, error=os_error_line(e), updated=time.time())
        try:
            if self.write:
                try:
                    write_json(self.path, self.status)
                except OSError:
                    try:
                        with open(self.path, "w") as f:
                            f.write(json.dumps(self.status))
                    except OSError:
                        pass
                try:  # on a full disk or a read-only directory this fails too: keep the original error
                    (self.run_dir / error_file).write_text(traceback.format_exc())
                except OSError:
                    (self.run_dir / error_file).unlink(missing_ok=True)
        finally:
            self._release()


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


class StopRun(Exception):
    """Raised inside the loop when a stop was requested (SIGTERM / SIGINT / should_stop)."""


class Diverged(Exception):
    """Raised inside the loop when the run diverged; the message names the epoch and quantity."""


def _all_finite(obj) -> bool:
    """True when every tensor / number in obj (nested lists, tuples, dicts) is finite."""
    if torch.is_tensor(obj):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    return True


def divergence(
    sess: "Session", m: dict, best_loss: float | None, first_loss: float | None, factor: float
) -> str | None:
    """Why the run diverged at this evaluation, or None.

    Non-finite training loss, residuals, Θ or any tensor of the method state (Z, U), or a
    training loss above ``factor`` × the best so far *and* above the loss at epoch 0 (so a
    loss that is merely noisy near zero does not count). ``factor`` 0 turns the loss test off.
    """
    if not math.isfinite(m["train_loss"]):
        return f"training loss is {m['train_loss']}"
    if not _all_finite(m.get("residuals", [])):
        return f"residuals are not finite ({m['residuals']})"
    if not all(bool(torch.isfinite(p).all()) for p in sess.net.parameters()):
        return "Θ (network parameters) is not finite"
    st = sess.state.__dict__ if hasattr(sess.state, "__dict__") else {}
    for name in ("z", "u"):
        if name in st and not _all_finite(st[name]):
            return f"{name.upper()} is not finite"
    loss = m["train_loss"]
    if factor and best_loss is not None and loss > factor * best_loss and (first_loss is None or loss > first_loss):
        return f"training loss {m['train_loss']:.4g} exceeds {factor:g} × its best {best_loss:.4g}"
    return None


@dataclass
class Session:
    """A built experiment: data on the device, network, method and its state."""

    cfg: RunConfig
    device: torch.device
    dataset: data_mod.Dataset
    net: torch.nn.Module
    method: object
    state: object
    batch: TrainBatch

    def evaluate(self) -> dict:
        loss = get_loss(self.cfg.train.loss)
        x_te, y_te = self.dataset.x_test.to(self.device), self.dataset.y_test.to(self.device)
        # reduced over ranks when the rows are sharded (admm_core.distributed)
        tr_loss, tr_acc, te_loss, te_acc = dist_mod.evaluate_split(
            self.net, self.batch, x_te, y_te, loss, TRAIN_EVAL_LIMIT
        )
        diag = self.method.diagnostics(self.net, self.state, self.batch)
        return {
            "train_loss": tr_loss,
            "train_accuracy": tr_acc,
            "test_loss": te_loss,
            "test_accuracy": te_acc,
            **diag,
            "state_bytes": self.method.state_bytes(self.state),  # this process's
            **dist_mod.extra_metrics(self.method, self.state),
        }


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks (up to 32 MiB each) instead of returning them to the
    system: a training step frees and re-allocates the same activations, and without this every
    allocation over the 128 KiB default is a fresh mmap, paid in page faults (ResNet-18 at width 8 on
    2 cores: 340,000 faults and ~half the CPU time in the kernel per 20 steps; after: ~3,000 and
    none). Linux/glibc only; elsewhere a no-op. Returns whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def build(cfg: RunConfig) -> Session:
    """Load data, build the split network and the method's initial state (seeded)."""
    device = dist_mod.local_device(resolve_device(cfg.train.device))
    keep_freed_memory()
    torch.manual_seed(cfg.train.seed)
    ds = data_mod.load(cfg.data.name, cfg.data.root, train_limit=cfg.data.train_limit, test_limit=cfg.data.test_limit)
    from .blocks import build_blocknet  # BlockNet is an nn.Module: torch, imported on use

    net = build_blocknet(cfg.model, ds.input_shape, ds.n_classes, seed=cfg.train.seed).to(device)
    method = cfg.build_method()
    gen = torch.Generator().manual_seed(cfg.train.seed)
    x_train = ds.x_train.to(device)
    if cfg.train.channels_last:
        check(x_train.dim() == 4, "train.channels_last", True, "needs image inputs (N, C, H, W)")
        net = net.to(memory_format=torch.channels_last)
        x_train = x_train.contiguous(memory_format=torch.channels_last)
    augment = None
    if cfg.data.augment:
        check(x_train.dim() == 4, "data.augment", True, f"needs image inputs (N, C, H, W); {ds.name} is flat")
        check(method.supports_augment, "data.augment", True, f"method {cfg.method!r} does not support augmentation")
        augment = data_mod.CropFlip(
            x_train.shape[0], ds.pad_value, pad=cfg.data.augment_pad, flip=cfg.data.augment_flip, seed=cfg.train.seed
        )
    if cfg.train.lr_schedule != "constant":
        check(
            method.supports_lr_schedule,
            "train.lr_schedule",
            cfg.train.lr_schedule,
            f"method {cfg.method!r} has no Θ step size to schedule",
        )
    batch = TrainBatch(
        x_train,
        ds.y_train.to(device),
        get_loss(cfg.train.loss),
        cfg.train.batch_size,
        augment=augment,
        epochs=cfg.train.epochs,
        lr_schedule=cfg.train.lr_schedule,
    )
    method, batch = dist_mod.distribute(method, batch, net)  # under torchrun: this rank's rows or block
    state = method.init_state(net, batch, gen)
    return Session(cfg, device, ds, net, method, state, batch)


def autocast(cfg: RunConfig, device: torch.device):
    """bf16 autocast of the network's compute when ``train.precision = 'bf16'`` (else a no-op).

    No cast cache: autocast keeps the bf16 copy of each weight until its outermost context
    exits, and one context spans a whole epoch, so with the cache every forward of the epoch
    would run on the weights the epoch started with (the optimizer's updates unseen; sgd and
    block-admm diverged on the GPU before this).
    """
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.precision == "bf16", cache_enabled=False)


class _KeepWriteError:
    """A file wrapper that remembers the OSError of a failed write (full disk, file-size limit)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, b):
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = e
            raise

    def flush(self):
        return self.f.flush()


def atomic_torch_save(obj, path: Path) -> None:
    """torch.save through a temporary file, synced and read back before it replaces ``path``.

    A kill, a full disk or a failed read-back mid-write leaves the previous file intact (and
    no temporary file behind): a damaged checkpoint never replaces the last good one.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw:
            f = _KeepWriteError(raw)
            try:
                torch.save(obj, f)
            except RuntimeError:
                if f.error is not None:  # torch reports a failed write as a bare RuntimeError: say what failed
                    raise OSError(f.error.errno, f.error.strerror, str(path)) from None
                raise
            raw.flush()
            os.fsync(raw.fileno())
        safe_load(tmp, mmap=True)  # parses the whole archive (mmap: the tensors are not read)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for stale in path.parent.glob(f"{path.name}.*.tmp"):  # left by a writer killed mid-write
        pid = stale.name[len(path.name) + 1 : -len(".tmp")]
        if pid.isdigit() and not pid_alive(int(pid)):
            stale.unlink(missing_ok=True)


def safe_load(path: Path, map_location="cpu", mmap: bool = False):
    """torch.load restricted to tensors and plain containers (``weights_only=True``).

    A pickle that would run code, a truncated or garbage file all raise CheckpointError naming
    the file and why; nothing in the file is executed.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror})") from None
    if not head:
        raise CheckpointError(f"{path}: damaged: the file is empty")
    if head != b"PK\x03\x04":  # torch.save's zip format; anything else is garbage or a legacy pickle
        raise CheckpointError(f"{path}: damaged or not a PyTorch checkpoint (not a torch.save zip archive)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors"
        raise CheckpointError(
            f"{path}: refused: not a plain-tensor checkpoint, loading it could run code ({what[:120]})"
        ) from None
    except Exception as e:  # noqa: BLE001 - a damaged file can fail in many ways inside torch/zipfile
        first = re.split(r"(?<=\.)\s", (str(e).strip().splitlines() or [""])[0])[0][:160]
        raise CheckpointError(f"{path}: damaged or not a PyTorch checkpoint ({type(e).__name__}: {first})") from None


CHECKPOINT_KEYS = ("epoch", "wall_time_s", "net", "method_state")


def verify_checkpoint(path: Path, map_location="cpu", mmap: bool = True) -> dict:
    """Load ``path`` safely and check it is a run checkpoint; raises CheckpointError naming what is wrong."""
    ck = safe_load(path, map_location=map_location, mmap=mmap)
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(ck, dict) or k not in ck]
    if missing:
        raise CheckpointError(f"{path}: not a run checkpoint (missing {', '.join(missing)})")
    return ck


def save_checkpoint(path: Path, sess: Session, epoch: int, wall: float) -> None:
    payload = {
        "epoch": epoch,
        "wall_time_s": wall,
        "net": sess.net.state_dict(),
        "method_state": sess.state.state_dict(),
    }
    if dist_mod.world_size() > 1:  # one file per rank + manifest
        return dist_mod.save(path.parent, payload, epoch, atomic_torch_save)
    atomic_torch_save(payload, path)


def load_checkpoint(path: Path, sess: Session) -> tuple[int, float]:
    dist_mod.check_world(path.parent)  # another world size: a ConfigError naming both
    if dist_mod.world_size() > 1:  # this rank's file, checked against the manifest
        ck = dist_mod.load(path.parent, sess.device, read=lambda p: verify_checkpoint(p, sess.device, mmap=False))
    else:
        ck = verify_checkpoint(path, map_location=sess.device, mmap=False)
    try:
        sess.net.load_state_dict(ck["net"])
        sess.state.load_state_dict(ck["method_state"])
        if "epoch" not in ck["method_state"] and hasattr(sess.state, "epoch"):
            sess.state.epoch = int(ck["epoch"])  # a checkpoint from before states counted epochs: η·γ^epoch goes on
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(
            f"{path}: does not fit this run's network or method ({type(e).__name__}: {first})"
        ) from None
    return ck["epoch"], ck["wall_time_s"]


def machine(device="cpu") -> str:
    """What a timing was measured on: CPU model, cores, the accelerator or the torch thread count
    (for ``device``, a run's device), torch version. Runs record it in ``status.json``."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    on_gpu = str(device).startswith("cuda") and torch.cuda.is_available()
    dev = torch.cuda.get_device_name(device) if on_gpu else f"CPU only, {torch.get_num_threads()} threads"
    return f"{cpu}; {os.cpu_count()} cores; {dev}; torch {torch.__version__}"


def summarize(cfg: RunConfig, metrics: list[dict], status: str) -> dict:
    last = metrics[-1] if metrics else {}
    best = max(metrics, key=lambda m: m["test_accuracy"]) if metrics else {}

    def time_to(acc):
        hit = next((m for m in metrics if m["test_accuracy"] >= acc), None)
        return None if hit is None else hit["wall_time_s"]

    epochs = last.get("epoch", 0)
    return {
        "method": cfg.method,
        "preset": cfg.preset,
        "data": cfg.data.name,
        "status": status,
        "epochs": epochs,
        "test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": best.get("test_accuracy"),
        "best_epoch": best.get("epoch"),
        "train_accuracy": last.get("train_accuracy"),
        "train_loss": last.get("train_loss"),
        "wall_time_s": last.get("wall_time_s", 0.0),
        "seconds_per_epoch": (last.get("wall_time_s", 0.0) / epochs) if epochs else None,
        "state_bytes": last.get("state_bytes"),
        "time_to_90_s": time_to(0.90),
        "time_to_95_s": time_to(0.95),
    }


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    on_progress: Callable[[float, dict | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Train ``cfg`` into ``run_dir`` (resuming from its checkpoint if asked); returns the summary.

    ``on_progress(epochs_done_as_float, metrics_or_None)`` is called during epochs and after
    each evaluation. ``should_stop()`` is polled; when true the run ends at once as 'stopped'
    (the last checkpoint remains, so it can be resumed).
    """
    run_dir = Path(run_dir)
    lead = dist_mod.is_lead()  # under torchrun only rank 0 writes status, metrics and summary
    should_stop = dist_mod.agreed(should_stop)  # every rank stops at the same point
    ckpt_path = run_dir / "checkpoint.pt"
    status = RunStatus(run_dir, cfg.train.epochs, write=lead)
    try:
        sess = build(cfg)
        status.update(force=True, machine=machine(sess.device))  # beside every timing: where it was measured
        start_epoch, wall = 0, 0.0
        if resume and dist_mod.checkpoint_world(run_dir) is not None:
            start_epoch, wall = load_checkpoint(ckpt_path, sess)
            dist_mod.barrier()  # every rank has loaded its checkpoint before rank 0 rewrites the metrics
            if lead:
                reset_metrics(run_dir, keep_through=start_epoch, stale=())  # drop lines logged after the checkpoint
        elif lead:
            write_text_atomic(run_dir / "config.json", cfg.to_json())
            reset_metrics(run_dir)
        t_start = time.time()

        def log(epoch: int) -> dict:
            with autocast(cfg, sess.device), phase("eval"):
                m = {"epoch": epoch, "wall_time_s": wall, **sess.evaluate(), "time": time.time()}
            if lead:
                with phase("metrics"):
                    append_metrics(run_dir, m)
            if on_progress:
                on_progress(float(epoch), m)
            return m

        factor = getattr(cfg.train, "diverge_factor", 100.0)
        logged = read_metrics(run_dir) if start_epoch else [log(0)]
        best_loss = min((x["train_loss"] for x in logged if math.isfinite(x["train_loss"])), default=None)
        first_loss = logged[0]["train_loss"] if logged else None
        for epoch in range(start_epoch + 1, cfg.train.epochs + 1):

            def progress(frac, epoch=epoch):
                if should_stop and should_stop():
                    raise StopRun()
                status.update(progress=(epoch - 1 + frac) / cfg.train.epochs, epoch=epoch - 1)
                if on_progress:
                    on_progress(epoch - 1 + frac, None)

            t0 = time.perf_counter()
            sess.batch.set_epoch(epoch)  # this epoch's augmentation view (no-op without augmentation)
            with autocast(cfg, sess.device):
                with phase("epoch"):
                    sess.method.run_epoch(sess.net, sess.state, sess.batch, progress)
            if sess.device.type == "cuda":
                torch.cuda.synchronize()
            wall += time.perf_counter() - t0
            if epoch % cfg.train.eval_every == 0 or epoch == cfg.train.epochs:
                m = log(epoch)
                # a loss that exploded past its best and its starting value ends the run
                why = divergence(sess, m, best_loss, first_loss, factor)
                if why:
                    raise Diverged(f"epoch {epoch}: {why}")
                if math.isfinite(m["train_loss"]):
                    best_loss = m["train_loss"] if best_loss is None else min(best_loss, m["train_loss"])
            if epoch % cfg.train.checkpoint_every == 0 or epoch == cfg.train.epochs:
                with phase("checkpoint"):
                    save_checkpoint(ckpt_path, sess, epoch, wall)
            with phase("status"):
                status.update(force=True, epoch=epoch, progress=epoch / cfg.train.epochs)
            if should_stop and should_stop():
                raise StopRun()
        return status.finish(summarize(cfg, read_metrics(run_dir), "finished"), elapsed_s=time.time() - t_start)
    except StopRun:
        return status.stop(summarize(cfg, read_metrics(run_dir), "stopped"))
    except Diverged as e:
        return status.end(summarize(cfg, read_metrics(run_dir), "diverged"), state="diverged", error=str(e))
    except BaseException as e:
        status.crash(e, error_file="error.txt" if lead else f"error-rank{dist_mod.rank()}.txt")
        raise


def install_stop_handlers() -> Callable[[], bool]:
    """SIGTERM/SIGINT request a clean stop; returns the ``should_stop`` poll."""
    flag = {"stop": False}

    def handler(signum, frame):
        flag["stop"] = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return lambda: flag["stop"]


def heartbeat_age(run_dir: Path) -> float | None:
    """Seconds since the worker last touched RUN/heartbeat (None: it never did, an older run)."""
    try:
        return max(0.0, time.time() - os.stat(Path(run_dir) / "heartbeat").st_mtime)
    except OSError:
        return None


def worker_alive(run_dir: Path, st: dict) -> bool:
    """Whether the worker that wrote status ``st`` still lives: on this host its pid exists and
    is the same process (start time, so a recycled pid does not count); on another host (a
    shared runs folder) its heartbeat is fresher than :data:`HEARTBEAT_STALE_S`."""
    pid = st.get("pid")
    if not isinstance(pid, int):
        return False
    host = st.get("host")
    if host and host != socket.gethostname():
        age = heartbeat_age(run_dir)
        return age is None or age < HEARTBEAT_STALE_S
    if not pid_alive(pid):
        return False
    start = st.get("pid_start")
    return start is None or proc_start(pid) in (None, start)


def run_status(run_dir: Path) -> dict:
    """Status with a dead worker detected: 'running' whose worker is gone becomes 'crashed', on disk too.

    Whoever notices first (this call from the CLI or the dashboard, or the launcher reaping its
    child, see :func:`record_exit`) writes it, so ``status.json`` tells the truth to every reader.
    Liveness is the worker's own (:func:`worker_alive`: pid and start time, or heartbeat), so a
    restarted dashboard, or a second one, sees live runs live. A worker on another host that
    went silent is reported crashed here but not written: its host may come back.
    """
    st = read_json_stamped(Path(run_dir) / "status.json", {})
    st = dict(st) if isinstance(st, dict) else {}  # the stamped value is shared: hand out a copy
    pid = st.get("pid")
    if st.get("state") == "running" and isinstance(pid, int) and not worker_alive(run_dir, st):
        if st.get("host") and st["host"] != socket.gethostname():
            age = heartbeat_age(run_dir) or 0.0
            return {**st, "state": "crashed", "error": f"no heartbeat from {st['host']} for {age:.0f} s (lost?)"}
        st = record_exit(run_dir, pid, None) or st
    return st


def record_exit(run_dir: Path, pid: int, returncode: int | None, detail: str = "") -> dict | None:
    """Mark the run 'crashed' if its worker ``pid`` ended while status.json still says running
    (or nothing). ``returncode`` as from Popen (−N: killed by signal N; None: not our child, unknown).
    Returns the new status, or None when the worker had reported an end itself."""
    path = Path(run_dir) / "status.json"
    st = read_json_dict(path)
    if st.get("state") not in (None, "running") or st.get("pid", pid) != pid:
        return None
    if returncode is None:
        how, extra = "worker process ended without reporting (killed?)", {}
    elif returncode < 0:
        name = (
            signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        )
        how, extra = f"worker killed by signal {name}", {"signal": name}
    else:
        how, extra = f"worker exited with code {returncode} without reporting", {"exit_code": returncode}
    how = f"{how}: {detail}" if detail else how  # e.g. the worker's last line (its one-line error)
    st = {**st, "state": "crashed", "pid": pid, "error": st.get("error") or how, "updated": time.time(), **extra}
    try:
        write_json(path, st)
    except OSError:
        pass  # read-only run directory: report it, cannot record it
    return st


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still "exists"; treat it as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


_INDEX: dict[str, tuple[int, dict]] = {}  # run dir -> (its mtime_ns, record) of runs that are not running
SETTLED_S = 2.0  # a directory changed this recently is read again (file clocks tick coarsely)


def list_runs(root: Path | None = None) -> list[dict]:
    """Every run directory under root (newest first) with its config, status and summary.

    A cheap index for folders of thousands of runs: a run that is not running is read once and
    kept while its directory's mtime stands still. Every file of a run directory is replaced by
    a rename (:func:`write_text_atomic`), and a rename changes the directory's mtime, so one
    ``stat`` per run (from ``scandir``) tells whether anything listed changed; only running
    runs (liveness, progress) are read on every call.
    """
    root = Path(root or default_runs_dir())
    try:
        with os.scandir(root) as it:
            entries = []
            for e in it:
                try:
                    if e.is_dir():  # follows a symlink, as Path.is_dir did
                        entries.append((e.stat().st_mtime_ns, e.path))
                except OSError:  # deleted meanwhile, or a dangling link
                    continue
    except OSError:  # missing, unreadable or a file: nothing to list
        return []
    entries.sort(reverse=True)
    now = time.time_ns()
    out = []
    for mtime, path in entries:
        hit = _INDEX.get(path)
        if hit is not None and hit[0] == mtime:
            out.append(hit[1])
            continue
        d = Path(path)
        config = read_json_stamped(d / "config.json", None)
        status = run_status(d)
        if config is None and not status and not (d / "config.json").exists() and not (d / "status.json").exists():
            continue  # not a run directory
        summary = read_json_stamped(d / "summary.json")
        rec = {
            "dir": d,
            "name": d.name,
            "config": config if isinstance(config, dict) else {},  # garbled or missing: {} (still listed)
            "status": status,
            "summary": summary if isinstance(summary, dict) else None,
        }
        settled = now - mtime > SETTLED_S * 1e9 and status.get("state") not in (None, "running")
        rec["stamp"] = mtime if settled else None  # callers may key their own per-run caches on it
        if settled:
            if len(_INDEX) > 50_000:
                _INDEX.clear()
            _INDEX[path] = (mtime, rec)
        out.append(rec)
    return out
