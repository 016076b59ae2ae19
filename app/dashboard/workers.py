"""Worker processes and run directories: launch, stop, resume, delete, read.

A run started here is ``python -m admm_core train --config RUN/config.json --out RUN --quiet`` in a
session of its own, so closing the tab or restarting the dashboard neither stops nor loses it. The
only files the dashboard adds are ``launch.json`` (pid, command line) and ``worker.log`` (stdout and
stderr), so a worker that dies before it writes ``status.json`` is reported with its last words.
Stop, delete and the allowed root are the engine's (:mod:`admm_core.runs`, shared with the CLI);
what is added here is launch.json's pid and the 'starting' state.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from admm_core import child_env
from admm_core import runs as R
from admm_core.errors import CheckpointError
from admm_core.rundir import (
    checkpoint_world,
    default_runs_dir,
    new_run_dir,
    read_json_dict,
    unique_run_dir,
    write_atomic,
    write_text_atomic,
)
from admm_core.runs import allowed_root, confine_run_dir
from admm_core.spawn import spawn_detached
from admm_core.spec.config import ConfigError, RunConfig
from admm_core.spec.datasets import cache_dir
from admm_core.spec.deepfacto import DeepFactoConfig, run_config_dict, run_dir_name
from admm_core.spec.device import device_name
from admm_core.spec.faces import find_lfw
from admm_core.spec.resources import preflight
from admm_core.status import list_runs, pid_alive, record_exit, run_busy, run_status
from app.dashboard.models import resolve


def runs_root(root: str | Path | None = None) -> Path:
    return Path(root) if root else default_runs_dir()


# --- confinement: the page may only read, write and delete under one allowed root -------------


def confine_runs_root(text: str | Path | None) -> Path:
    """The runs folder typed in the sidebar, ``..`` and symlinks resolved, if it lies inside
    :func:`allowed_root`; else ConfigError naming the value."""
    base = allowed_root()
    if text is None or not str(text).strip():
        return runs_root()
    raw = str(text).strip()
    if "\x00" in raw:
        raise ConfigError(f"runs folder = {raw!r}: not a path")
    path = Path(raw).expanduser().resolve()  # relative to the working directory, as $ADMM_RUNS is
    if path != base and base not in path.parents:
        raise ConfigError(
            f"runs folder = {raw!r}: outside the allowed root {base} (set ADMM_RUNS_ROOT to allow another folder)"
        )
    if path.exists() and not path.is_dir():
        raise ConfigError(f"runs folder = {raw!r}: is a file, not a folder")
    return path


def safe_runs_root(text: str | Path | None) -> Path:
    """:func:`confine_runs_root`, else the default folder."""
    try:
        return confine_runs_root(text)
    except ConfigError:
        return runs_root()


def runs_root_problem(text: str | Path | None) -> str | None:
    """One line for the sidebar when the typed runs folder is refused or cannot be read (None when fine)."""
    try:
        root = confine_runs_root(text)
    except ConfigError as e:
        return f"{e}; showing {runs_root()}"
    try:
        if root.exists():
            next(root.iterdir(), None)
    except NotADirectoryError:  # the default folder may be a file
        return f"Runs folder `{root}` is a file, not a folder: choose another one."
    except OSError as e:
        return f"Runs folder `{root}` cannot be read: {e.strerror or e}."
    return None


def run_path(root: str | Path, name: str) -> Path:
    """``root/name`` for a run named on the page or in a URL (``?run=``): one plain path component,
    no symlink, inside the allowed root. Raises PermissionError otherwise."""
    name = str(name)
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise PermissionError(f"run = {name!r}: not a run name")
    return confine_run_dir(Path(root) / name)


def worker_command(args: list[str], processes: int = 1) -> list[str]:
    """The worker's command line; ``processes`` > 1 runs it under torchrun on this machine
    (``torch.distributed.run --standalone``: sample-sharded Z/U, admm_core.distributed)."""
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ValueError(f"processes = {processes!r}: must be a positive integer")
    cmd = [sys.executable, "-m", "admm_core", "train", *args, "--quiet"]
    if processes > 1:
        cmd[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
    return cmd


def _spawn(args: list[str], run_dir: Path, processes: int = 1) -> int:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc, cmd = spawn_detached(worker_command(args, processes), run_dir / "worker.log", env)
    write_text_atomic(run_dir / "launch.json", json.dumps({"pid": proc.pid, "cmd": cmd, "launched": time.time()}))

    # reap the child when it ends (no zombies) and, if it died without reporting, record how
    # in status.json (signal or exit code); the worker itself never depends on us
    def reap():
        rc = proc.wait()
        tail = log_tail(run_dir, 5).strip().splitlines()
        record_exit(run_dir, proc.pid, rc, tail[-1] if tail else "")

    threading.Thread(target=reap, daemon=True, name=f"reap-{proc.pid}").start()
    return proc.pid


def _launch(run_dir: Path, config_json: str, args: list[str] | tuple = (), processes: int = 1) -> Path:
    """Write RUN/config.json and start the worker training it; returns ``run_dir``."""
    write_text_atomic(run_dir / "config.json", config_json)
    _spawn(["--config", str(run_dir / "config.json"), "--out", str(run_dir), *args], run_dir, processes)
    return run_dir


def start_run(cfg: RunConfig, root: str | Path | None = None, processes: int = 1, checked: bool = False) -> Path:
    """Write RUN/config.json and launch a worker training it; returns the run directory.

    The preflight runs once, before anything is written: here, unless the caller ran it on ``cfg``
    (``checked``: the Train form's check is the preflight); a configuration that cannot run raises
    ConfigError / DataError and leaves no directory. The worker is told (``--preflighted``).
    ``processes`` > 1: that many processes through torchrun (block-admm / gotmare only)."""
    worker_command([], processes)  # bad value: ValueError before anything is written
    if not checked:
        preflight(cfg, processes=processes)
    run_dir = new_run_dir(cfg, runs_root(root))  # created atomically, unique even for starts in the same second
    return _launch(run_dir, cfg.to_json(), ["--preflighted"], processes)


def start_model_run(entry: str, split: list[str], cfg: RunConfig, root: str | Path | None = None) -> Path:
    """Launch ``admm train --model FILE.py:Name --split … --config RUN/config.json`` for a network of
    the models folder (:mod:`app.dashboard.models`): ``cfg`` but its network; the worker rewrites
    config.json as the run's and writes model.json."""
    path, name = resolve(entry)
    run_dir = unique_run_dir(f"{name.lower()}-{cfg.method}-s{cfg.train.seed}", runs_root(root))
    return _launch(run_dir, cfg.to_json(), ["--model", f"{path}:{name}", "--split", ",".join(split)])


def start_deepfacto(cfg: DeepFactoConfig, root: str | Path | None = None) -> Path:
    """Write RUN/config.json of a DeepFacto run and launch its worker (the lifecycle of :func:`start_run`).
    Checked first, so a bad start leaves no directory: LFWA is found and a given backbone loads."""
    device_name(cfg.device)
    find_lfw(cfg.data_root)
    if cfg.backbone_weights:
        check_backbone(cfg.backbone_weights)
    run_dir = unique_run_dir(run_dir_name(cfg), runs_root(root))
    return _launch(run_dir, json.dumps(run_config_dict(cfg), indent=2, sort_keys=True))


# the worker's own check of a backbone file (admm_core.faces.backbone.load_backbone), in a process of its own
_CHECK_BACKBONE = """import sys
from admm_core.faces.backbone import load_backbone
try:
    load_backbone(sys.argv[1])
except Exception as e:  # noqa: BLE001 - the parent raises it again
    print(type(e).__name__, str(e), sep="\\n", end="")
    sys.exit(1)
"""
_RAISED = {"FileNotFoundError": FileNotFoundError, "CheckpointError": CheckpointError}


def check_backbone(path: str | Path) -> None:
    """Raise what loading the backbone file ``path`` raises (FileNotFoundError, CheckpointError, else
    ValueError; the message names the file and why), asked of a short subprocess: the server never
    imports torch."""
    cmd = [sys.executable, "-c", _CHECK_BACKBONE, str(path)]
    done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return
    kind, _, message = done.stdout.partition("\n")
    last = (done.stderr.strip().splitlines() or [f"{path}: cannot be checked"])[-1]
    raise _RAISED.get(kind, ValueError)(message or last)


UPLOAD_LIMIT = 50 * 10**6  # bytes of an uploaded backbone: the server's cap (.streamlit/config.toml maxUploadSize)


def uploads_dir() -> Path:
    p = cache_dir() / "uploaded-backbones"
    p.mkdir(parents=True, exist_ok=True)
    return p


def saved_backbones() -> list[Path]:
    """Backbone files this machine has: trained and cached here, or uploaded (newest first)."""
    files = [*cache_dir().glob("lfw-backbone-*.pt"), *uploads_dir().glob("*.pt")]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def save_upload(name: str, data: bytes) -> Path:
    """Keep an uploaded backbone file, under a name made from its content (never the uploader's),
    if it loads into the face backbone (:func:`check_backbone`); else ValueError with the reason."""
    if len(data) > UPLOAD_LIMIT:
        raise ValueError(f"{name}: {len(data) / 10**6:.0f} MB, over the {UPLOAD_LIMIT // 10**6} MB limit")
    path = uploads_dir() / f"{hashlib.sha256(data).hexdigest()[:16]}.pt"

    def check(tmp: Path) -> None:
        try:
            check_backbone(tmp)
        except Exception as e:  # noqa: BLE001 - whatever the file is, it is refused with its reason
            raise ValueError(str(e).replace(str(tmp), name)) from None

    if not path.exists():  # the temporary is checked, then renamed (removed when refused)
        write_atomic(path, lambda f: f.write(data), durable=False, check=check)
    return path


def resume_run(run_dir: str | Path, epochs: int | None = None, processes: int | None = None) -> None:
    """Continue an ended run from its last checkpoint (to ``epochs``), in the world size that wrote it."""
    run_dir = confine_run_dir(run_dir)
    args = ["--resume", str(run_dir)]
    if epochs:
        args += ["--epochs", str(int(epochs))]
    if processes is None:
        processes = checkpoint_world(run_dir) or 1
    # the check and the launch are one step for every dashboard on this runs folder (two tabs,
    # two servers): the second Resume waits here, then sees the first one's worker 'starting'
    with open(run_dir / "launch.lock", "a") as claim:
        fcntl.flock(claim, fcntl.LOCK_EX)
        if state_of(run_dir)["state"] in ACTIVE or run_busy(run_dir):
            raise RuntimeError(f"{run_dir.name} is still running")
        # the last worker's pid goes first: with status.json gone, a reader would take that dead pid
        # for a new worker that ended before it reported ('crashed', seen by a second dashboard)
        (run_dir / "launch.json").unlink(missing_ok=True)
        (run_dir / "status.json").unlink(missing_ok=True)  # 'starting' until the worker writes its own
        _spawn(args, run_dir, processes)


def _launched_pid(run_dir: str | Path) -> int | None:
    pid = read_json_dict(Path(run_dir) / "launch.json").get("pid")
    return pid if isinstance(pid, int) else None


def worker_pid(run_dir: Path) -> int | None:
    """The reported worker's pid (:func:`admm_core.runs.worker_pid`), else launch.json's."""
    return R.worker_pid(run_dir) or _launched_pid(run_dir)


def stop_run(run_dir: str | Path) -> bool:
    """The engine's Stop (:func:`admm_core.runs.stop_run`), also of a worker not reported yet."""
    return R.stop_run(run_dir, _launched_pid(run_dir)) is None


def log_tail(run_dir: Path, n: int = 25) -> str:
    try:
        lines = (run_dir / "worker.log").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def error_tail(run_dir: Path, chars: int = 4000) -> str:
    """What a failed run left to read: the end of its error.txt (the traceback), else of its worker.log."""
    err = Path(run_dir) / "error.txt"
    try:
        return err.read_text(errors="replace")[-chars:] if err.exists() else log_tail(Path(run_dir))
    except OSError:
        return ""


def launching(run_dir: Path) -> bool:
    """Whether a dashboard holds the run's launch.lock (:func:`resume_run` is starting it now)."""
    path = Path(run_dir) / "launch.lock"
    try:
        if path.exists():
            with open(path, "a") as f:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        pass
    return False


# the states of a run that a worker trains, or is about to: the engine's "running" and this
# dashboard's "starting" (launched, not reported yet: state_of)
ACTIVE = ("running", "starting")


def _with_error(st: dict) -> dict:
    return {**st, "error": st.get("error") or "crashed"} if st["state"] == "crashed" else st


def state_of(run_dir: str | Path) -> dict:
    """The engine's run_status, plus 'starting' for a launched worker that has not reported yet."""
    run_dir = Path(run_dir)
    st = run_status(run_dir)
    if st.get("state"):
        return _with_error(st)
    pid = _launched_pid(run_dir)
    if pid and pid_alive(pid):
        return {"state": "starting", "pid": pid, "progress": 0.0}
    if pid is None and launching(run_dir):  # a Resume between its clean-up and its launch.json
        return {"state": "starting", "pid": None, "progress": 0.0}
    if pid:  # launched from here but never reported
        tail = log_tail(run_dir, 5).strip().splitlines()
        last = tail[-1] if tail else "no output"
        return {"state": "crashed", "pid": pid, "progress": 0.0, "error": f"worker ended before it reported: {last}"}
    return {"state": "unknown", "progress": 0.0, "error": None}


def delete_run(run_dir: str | Path) -> None:
    """The engine's delete, refused also while a worker launched from here has not reported."""
    R.delete_run(run_dir, state_of, ACTIVE)


def runs(root: str | Path | None = None) -> list[dict]:
    """list_runs with the dashboard's status (adds 'starting'); newest first."""
    # a status list_runs read (liveness checked) is not read again
    return [
        {**r, "status": _with_error(r["status"]) if r["status"].get("state") else state_of(r["dir"])}
        for r in list_runs(runs_root(root))
    ]
