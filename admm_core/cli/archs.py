"""``admm archs``: the architecture registry (:data:`admm_core.spec.archs.ARCHS`), layers and split
points, from the records' tables."""

from __future__ import annotations

from ..spec.archs import ARCHS, default_split, split_points
from ..spec.config import ModelConfig
from ..spec.kinds import NETWORK
from ..spec.tv import TV_RECORDS, prefetch

NAME = "archs"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="list architectures, their layers and split points").set_defaults(func=run)


def run(a) -> int:
    prefetch([(name, (3, 32, 32), 10) for name in TV_RECORDS])  # torchvision's tables: one child process for all
    for name, arch in ARCHS.items():
        cfg = ModelConfig(name)
        names = [n for n, _, _ in arch.table((3, 32, 32), cfg, 10)]
        serves = "" if arch.kind == NETWORK else f"; {arch.kind} runs"
        print(f"{name}: {arch.label or name}{' (image inputs)' if arch.image_input else ''}{serves}")
        split, default = ", ".join(split_points(cfg, names)), ",".join(default_split(cfg, names))
        print(f"    layers {', '.join(names)}; split after any of {split}; default {default}")
    return 0
