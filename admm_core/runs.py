"""The runs of a folder as a person reads them, and the two things done to one: stop and delete.

Read by the dashboard's Runs page (its table, details, Stop and Delete) and by ``admm runs``,
``admm stop`` and ``admm delete`` (the same rows, the same safety checks). Torch-free: everything
here works on what a run directory holds (``config.json``, ``status.json``, ``summary.json``,
``metrics.jsonl``) and on the worker's process. A record ``r`` is one of
:func:`admm_core.status.list_runs` (dir, name, config, status, summary).

The states here are those a worker writes (running, finished, stopped, diverged, crashed); a
launcher's own ('starting': the dashboard's worker before it reports) stay with the launcher.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
from pathlib import Path

from .rundir import default_runs_dir, read_json_dict, read_metrics_cached
from .status import pid_alive, run_status


def config_of(r: dict) -> dict:
    return r.get("config") or {}


def data_of(r: dict) -> str:
    return (config_of(r).get("data") or {}).get("name", "?")


def method_of(r: dict) -> str:
    return config_of(r).get("method", "?")


def state_label(state: str | None) -> str:
    """Plain text (for menus and tables)."""
    return state or "unknown"


def started_at(status: dict):
    """When the run first started: a resumed run's status keeps that as ``first_started`` (its
    ``started`` is the last resume's)."""
    return status.get("first_started") or status.get("started")


def done_epochs(status: dict, metrics) -> int:
    """Epochs the run has completed: its status's, else its last evaluation's (a status without an
    epoch: a resumed run's before its worker reports). ``metrics``: its metrics lines, or a function
    that reads them (called only when the status does not say)."""
    done = int(status.get("epoch") or 0)
    if not done:
        lines = metrics() if callable(metrics) else metrics
        if lines:
            done = max(done, int(lines[-1].get("epoch") or 0))
    return done


def run_done_epochs(run_dir: Path, status: dict) -> int:
    """Epochs the run has completed (:func:`done_epochs`, its metrics read if needed)."""
    return done_epochs(status, lambda: read_metrics_cached(run_dir))


def planned_epochs(r: dict):
    """The epochs a run is to do: its status's (a resume's target), else its config's; '?' when neither says."""
    return r["status"].get("epochs") or ((r["config"] or {}).get("train") or {}).get("epochs", "?")


def epochs_text(r: dict, between: str = "/") -> str:
    """A run's epochs done and planned ("3/10")."""
    return f"{run_done_epochs(r['dir'], r['status'])}{between}{planned_epochs(r)}"


def last_test(r: dict) -> float | None:
    """Final test accuracy (summary), else the last evaluation's while the run goes."""
    summ = r.get("summary") or {}
    acc = summ.get("test_accuracy")
    return last_eval(r["dir"]) if acc is None else round(100 * acc, 2)


def last_eval(run_dir: Path) -> float | None:
    """The last evaluation's test accuracy (%), from the lines added since the last read only."""
    ms = read_metrics_cached(run_dir)
    acc = ms[-1].get("test_accuracy") if ms else None
    return None if acc is None else round(100 * acc, 2)


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "—"
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def duration_seconds(st_: dict) -> float | None:
    """How long the run has gone, in seconds: from its (last) start to its end or last update."""
    start, end = st_.get("started"), st_.get("updated")
    sec = st_.get("elapsed_s")
    if sec is None and isinstance(start, (int, float)) and isinstance(end, (int, float)):
        sec = end - start
    return sec if isinstance(sec, (int, float)) and sec >= 0 else None


def duration_text(st_: dict) -> str:
    """How long the run has gone: from its (last) start to its end or last update ("1 h 02 min")."""
    return fmt_duration(duration_seconds(st_))


_SIZES: dict[str, tuple[tuple, int]] = {}


