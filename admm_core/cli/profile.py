"""``admm profile``: where an epoch's seconds go, per phase (:mod:`admm_core.speed`, which parses its own options)."""

from __future__ import annotations

from ..speed import main

NAME = "profile"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="where an epoch's seconds go, per phase (see admm profile --help)", add_help=False)


__all__ = ["NAME", "add_parser", "main"]
