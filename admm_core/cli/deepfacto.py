"""``admm deepfacto bench | evaluate | grid | ship``: DeepFacto's commands (each parses its own options)."""

from __future__ import annotations

import sys

from ..deepfacto.commands import bench, evaluate, ship
from ..errors import CheckpointError, ConfigError, DataError, ImageError
from ..heatmaps import grid
from ..rundir import os_error_line

NAME = "deepfacto"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="DeepFacto on LFWA: bench | evaluate | grid (see admm deepfacto)", add_help=False)


DEEPFACTO_USAGE = (
    "usage: admm deepfacto {bench [--ranks 4,32,256] [--out DIR] [--markdown FILE] [--set NAME=VALUE ...]"
    " | evaluate --run DIR [--set svm_c=...] | grid --run DIR --out PNG | ship --run DIR [--run DIR] [--out DIR]}"
)


def main(argv: list) -> int:
    """`admm deepfacto bench|evaluate|grid|ship ...` (each has its own parser)."""
    commands = {"bench": bench, "evaluate": evaluate, "grid": grid, "ship": ship}
    if not argv or argv[0] not in commands:
        print(DEEPFACTO_USAGE, file=sys.stderr)
        return 2
    try:
        return commands[argv[0]](argv[1:])
    except (ConfigError, DataError, ImageError, CheckpointError, FileNotFoundError) as e:  # one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk during an evaluation: one line, the run's files unchanged
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 1
