"""Command line: ``admm`` (``python -m admm_core``), one module per subcommand.

    admm train --preset mnist-mlp-mse --method block-admm --epochs 10
    admm train --resume runs/<dir>            # continue a stopped run
    admm train --model my_net.py:Net --split conv2,fc1 --data mnist   # your own network
    admm cuts my_net.py:Net --data mnist      # its cut points and their shapes
    admm presets | methods | archs | datasets
    admm evaluate --run runs/<dir>
    admm compare runs/<a> runs/<b> …          # what differs between runs, final and best accuracy
    admm runs [--root DIR] [--json]           # every run: state, epochs, test accuracy, duration, size
    admm stop runs/<dir>                      # SIGTERM its worker (only an admm_core train process)
    admm delete runs/<dir> --yes              # remove a run inside the runs root (not while it runs)
    admm export tensorboard runs/<dir> …      # event files for runs that have none
    admm sweep --preset digits-mlp --method block-admm --trials 12 --space 'beta=log:0.1:10'
    admm heatmaps --run RUN --image FACE.jpg --out grid.png
    admm deepfacto bench | evaluate | grid | ship      admm bench ...      admm profile ...

Each subcommand's module gives ``add_parser(sub)`` (its options; the parser's ``func`` is what it
runs); ``bench``, ``profile`` and ``deepfacto`` parse their own arguments (``main(argv)``).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError, DataError
from ..rundir import os_error_line
from . import (
    archs,
    bench,
    compare,
    cuts,
    datasets,
    deepfacto,
    delete,
    evaluate,
    export,
    heatmaps,
    methods,
    presets,
    profile,
    runs,
    stop,
    sweep,
    train,
)

SUBCOMMANDS = (
    train,
    cuts,
    presets,
    methods,
    archs,
    datasets,
    evaluate,
    compare,
    runs,
    stop,
    delete,
    export,
    bench,
    profile,
    deepfacto,
    sweep,
    heatmaps,
)
OWN_PARSER = {m.NAME: m for m in (bench, deepfacto, profile)}  # they parse the rest of the line themselves


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m admm_core", description="Block-ADMM workbench: train networks without end-to-end backprop"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(sub)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in OWN_PARSER:  # argparse.REMAINDER would drop their leading options
        return OWN_PARSER[argv[0]].main(argv[1:])
    args = make_parser().parse_args(argv)
    for k, v in vars(args).items():  # argparse turns a lone "--" value (``--hidden=--``) into []
        if v == []:
            setattr(args, k, "--")
        elif isinstance(v, list) and k == "set":
            setattr(args, k, ["--" if x == [] else x for x in v])
    try:
        return args.func(args)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:  # ValueError: bad image file / argument (message names it)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # unwritable run directory, full disk: one line naming the file
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 1
