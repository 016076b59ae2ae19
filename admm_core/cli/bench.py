"""``admm bench``: the benchmarks (:mod:`admm_core.bench`, which parses its own options)."""

from __future__ import annotations

from ..bench import main

NAME = "bench"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="benchmarks (see python -m admm_core bench --help)", add_help=False)


__all__ = ["NAME", "add_parser", "main"]
