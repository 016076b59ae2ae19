"""``admm evaluate``: a run's checkpoint on its test set (and training set), as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..checkpoint import load_checkpoint
from ..network import build
from ..spec.config import RunConfig
from .train import own_source

NAME = "evaluate"


def add_parser(sub) -> None:
    e = sub.add_parser(NAME, help="evaluate a run's checkpoint")
    e.add_argument("--run", required=True)
    e.add_argument("--data-root")
    e.set_defaults(func=run)


def run(a) -> int:
    run_dir = Path(a.run)
    source = own_source(run_dir)
    if source:  # a run of --model FILE.py:Name: the same file again, refused if it changed
        from .. import modelfile, own

        model = modelfile.reload(source, f"--run {str(run_dir)!r}")
        print(json.dumps(own.evaluate(model, run_dir), indent=2))
        return 0
    cfg = RunConfig.from_json((run_dir / "config.json").read_text())
    if a.data_root:
        cfg = cfg.replace(data__root=a.data_root)
    sess = build(cfg)
    epoch, _ = load_checkpoint(run_dir / "checkpoint.pt", sess)
    with torch.no_grad():
        m = sess.evaluate()
    print(json.dumps({"epoch": epoch, **m}, indent=2))
    return 0
