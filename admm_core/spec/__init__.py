"""The spec layer: what a run is, declared once, without PyTorch.

Everything here is plain Python (no torch, no numpy): the dashboard's server imports this layer
and the run-file readers (:mod:`admm_core.rundir`, :mod:`admm_core.status`) and nothing else of
the package, so its pages never pay ``import torch`` (~500 MB resident). The engine (the rest of
``admm_core``) imports torch normally and reads its facts from here.

    settings    ``setting(default, help, **rules)``: the one way to declare a setting; its check
    kinds       what kind of run a run directory holds
    archs       the architecture records (layer tables by arithmetic, split points, size fields)
    tv          torchvision's networks as records (tables computed on the meta device in a child, cached)
    datasets    the data-set records (shapes, sizes, where each lives)
    methods     each method's settings and declarations (live charts, memory rule) and the registry
    deepfacto   DeepFacto's records: its method, face backbone, LFWA and a run's DeepFactoConfig
    config      RunConfig: data, model, train and the method's settings, JSON round trip
    presets     the paper's setups as configs, and the paper's figures
    device      which device a config names, asked without torch
    plugins     other installed packages' methods, architectures and data sets (entry points)
    resources   the memory estimate and the preflight: {field: message}, every bad field at once

A record names its torch half by import path (``"admm_core.models:build_mlp"``, :mod:`.refs`): the
engine imports it there; this layer never does. Tests check the rule (tests/test_imports.py).
"""

# the registries complete whatever is imported first: DeepFacto's records (its method, the face
# backbone, LFWA) are registered by their modules, imported here
from . import faces, methods, plugins, tv  # noqa: E402, F401

# from here on a registry's first read adds the installed packages' records (entry points): their
# modules may import any of this layer
plugins.ready()
