"""Training methods behind one protocol: the engine's class of each method record.

A method's record (its settings, checks and declarations) is the spec layer's
(:data:`admm_core.spec.methods.METHODS`); the engine class the record names (``implementation``,
an :class:`~.base.Engine`) holds it and adds the protocol calls (:mod:`.base`). :func:`make_method` builds the one method object a run uses. Adding a method
is one module and one ``register_method`` line (docs/extending.md).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..spec.methods import make_settings, record
from ..spec.refs import resolve
from .admm_closed import ADMMClosed
from .backprop import SGD, Adam
from .base import Engine
from .bcd import BCD
from .block_admm import BlockADMM
from .dladmm import DLADMM
from .online_admm import OnlineADMM
from .taylor import Taylor

BUILT_IN = (BlockADMM, OnlineADMM, SGD, Adam, ADMMClosed, Taylor, DLADMM, BCD)  # gotmare: BlockADMM


def implementation(name: str) -> type:
    """The engine class that runs method ``name``: its record itself when it defines the protocol
    calls (a plugin's one module), else the class the record names (``implementation``)."""
    cls = record(name)
    if callable(getattr(cls, "run_epoch", None)):
        return cls
    if cls.implementation is None:
        raise ConfigError(
            f"method = {name!r}: runs of kind {cls.kind!r} run with their own task, not the network loop"
            + (" (admm train --preset lfwa-deepfacto)" if cls.kind == "deepfacto" else "")
        )
    impl = resolve(cls.implementation, f"method = {name!r}")
    if not (isinstance(impl, type) and issubclass(impl, Engine)):
        raise ConfigError(f"method = {name!r}: {cls.implementation!r} is not an engine class (derive it from Engine)")
    return impl


def make_method(name: str, params: dict | None = None):
    """The method object of ``name`` with settings ``params`` (checked by its record; unknown or bad
    settings raise ConfigError): the object whose protocol calls train a network."""
    settings = params if isinstance(params, record(name)) else make_settings(name, params)
    impl = implementation(name)
    if type(settings) is impl:  # a plugin's one module: the record is its own engine
        return settings
    return impl(settings)  # the engine holds the record


__all__ = ["BUILT_IN", "implementation", "make_method"]
