"""``admm methods``: the method registry, each method's settings with their defaults (the recipe
measured across the zoo; docs/deviations.md) and help."""

from __future__ import annotations

from ..spec.methods import METHODS

NAME = "methods"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="list methods and their settings").set_defaults(func=run)


def run(a) -> int:
    for name, cls in METHODS.items():
        print(f"{name}: {cls.summary}")
        for s in cls.settings():
            choices = f" {list(s['choices'])}" if s["choices"] else ""
            print(f"    {s['name']} = {s['default']!r}{choices}  — {s['help']}")
    return 0
