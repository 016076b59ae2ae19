"""The dashboard's Launch: ``python -m admm_core sweep`` as a background process in its own session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ..runs import write_json
from .study import SweepSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder holding admm_core/


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
    if os.name == "posix":
        cmd = ["nice", "-n", "5", *cmd]
    with open(log_path, "ab") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=str(PROJECT_ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    import threading

    threading.Thread(target=proc.wait, daemon=True).start()
    write_json(logs / f"{spec.name}.json", {"pid": proc.pid, "cmd": cmd, "launched": time.time()})
    return proc.pid, log_path
