"""Training methods behind one protocol, chosen by name from :data:`METHODS`.

Adding a method is one module with a settings dataclass (see :mod:`.base`) and one
:func:`register_method` line here (docs/extending.md): the CLI, the dashboard's form and live
charts, the memory estimate and the run loop read everything else from the class.
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

METHODS: dict[str, type] = {}


def register_method(cls: type) -> type:
    """Add method class ``cls`` to :data:`METHODS` under ``cls.name`` (usable as a decorator).

    Registering the same class again is a no-op; another class under a taken name is refused."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name == "?":
        raise ConfigError(f"register_method: {cls.__name__} has no name (set the class attribute name = '...')")
    if METHODS.get(name, cls) is not cls:
        raise ConfigError(f"register_method: a method named {name!r} is already registered ({METHODS[name].__name__})")
    METHODS[name] = cls
    return cls


for _cls in (BlockADMM, OnlineADMM, SGD, Adam, ADMMClosed, Taylor, DLADMM, BCD, Gotmare):
    register_method(_cls)
# DeepFacto, a method of its own kind of run, registers itself: admm_core.deepfacto.method


def names_for(kind: str) -> tuple[str, ...]:
    """The registered methods whose runs are of ``kind`` (:data:`admm_core.kinds.KINDS`): the
    network methods are the CLI's and the Train form's choices; deepfacto runs with its own task."""
    return tuple(name for name, cls in METHODS.items() if getattr(cls, "kind", "network") == kind)


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
