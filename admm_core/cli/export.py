"""``admm export tensorboard RUN…``: runs' ``metrics.jsonl`` as TensorBoard event files.

For runs written before the run loop wrote event files, or with ``train.tensorboard`` off: the
files go into each run directory (replacing any there), or under ``--out DIR/<run name>/``. Every
bad RUN is named before anything is written.
"""

from __future__ import annotations

from pathlib import Path

from .. import tboard
from ..errors import ConfigError
from ..status import run_busy

NAME = "export"


def add_parser(sub) -> None:
    e = sub.add_parser(NAME, help="export runs to other tools' formats (tensorboard)")
    to = e.add_subparsers(dest="format", required=True)
    t = to.add_parser("tensorboard", help="write runs' metrics as TensorBoard event files")
    t.add_argument("runs", nargs="+", metavar="RUN", help="run directories")
    t.add_argument("--out", metavar="DIR", help="write under DIR/<run name>/ instead of into each run directory")
    t.set_defaults(func=run)


def run(a) -> int:
    runs = [Path(r) for r in a.runs]
    bad = []
    for r in runs:
        if not (r / "metrics.jsonl").is_file():
            bad.append(f"RUN {str(r)!r}: no metrics.jsonl there (not a run directory)")
        elif not a.out and run_busy(r):
            bad.append(f"RUN {str(r)!r}: being trained now; its run loop writes its event files already")
    names = [r.resolve().name for r in runs]
    if a.out and len(set(names)) != len(names):
        bad.append(f"--out {a.out!r}: two RUNs share a folder name ({', '.join(sorted(names))})")
    if bad:
        raise ConfigError("; ".join(bad))
    for r, name in zip(runs, names):
        out = Path(a.out) / name if a.out else r
        lines, values = tboard.export(r, out)
        print(f"{r}: {lines} metrics lines, {values} scalars -> {out}")
    return 0
