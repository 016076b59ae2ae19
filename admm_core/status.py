"""A run's life as other processes see it: ``status.json`` (:class:`RunStatus`, written by the
one run loop, :mod:`admm_core.loop`), the claim on the run directory, the worker's heartbeat and
system samples, whether the worker still lives, and the listing of every run with its status."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .errors import ConfigError
from .rundir import default_runs_dir, os_error_line, read_json_dict, read_json_stamped, write_json

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


def _process_age_s() -> float:
    """Seconds since this process started (/proc/self/stat field 22 against /proc/uptime); 0 if unknown."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            return max(0.0, float(f.read().split()[0]) - start)
    except (OSError, IndexError, ValueError):
        return 0.0


class SystemSampler:
    """One line of ``system.jsonl`` per :meth:`sample`: ``time``, ``epoch``, ``cpu_percent`` (this
    process's user + system CPU time over the wall time since the previous sample, the first one
    since the process started, × 100: 100 is one core busy, more with several threads), ``rss_bytes`` (VmRSS) and, once the process uses
    CUDA, ``gpu_allocated_bytes`` / ``gpu_max_allocated_bytes`` / ``gpu_reserved_bytes`` of the
    current device. Reads ``os.times`` and /proc only (no psutil); CUDA is never initialised here.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        # os.times() counts from the process's start: a short run still gets a figure (its start-up's)
        self._last = (time.monotonic() - _process_age_s(), 0.0)

    def sample(self, epoch: int | None = None) -> dict:
        now, cpu = time.monotonic(), sum(os.times()[:2])
        dt = now - self._last[0]
        rec: dict = {"time": time.time(), "epoch": epoch}
        # over less than 0.2 s the tick-granular CPU time says nothing
        rec["cpu_percent"] = round(100.0 * max(0.0, cpu - self._last[1]) / dt, 1) if dt >= 0.2 else None
        self._last = (now, cpu)
        rec["rss_bytes"] = _rss_bytes()
        torch = sys.modules.get("torch")  # the worker's torch; this module never imports it (run files only)
        if torch is not None and torch.cuda.is_initialized():  # a CPU run never initialises CUDA, nor does this
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


def _first_start(path: Path) -> float | None:
    """When the run in ``path``'s directory first started, from the status a previous process
    wrote (None for a new run, or an unreadable status)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict):
        return None
    first = old.get("first_started", old.get("started"))
    return first if isinstance(first, (int, float)) and not isinstance(first, bool) else None


class RunStatus:
    """``status.json`` of a run and the end of its life, written by the one run loop
    (:func:`admm_core.loop.run_loop`): running → finished / stopped / diverged (``summary.json``
    written) or crashed (``error.txt`` written, the error in the status).

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
        first = _first_start(self.path)
        if first is not None:  # a resume: "started" is this process's start, "first_started" the run's
            self.status["first_started"] = first
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
    """Whether process ``pid`` runs (a zombie does not; another user's process does)."""
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
