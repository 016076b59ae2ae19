"""``admm stop RUN_DIR [--wait S]``: stop a run's worker cleanly, as the dashboard's Stop does.

SIGTERM to the pid the run's status.json names, and only if that process really is an
``admm_core train`` process (:func:`admm_core.runs.stop_run`, the dashboard's own Stop): the
worker ends its epoch step, writes 'stopped' and stays resumable (``admm train --resume RUN_DIR``).
When there is nothing to stop (the run has ended, no worker has reported in it, its worker runs on
another host, or the pid is not a worker's, which is never signalled) it says why in one line and
exits with 2. ``--wait``: return once the status says the run has ended (exit 1 if it has not in time).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .. import runs as R
from ..status import run_status

NAME = "stop"
POLL_S = 0.2  # --wait reads the status this often


def add_parser(sub) -> None:
    c = sub.add_parser(
        NAME, help="stop a run's worker (SIGTERM, only to an admm_core train process); it stays resumable"
    )
    c.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    c.add_argument(
        "--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for the run to record its end"
    )
    c.set_defaults(func=run)


def refusal(run_dir: Path, status: dict) -> str | None:
    """Why the run has no worker to signal from here (None when its status names a running one)."""
    if not ((run_dir / "config.json").exists() or (run_dir / "status.json").exists()):
        return "not a run directory (no config.json or status.json)"
    state = status.get("state")
    if state is None:
        return "no worker has reported in it (no status.json); nothing to stop"
    if state != "running":
        return f"already {state}; no worker to stop"
    return None


def run(a) -> int:
    run_dir = Path(a.run_dir)
    status = run_status(run_dir)  # a worker that died without reporting is recorded 'crashed' here
    why = refusal(run_dir, status) or R.stop_run(run_dir)
    if why:
        print(f"error: {a.run_dir}: {why}", file=sys.stderr)
        return 2
    pid = status["pid"]
    print(f"{a.run_dir}: sent SIGTERM to its worker (pid {pid}); it ends its epoch step and writes 'stopped'")
    if a.wait <= 0:
        return 0
    deadline = time.monotonic() + a.wait
    while (status := run_status(run_dir)).get("state") == "running":
        if time.monotonic() > deadline:
            print(f"error: {a.run_dir}: still running after {a.wait:g} s", file=sys.stderr)
            return 1
        time.sleep(POLL_S)
    print(f"{a.run_dir}: {status.get('state')} at epoch {R.run_done_epochs(run_dir, status)}")
    return 0
