"""PyTorch imported on first use, so the dashboard can list runs and check settings without it.

``import torch`` costs about 500 MB resident and a second or more; the dashboard's Runs, Compare
and Train pages only read run files and validate settings. The modules they import name torch
through these stand-ins (``from .lazy import torch, nn, F``): each imports the real module the
first time one of its attributes is asked for, and hands out the real attribute every time (no
copy is kept, so ``torch.save = f`` in a test is seen by every module). A class that subclasses
``nn.Module`` needs the real torch when its module is imported: such modules (blocks, faces,
deepfacto's trainer and inference) are imported inside the functions that use them.
"""

from __future__ import annotations

import functools
import importlib
import types


class LazyModule(types.ModuleType):
    """Module ``name``, imported when one of its attributes is first read."""

    def __init__(self, name: str):
        super().__init__(name)
        self._real = None

    def __getattr__(self, attr: str):
        real = self.__dict__["_real"]
        if real is None:
            real = self.__dict__["_real"] = importlib.import_module(self.__name__)
        return getattr(real, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r} ({'imported' if self._real is not None else 'not imported yet'})>"


torch = LazyModule("torch")
nn = LazyModule("torch.nn")
F = LazyModule("torch.nn.functional")
dist = LazyModule("torch.distributed")


def no_grad(fn):
    """``@torch.no_grad()`` for a plain function, without importing torch where it is defined."""

    @functools.wraps(fn)
    def without_grad(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return without_grad
