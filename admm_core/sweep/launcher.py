"""The dashboard's Launch: ``python -m admm_core sweep`` as a background process in its own session."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..rundir import write_json
from ..spawn import PROJECT_ROOT, spawn_detached
from .study import SweepSpec

__all__ = ["PROJECT_ROOT", "launch"]


def launch(spec: SweepSpec, storage_url: str | None, root: Path, jobs: int = 1) -> tuple[int, Path]:
    """Start ``sweep`` as a background worker in its own session (the dashboard's Launch); (pid, log)."""
    _ = spec.dims  # fail here, in the caller, on a bad space
    root = Path(root)
    logs = root / ".sweeps"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{spec.name}.log"
    cmd = [
        sys.executable,
        "-m",
        "admm_core",
        "sweep",
        "--name",
        spec.name,
        "--preset",
        spec.preset,
        "--method",
        spec.method,
    ]
    cmd += ["--trials", str(spec.trials), "--objective", spec.objective, "--pruner", spec.pruner, "--jobs", str(jobs)]
    for s in spec.space:
        cmd += ["--space", s]
    for flag, v in (("--epochs", spec.epochs), ("--train-limit", spec.train_limit), ("--test-limit", spec.test_limit)):
        if v:
            cmd += [flag, str(v)]
    if storage_url:
        cmd += ["--storage", storage_url]
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONUNBUFFERED": "1"}
    proc, cmd = spawn_detached(cmd, log_path, env)
    import threading

    threading.Thread(target=proc.wait, daemon=True).start()
    write_json(logs / f"{spec.name}.json", {"pid": proc.pid, "cmd": cmd, "launched": time.time()})
    return proc.pid, log_path
