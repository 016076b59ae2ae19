"""``admm runs [--root DIR] [--json]``: every run of a runs folder, newest first.

The dashboard's Runs table on the command line, made by the same functions (:mod:`admm_core.runs`):
per run directory its id, data, method, state, epochs done / planned, the final test accuracy (the
last evaluation's while it runs), how long it has gone and its size on disk; the error of a failed
run where some run has one. ``--json``: the same as a list of objects, numbers unformatted, for scripts.
"""

from __future__ import annotations

import json

from .. import runs as R
from ..rundir import default_runs_dir
from ..spec.resources import human
from ..status import list_runs
from .compare import text_table

NAME = "runs"
COLUMNS = ("run", "data", "method", "state", "epoch", "test %", "duration", "size")
SPARSE = ("error",)  # shown only where some run has one, as on the Runs page


def add_parser(sub) -> None:
    c = sub.add_parser(NAME, help="every run of a runs folder, newest first: state, epochs, test accuracy, size")
    c.add_argument("--root", metavar="DIR", help="the runs folder (default: $ADMM_RUNS, else ./runs)")
    c.add_argument("--json", action="store_true", help="print the runs as a JSON list (numbers unformatted)")
    c.set_defaults(func=run)


def row(r: dict) -> dict:
    """A run as the table shows it (the Runs page's cells)."""
    st = r["status"]
    test = R.last_test(r)
    return {
        "run": r["name"],
        "data": R.data_of(r),
        "method": R.method_of(r),
        "state": R.state_label(st.get("state")),
        "epoch": R.epochs_text(r),
        "test %": None if test is None else f"{test:.2f}",
        "duration": R.duration_text(st),
        "size": human(R.dir_size(r["dir"])),
        "error": st.get("error") or "",
    }


def record(r: dict) -> dict:
    """A run for ``--json``: the same facts, numbers as numbers (seconds, bytes, %)."""
    st = r["status"]
    planned = R.planned_epochs(r)
    return {
        "run": r["name"],
        "dir": str(r["dir"]),
        "data": R.data_of(r),
        "method": R.method_of(r),
        "state": R.state_label(st.get("state")),
        "epochs_done": R.run_done_epochs(r["dir"], st),
        "epochs": planned if isinstance(planned, int) else None,
        "test_percent": R.last_test(r),
        "duration_s": R.duration_seconds(st),
        "size_bytes": R.dir_size(r["dir"]),
        "started": R.started_at(st),
        "updated": st.get("updated"),
        "pid": st.get("pid") if st.get("state") == "running" else None,
        "error": st.get("error"),
    }


def run(a) -> int:
    root = a.root or default_runs_dir()
    recs = list_runs(root)
    if a.json:
        print(json.dumps([record(r) for r in recs], indent=2))
        return 0
    if not recs:
        print(f"no runs in {root}")
        return 0
    rows = [row(r) for r in recs]
    columns = [*COLUMNS, *(k for k in SPARSE if any(x[k] for x in rows))]
    print(text_table(rows, columns))
    return 0
