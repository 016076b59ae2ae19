"""The method records, chosen by name from :data:`METHODS`.

A record is a frozen dataclass of settings deriving from :class:`~.base.MethodBase`: its fields
(each a :func:`~admm_core.spec.settings.setting`), its checks and what the CLI, the dashboard's
form and live charts, the memory estimate and the preflight read. The engine runs it through the
class the record names (``implementation``; :func:`admm_core.methods.make_method`). Adding a
method is one module and one :func:`register_method` line (docs/extending.md).
"""

from __future__ import annotations

from ...errors import ConfigError
from ..plugins import PluginRegistry, check_name, failure
from .backprop import AdamSettings, SGDSettings
from .base import MethodBase
from .block_admm import BlockADMMSettings, GotmareSettings
from .deepfacto import DeepFacto
from .lifted import ADMMClosedSettings, BCDSettings, DLADMMSettings, TaylorSettings
from .online_admm import OnlineADMMSettings

# the built-in records; an installed package's come from its "admm_core.methods" entry points (..plugins)
METHODS: dict[str, type] = PluginRegistry("admm_core.methods")
DEFAULT_METHOD = "block-admm"  # a new config's method, the dashboard's and the CLI's default


def register_method(cls: type) -> type:
    """Add method record ``cls`` to :data:`METHODS` under ``cls.name`` (usable as a decorator).

    Registering the same class again is a no-op; another class under a taken name is refused."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name == "?":
        raise ConfigError(f"register_method: {cls.__name__} has no name (set the class attribute name = '...')")
    if not (isinstance(cls, type) and issubclass(cls, MethodBase)):
        raise ConfigError(f"register_method: {cls!r} is not a method record (derive it from MethodBase)")
    if METHODS.get(name, cls) is not cls:
        raise ConfigError(f"register_method: a method named {name!r} is already registered ({METHODS[name].__name__})")
    METHODS[name] = cls
    return cls


def _add_plugin(name: str, cls) -> None:
    check_name("admm_core.methods", name, getattr(cls, "name", None))
    register_method(cls)


METHODS.add = _add_plugin


for _cls in (
    BlockADMMSettings,
    OnlineADMMSettings,
    SGDSettings,
    AdamSettings,
    ADMMClosedSettings,
    TaylorSettings,
    DLADMMSettings,
    BCDSettings,
    GotmareSettings,
    DeepFacto,  # the method of its own kind of run (admm_core.spec.kinds): DeepFactoTask runs it
):
    register_method(_cls)


def names_for(kind: str) -> tuple[str, ...]:
    """The registered methods whose runs are of ``kind`` (:data:`admm_core.spec.kinds.KINDS`): the
    network methods are the CLI's and the Train form's choices; deepfacto runs with its own task."""
    return tuple(name for name, cls in METHODS.items() if getattr(cls, "kind", "network") == kind)


def record(name: str) -> type:
    """The registered record of ``name`` (ConfigError naming the choices otherwise)."""
    if name not in METHODS:
        raise ConfigError(
            f"method = {name!r}: unknown method; choose from {sorted(METHODS)}{failure(METHODS.group, name)}"
        )
    return METHODS[name]


def make_settings(name: str, params: dict | None = None):
    """Settings object of method ``name`` (its record, checked); unknown or bad settings raise ConfigError."""
    cls = record(name)
    params = dict(params or {})
    known = {s["name"] for s in cls.settings()}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(f"{name}: no setting {', '.join(map(repr, unknown))} (settings: {', '.join(sorted(known))})")
    try:
        return cls(**params)
    except TypeError as e:
        raise ConfigError(f"{name}: {e}") from None


__all__ = ["DEFAULT_METHOD", "METHODS", "MethodBase", "make_settings", "names_for", "record", "register_method"]
