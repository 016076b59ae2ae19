"""``admm cuts FILE.py:Name``: a network's cut points on its traced graph, with their output shapes
(what ``--split`` may name), the way torchvision's ``get_graph_node_names`` lists nodes."""

from __future__ import annotations

import json

import torch

from ..errors import ConfigError
from ..spec.datasets import DATASETS, names_for
from ..spec.kinds import NETWORK
from ..spec.settings import parse_widths

NAME = "cuts"


def add_parser(sub) -> None:
    c = sub.add_parser(NAME, help="list a network's cut points (for --split) with their output shapes")
    c.add_argument("model", metavar="FILE.py:NAME", help="an nn.Module class or a no-argument function in FILE.py")
    c.add_argument(
        "--data", default="digits", help=f"the input shape of this data set ({', '.join(names_for(NETWORK))})"
    )
    c.add_argument("--shape", help="or the input shape per sample, e.g. 3,32,32")
    c.add_argument("--leaf-modules", metavar="PATHS", help="module paths kept whole, not traced (comma-separated)")
    c.add_argument("--all", action="store_true", help="every graph node, not only where a module ends")
    c.add_argument("--json", action="store_true", help="the rows as JSON")
    c.set_defaults(func=run)


def run(a) -> int:
    from .. import modelfile
    from ..own import cut_table

    if a.shape:
        shape = parse_widths(a.shape, "--shape")
    elif a.data in DATASETS:
        shape = tuple(DATASETS[a.data].input_shape)
    else:
        raise ConfigError(f"--data {a.data!r}: no such data set (choose from {', '.join(names_for(NETWORK))})")
    model, _ = modelfile.load(a.model)
    leaves = [s for s in (a.leaf_modules or "").split(",") if s]
    rows = cut_table(model, torch.randn(2, *shape), leaves, everything=a.all)
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    print(f"{'cut point':<{width}}  {'output shape':<16} valid")
    for r in rows:
        shape_text = "×".join(map(str, r["out_shape"])) if r["out_shape"] else "?"
        also = f"  (= {', '.join(r['also'])})" if r["also"] else ""
        print(f"{r['name']:<{width}}  {shape_text:<16} {'yes' + also if r['valid'] else 'no: ' + r['why']}")
    return 0
