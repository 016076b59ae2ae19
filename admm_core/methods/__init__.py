"""Training methods behind one protocol: the engine's class of each method record.

A method's record (its settings, checks and declarations) is the spec layer's
(:data:`admm_core.spec.methods.METHODS`); the class here derives from it and adds the protocol
calls (:mod:`.base`). :func:`make_method` builds the one method object a run uses. Adding a method
is one module and one ``register_method`` line (docs/extending.md).
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from ..spec.methods import make_settings, record
from ..spec.refs import resolve
from .admm_closed import ADMMClosed
from .backprop import SGD, Adam
from .bcd import BCD
from .block_admm import BlockADMM
from .dladmm import DLADMM
from .gotmare import Gotmare
from .online_admm import OnlineADMM
from .taylor import Taylor

BUILT_IN = (BlockADMM, OnlineADMM, SGD, Adam, ADMMClosed, Taylor, DLADMM, BCD, Gotmare)


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
    if not (isinstance(impl, type) and issubclass(impl, cls)):
        raise ConfigError(f"method = {name!r}: {cls.implementation!r} is not a class deriving from its record")
    return impl


def make_method(name: str, params: dict | None = None):
    """The method object of ``name`` with settings ``params`` (checked by its record; unknown or bad
    settings raise ConfigError): the object whose protocol calls train a network."""
    settings = params if isinstance(params, record(name)) else make_settings(name, params)
    impl = implementation(name)
    if type(settings) is impl:
        return settings
    # dataclasses.fields, not __dataclass_fields__: that also lists ClassVar pseudo-fields (a record's PAPER)
    return impl(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)})


__all__ = ["BUILT_IN", "implementation", "make_method"]
