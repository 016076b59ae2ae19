"""Starting a background worker (a training run, a sweep) that outlives whoever started it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # the folder holding admm_core/: `python -m admm_core` resolves
NICE = 5  # a worker's niceness (experiments/thousand_runs.py --worker-nice measures others)
AUTOGROUP = Path("/proc/self/autogroup")  # Linux's per-session scheduling group (sched(7), "autogroup")
AUTOGROUP_NICE = True  # give the worker's autogroup the niceness too (False: the ablation's "before")


def spawn_detached(cmd: list[str], log_path: Path, env: dict | None = None) -> tuple[subprocess.Popen, list[str]]:
    """(process, command run): ``cmd`` in its own session (a signal to the caller's group or a closed
    dashboard leaves it running), stdin closed, stdout and stderr appended to ``log_path``, and at a
    lower priority where ``nice`` exists: a worker takes every core it can, and the dashboard and the
    browser stay responsive (a CI run saw the live chart lag 4-8 s behind a worker at normal priority).
    ``nice`` execs the command, so the pid is the worker's."""
    if shutil.which("nice"):
        cmd = ["nice", "-n", str(NICE), *cmd]
    if AUTOGROUP_NICE and AUTOGROUP.exists() and shutil.which("sh"):
        # The worker's new session is its own autogroup, and with autogroups on (the kernel's default here)
        # CFS shares the CPU between autogroups first: `nice` alone only ranks the worker's threads against
        # each other, so 4 workers took 4/5 of the cores from the browser whatever their niceness.
        # The autogroup's niceness is set from inside the session, before the exec.
        cmd = ["sh", "-c", f'echo {NICE} > /proc/self/autogroup 2>/dev/null; exec "$@"', "sh", *cmd]
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
