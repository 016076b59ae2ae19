"""Training methods behind one protocol, chosen by name from :data:`METHODS`.

Adding a method is one module with a settings dataclass (see :mod:`.base`) and one entry here.
"""

from __future__ import annotations

from ..errors import ConfigError
from .admm_closed import ADMMClosed
from .backprop import SGD, Adam
from .bcd import BCD
from .block_admm import BlockADMM
from .dladmm import DLADMM
from .gotmare import Gotmare
from .online_admm import OnlineADMM
from .taylor import Taylor

METHODS = {m.name: m for m in (BlockADMM, OnlineADMM, SGD, Adam, ADMMClosed, Taylor, DLADMM, BCD, Gotmare)}


def make_method(name: str, params: dict | None = None):
    """Settings object of method ``name``; unknown or bad settings raise ConfigError."""
    if name not in METHODS:
        raise ConfigError(f"method = {name!r}: unknown method; choose from {sorted(METHODS)}")
    cls = METHODS[name]
    params = dict(params or {})
    known = {s["name"] for s in cls.settings()}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(f"{name}: no setting {', '.join(map(repr, unknown))} (settings: {', '.join(sorted(known))})")
    try:
        return cls(**params)
    except TypeError as e:
        raise ConfigError(f"{name}: {e}") from None
