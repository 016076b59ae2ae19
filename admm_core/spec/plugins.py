"""Methods, architectures and data sets from other installed packages, found through entry points.

A package adds records by declaring them in its metadata (``pyproject.toml``)::

    [project.entry-points."admm_core.methods"]
    toy-penalty = "toy_plugin.record:ToyPenalty"      # a MethodBase subclass; its ``name`` is the key

    [project.entry-points."admm_core.archs"]
    tiny-cnn = "toy_plugin.record:TINY_CNN"           # an Arch record, registered under the key

    [project.entry-points."admm_core.datasets"]
    digits-images = "toy_plugin.record:DIGITS_IMAGES" # a DatasetSpec; its ``name`` is the key

Each registry (:data:`~admm_core.spec.methods.METHODS`, :data:`~admm_core.spec.archs.ARCHS`,
:data:`~admm_core.spec.datasets.DATASETS`) is a :class:`PluginRegistry`: the first time it is read
after :mod:`admm_core.spec` is imported it loads its group's entry points
(:func:`importlib.metadata.entry_points`), so every process that reads a registry sees the same
records: the CLI, a notebook and a dashboard worker (``python -m admm_core train``) alike, with no
import to add. An entry point that fails to load (its module does not import, its object is not a
record, its name is taken) is left out with one line on stderr naming it; the other records work,
and asking for its name gives that reason in the unknown-name message (:func:`failure`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from importlib import metadata

GROUPS = ("admm_core.methods", "admm_core.archs", "admm_core.datasets")
FAILED: dict[str, dict[str, str]] = {g: {} for g in GROUPS}  # group -> {entry point name: why it is left out}
_READY = False  # set once admm_core.spec is imported: a registry read while it is imported is its own
_LOCK = threading.RLock()


class PluginRegistry(dict):
    """A registry (name -> record) that adds its entry point group's records the first time it is read.

    ``add(name, obj)`` registers one loaded entry point's object (raising on a wrong one). Reads
    (``[]``, ``in``, ``get``, iteration, ``len``, ``keys``/``values``/``items``) load first; writes
    do not (the built-in records and ``register_*`` calls)."""

    def __init__(self, group: str, records=(), add: Callable[[str, object], object] | None = None):
        super().__init__(records)
        self.group, self.add, self._loaded, self._loading = group, add, False, False

    def load(self) -> None:
        if self._loaded or not _READY or self.add is None:
            return
        with _LOCK:  # another thread waits here until every record is in
            if self._loaded or self._loading:  # _loading: a plugin module reading the registry as it loads
                return
            self._loading = True
            try:
                for ep in entry_points(self.group):
                    try:
                        self.add(ep.name, ep.load())
                    except Exception as e:  # noqa: BLE001 - any failure of a foreign module leaves it out, said once
                        why = f"{type(e).__name__}: {e}"
                        FAILED[self.group][ep.name] = f"{describe(ep)} failed to load: {why}"
                        print(f"admm_core: plugin {describe(ep)} left out: {why}", file=sys.stderr)
            finally:
                self._loading, self._loaded = False, True

    def __getitem__(self, key):
        if not dict.__contains__(self, key):
            self.load()
        return dict.__getitem__(self, key)

    def __contains__(self, key) -> bool:
        if not dict.__contains__(self, key):
            self.load()
        return dict.__contains__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):
        self.load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load()
        return dict.__len__(self)

    def keys(self):
        self.load()
        return dict.keys(self)

    def values(self):
        self.load()
        return dict.values(self)

    def items(self):
        self.load()
        return dict.items(self)


def entry_points(group: str) -> list:
    """The group's entry points, one per name (the first found on ``sys.path`` where a distribution
    is found twice)."""
    seen: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        seen.setdefault(ep.name, ep)
    return list(seen.values())


def describe(ep) -> str:
    dist = getattr(ep, "dist", None)
    source = f", from {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {ep.name!r} = {ep.value!r} (group {ep.group}{source})"


def failure(group: str, name) -> str:
    """``"; the plugin entry point … failed to load: …"`` where ``name`` is a plugin of ``group`` that
    failed to load, else "": the tail of the registry's unknown-name message."""
    why = FAILED[group].get(name) if isinstance(name, str) else None
    return f"; the plugin {why}" if why else ""


def check_name(group: str, name: str, record_name) -> None:
    if record_name != name:
        raise ValueError(f"its record's name is {record_name!r}, not the entry point's name {name!r} ({group})")


def ready() -> None:
    """Let the registries load their plugins (called at the end of ``admm_core/spec/__init__.py``, so
    a plugin's module can import any of the spec layer)."""
    global _READY
    _READY = True


__all__ = ["FAILED", "GROUPS", "PluginRegistry", "entry_points", "failure", "ready"]
