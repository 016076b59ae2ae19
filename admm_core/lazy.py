"""PyTorch imported on first use, so the dashboard can list runs and check settings without it.

``import torch`` costs about 500 MB resident and a second or more; the dashboard's Runs, Compare
and Train pages only read run files and validate settings. The modules they import name torch
through these stand-ins (``from .lazy import torch, nn, F``). The first time an attribute of one
is read, the real module is imported and every stand-in held by a module of this project
(``admm_core``, ``app``) is replaced by it in that module's globals: from then on ``torch.x`` is
an ordinary module lookup (no cost in training loops), and ``torch.save = f`` in a test is seen
everywhere, as before. A class that subclasses ``nn.Module`` needs the real torch when its module
is imported: such modules (blocks, deepfacto's trainer and inference) are imported inside the
functions that use them, and ``faces.FaceBackbone`` is defined on first use.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types

_OURS = ("admm_core", "app")


class LazyModule(types.ModuleType):
    """Module ``name``, imported when one of its attributes is first read."""

    def __getattr__(self, attr: str):
        real = importlib.import_module(self.__name__)
        for name, mod in list(sys.modules.items()):  # the stand-in, wherever we hold it, becomes the module
            if name.split(".")[0] in _OURS and mod is not None:
                for k in [k for k, v in vars(mod).items() if v is self]:
                    setattr(mod, k, real)
        return getattr(real, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


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
