"""A record's torch half, named by import path: ``"package.module:attribute"``.

The spec layer declares an architecture, a data set or a method without importing the code that
builds its network, loads its tensors or runs its updates (that code imports torch). The record
names that code instead, as entry points do; the engine resolves the name where it builds, loads
or trains. A plugin may hand the callable itself.
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError


def resolve(ref, what: str):
    """The object ``ref`` names (``"module:attr"``), or ``ref`` itself when it is not a string.
    ``what`` names the record in the error (``"model.arch = 'mlp'"``)."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{what}: its implementation {ref!r} cannot be imported ({e})") from None
