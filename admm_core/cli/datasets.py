"""``admm datasets``: the data-set registry (:data:`admm_core.spec.datasets.DATASETS`) and which of
its sets are present here."""

from __future__ import annotations

from ..spec.datasets import DATASETS, available
from ..spec.kinds import NETWORK

NAME = "datasets"


def add_parser(sub) -> None:
    d = sub.add_parser(NAME, help="list data sets and whether each is present here")
    d.add_argument("--data-root")
    d.set_defaults(func=run)


def run(a) -> int:
    here = set(available(a.data_root))
    for name, s in DATASETS.items():
        where = f"ships with {s.ships_with}" if s.bundled else "<root>/" + " or <root>/".join(s.files)
        serves = "" if s.kind == NETWORK else f"; {s.kind} runs"
        print(
            f"{name}: {'available' if name in here else 'not found'}; input {s.input_shape}, {s.n_classes} {s.labels}, "
            f"{s.n_train} / {s.n_test} samples; {where}{serves}"
        )
    return 0
