"""Starting a background worker (a training run, a sweep) that outlives whoever started it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # the folder holding admm_core/: `python -m admm_core` resolves
NICE = 5  # a worker's niceness (experiments/thousand_runs.py --worker-nice measures others)


def spawn_detached(cmd: list[str], log_path: Path, env: dict | None = None) -> tuple[subprocess.Popen, list[str]]:
    """(process, command run): ``cmd`` in its own session (a signal to the caller's group or a closed
    dashboard leaves it running), stdin closed, stdout and stderr appended to ``log_path``, and at a
    lower priority where ``nice`` exists: a worker takes every core it can, and the dashboard and the
    browser stay responsive (a CI run saw the live chart lag 4-8 s behind a worker at normal priority).
    ``nice`` execs the command, so the pid is the worker's."""
    if shutil.which("nice"):
        cmd = ["nice", "-n", str(NICE), *cmd]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=str(PROJECT_ROOT),
            env=os.environ.copy() if env is None else env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, cmd