def dir_size(path: Path, stamp: tuple | None = None) -> int:
    """Bytes of the files under ``path``; with ``stamp`` (e.g. the run's state and update time)
    remembered until the stamp changes, so a listing of a thousand finished runs does not walk
    every directory on each refresh."""
    key = str(path)
    if stamp is not None and (hit := _SIZES.get(key)) is not None and hit[0] == stamp:
        return hit[1]
    total = _walk_size(path)
    if stamp is not None:
        _SIZES[key] = (stamp, total)
    return total


def _walk_size(path: Path) -> int:
    total = 0
    for p in Path(path).rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


# --- the worker: found from the run directory, signalled only when it is one --------------------


def worker_pid(run_dir: Path, status: dict | None = None) -> int | None:
    """The pid of the worker that reported in the run's status.json (its state 'running'), else None
    (``status``: that file already read)."""
    st = read_json_dict(Path(run_dir) / "status.json") if status is None else status
    if st.get("state") == "running" and isinstance(st.get("pid"), int):
        return st["pid"]
    return None


def is_worker_process(pid: int) -> bool:
    """Whether ``pid`` runs ``admm_core train``: a pid read from a (possibly crafted or stale)
    status.json must never make Stop signal some other process."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not Path("/proc/self").exists()  # no /proc here: cannot check, trust the run directory
    return b"admm_core" in args and b"train" in args


def stop_worker(pid: int | None) -> str | None:
    """SIGTERM the worker ``pid``: it ends the epoch step, writes 'stopped' and stays resumable.

    Returns None once signalled, else why it was not (one line): no pid, the process has ended,
    or it is not an ``admm_core train`` process (:func:`is_worker_process`), which is never signalled.
    """
    if pid is None:
        return "no worker pid recorded"
    if not pid_alive(pid):
        return f"its worker (pid {pid}) has ended"
    if not is_worker_process(pid):
        return f"pid {pid} is not an admm_core train process; not signalled"
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return f"its worker (pid {pid}) has ended"
    return None


def stop_run(run_dir: str | Path, pid: int | None = None) -> str | None:
    """SIGTERM the run's worker: the one its status.json names while 'running', else ``pid`` (a
    launcher's record of a worker that has not reported yet). None once signalled, else why not
    (:func:`stop_worker`); a worker of another host is never signalled: its pid is that machine's."""
    st = read_json_dict(Path(run_dir) / "status.json")
    host = st.get("host")
    if st.get("state") == "running" and host and host != socket.gethostname():
        return f"its worker runs on {host}; stop it there"
    return stop_worker(worker_pid(run_dir, st) or pid)


# --- confinement: only a run directory strictly inside one allowed root is deleted ---------------


def allowed_root() -> Path:
    """$ADMM_RUNS_ROOT, else the default runs folder ($ADMM_RUNS or ./runs), symlinks resolved."""
    return Path(os.environ.get("ADMM_RUNS_ROOT") or default_runs_dir()).expanduser().resolve()


def confine_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` itself (not a symlink), strictly inside :func:`allowed_root`; else PermissionError."""
    run_dir = Path(run_dir)
    base = allowed_root()
    if run_dir.is_symlink():
        raise PermissionError(f"{run_dir}: a symbolic link, not a run directory; not touched")
    real = run_dir.resolve()
    if base not in real.parents:
        raise PermissionError(f"{run_dir}: outside the allowed runs root {base}; not touched")
    return real


def delete_run(run_dir: str | Path, read_status=run_status, live: tuple = ("running",)) -> None:
    """Remove a run directory: only a real directory (no symlink) strictly inside the allowed root,
    whose state (``read_status``: a launcher's reader may add its own, e.g. 'starting') is not one of
    ``live``. RuntimeError when it runs or is not a run directory."""
    run_dir = confine_run_dir(run_dir)
    if read_status(run_dir).get("state") in live:
        raise RuntimeError(f"{run_dir.name} is running; stop it first")
    if not ((run_dir / "config.json").exists() or (run_dir / "status.json").exists()):
        raise RuntimeError(f"{run_dir} is not a run directory")
    shutil.rmtree(run_dir)  # rmtree removes links inside without following them
