"""``admm methods``: the method registry, each method's settings with their defaults and help, and
where a network of one's own (``admm train --model``, ``admm_core.own.train``) gets another value
by default (the measured recipe, :data:`admm_core.spec.presets.OWN_DEFAULTS`)."""

from __future__ import annotations

from ..spec.methods import METHODS
from ..spec.presets import OWN_DEFAULTS

NAME = "methods"


def add_parser(sub) -> None:
    sub.add_parser(NAME, help="list methods and their settings").set_defaults(func=run)


def run(a) -> int:
    for name, cls in METHODS.items():
        print(f"{name}: {cls.summary}")
        for s in cls.settings():
            choices = f" {list(s['choices'])}" if s["choices"] else ""
            own = OWN_DEFAULTS.get(name, {})
            differs = s["name"] in own and own[s["name"]] != s["default"]
            mark = f" (a network of one's own: {own[s['name']]!r})" if differs else ""
            print(f"    {s['name']} = {s['default']!r}{mark}{choices}  — {s['help']}")
    return 0
