"""``admm presets``: the paper's setups (and the fast ones), with what each is."""

from __future__ import annotations

from ..spec.presets import OTHER_PRESETS, PRESETS

NAME = "presets"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="list presets").set_defaults(func=run)


def run(a) -> int:
    width = max(map(len, [*PRESETS, *OTHER_PRESETS]))
    for name, p in PRESETS.items():
        print(f"{name:<{width}}  {p['help']}")
    for name, text in OTHER_PRESETS.items():
        print(f"{name:<{width}}  {text}")
    return 0
