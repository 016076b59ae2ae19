"""``admm delete RUN_DIR --yes``: remove a run directory, as the dashboard's Delete does.

The same rules (:func:`admm_core.runs.delete_run`): only a real directory (no symbolic link)
strictly inside the allowed runs root ($ADMM_RUNS_ROOT, else $ADMM_RUNS, else ./runs), holding a
config.json or status.json, whose worker is not running. ``--yes`` stands for the page's "Yes,
delete" box; without it nothing is removed. A refusal is one line and exit code 2.
"""

from __future__ import annotations

import sys

from .. import runs as R

NAME = "delete"


def add_parser(sub) -> None:
    c = sub.add_parser(NAME, help="remove a run directory inside the runs root (not while it runs)")
    c.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    c.add_argument("--yes", action="store_true", help="do remove it and its files (without it: nothing is removed)")
    c.set_defaults(func=run)


def run(a) -> int:
    if not a.yes:
        print(f"error: {a.run_dir}: not deleted; pass --yes to remove it and its files", file=sys.stderr)
        return 2
    try:
        R.delete_run(a.run_dir)
    except (PermissionError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"deleted {a.run_dir}")
    return 0
