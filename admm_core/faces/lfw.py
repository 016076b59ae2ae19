"""LFW / LFWA: the images, the attribute labels, the identity-disjoint split and the decoded cache
(the layout is in :mod:`admm_core.faces`; where LFW lives, :func:`admm_core.spec.faces.find_lfw`).
Arrays only (numpy, OpenCV): the tensors are :mod:`.tensors`'."""

from __future__ import annotations

import csv
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, ImageError
from ..rundir import write_atomic
from ..spec.datasets import cache_dir
from ..spec.faces import find_lfw

FACE_CROP = 160  # LFW deep-funneled face crop (the shared copy's size)


# --- images ----------------------------------------------------------------------------------


def crop_face(img: np.ndarray) -> np.ndarray:
    """(H, W, 3) -> the square face crop: 250×250 LFW originals -> [48:208, 48:208] (as the
    shared 160×160 copy), 160×160 unchanged, anything else centre-cropped to a square."""
    h, w = img.shape[:2]
    if (h, w) == (250, 250):
        return img[48 : 48 + FACE_CROP, 48 : 48 + FACE_CROP]
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    return img[top : top + s, left : left + s]


def read_face(path, size: int | None = None) -> np.ndarray:
    """One face image file -> (size, size, 3) uint8 RGB (face crop, INTER_AREA resize). Clear error if unreadable."""
    import cv2

    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        if not Path(path).is_file():
            raise ImageError(f"cannot read image {str(path)!r}: no such file")
        raise ImageError(f"cannot read image {str(path)!r}: not an image file OpenCV can decode (JPEG, PNG, ...)")
    img = crop_face(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    if size is not None and img.shape[0] != size:
        img = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(img)


# --- LFWA ------------------------------------------------------------------------------------


@dataclass
class FaceSet:
    """Labelled LFW faces in memory."""

    files: list[str]  # "Person/Person_NNNN.jpg", one per sample
    identity: np.ndarray  # (N,) int64 index into ``people``
    people: list[str]  # sorted person names
    attributes: np.ndarray  # (N, 40) uint8 0/1
    attribute_names: list[str]
    images: np.ndarray | None  # (N, S, S, 3) uint8 RGB, or None when loaded without pixels
    image_dir: Path

    @classmethod
    def labelled(cls, files, attributes, attribute_names, images, image_dir) -> "FaceSet":
        """Faces named "Person/Person_NNNN.jpg": identities numbered by sorted person name."""
        person = [str(f).split("/")[0] for f in files]
        people = sorted(set(person))
        pid = {p: i for i, p in enumerate(people)}
        identity = np.array([pid[p] for p in person], dtype=np.int64)
        return cls(list(files), identity, people, attributes, attribute_names, images, image_dir)

    def first(self, limit: int | None) -> "FaceSet":
        """The first ``limit`` faces, as :func:`load_lfwa` with ``limit`` gives them (people renumbered)."""
        if limit is None or limit >= self.n:
            return self
        images = None if self.images is None else self.images[:limit]
        return FaceSet.labelled(
            self.files[:limit], self.attributes[:limit], self.attribute_names, images, self.image_dir
        )

    @property
    def n(self) -> int:
        return len(self.files)

    def split(self, seed: int = 0, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
        """(train indices, test indices), identity-disjoint: a seeded share of the people goes to test."""
        test_people = identity_split(self.people, seed, test_fraction)
        is_test = np.isin(self.identity, np.fromiter(test_people, dtype=np.int64, count=len(test_people)))
        return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def identity_split(people: list[str], seed: int = 0, test_fraction: float = 0.2) -> set[int]:
    """Indices (into the sorted ``people``) of the test identities: a seeded permutation's head."""
    order = sorted(range(len(people)), key=lambda i: people[i])
    perm = np.random.default_rng(seed).permutation(len(order))
    n_test = int(round(test_fraction * len(order)))
    return {order[i] for i in perm[:n_test]}


def read_labels(labels: Path) -> tuple[list[str], list[str], np.ndarray]:
    """(image names, attribute names, (N, A) uint8) from the LFWA CSV."""
    with open(labels, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0][0] != "image":
        raise DataError(f"{labels}: expected a CSV whose first column is 'image'")
    names = [r[0] for r in rows[1:] if r]
    attrs = np.array([[int(v) for v in r[1:]] for r in rows[1:] if r], dtype=np.uint8)
    return names, rows[0][1:], attrs


def load_lfwa(
    root=None,
    size: int | None = 64,
    limit: int | None = None,
    image_dir=None,
    labels=None,
    cache: bool = True,
    progress=None,
) -> FaceSet:
    """LFWA: every labelled image whose file exists, its identity and 40 attributes.

    ``size``: input size in pixels (square), or None to skip reading pixels (labels only).
    ``limit``: keep the first ``limit`` labelled images (tests / smoke runs).
    """
    image_dir, labels = find_lfw(root, image_dir, labels)
    names, attr_names, attrs = read_labels(labels)
    keep = [i for i, nm in enumerate(names) if (image_dir / nm).is_file()]
    if not keep:
        raise DataError(f"none of the {len(names)} images listed in {labels} exists under {image_dir}")
    if limit is not None:
        keep = keep[:limit]
    names = [names[i] for i in keep]
    attrs = attrs[keep]
    images = None
    if size is not None:
        key = hashlib.sha1(f"{image_dir.resolve()}|{size}|{'|'.join(names)}".encode()).hexdigest()[:16]
        path = cache_dir() / f"lfwa-{size}px-{len(names)}-{key}.npy"
        if cache and path.is_file():
            images = np.load(path, allow_pickle=False)
        else:
            images = np.empty((len(names), size, size, 3), np.uint8)
            t0 = time.time()
            for i, nm in enumerate(names):
                images[i] = read_face(image_dir / nm, size)
                if progress and (i % 1000 == 0):
                    progress(f"decoding faces {i}/{len(names)} ({time.time() - t0:.0f}s)")
            if cache:  # one temporary per writer: processes may race
                write_atomic(path, lambda f: np.save(f, images), durable=False)
    return FaceSet.labelled(names, attrs, attr_names, images, image_dir)


def pack_faces(faces: FaceSet, out: Path, quality: int = 95) -> None:
    """Labelled faces at one size in one file (JPEG bytes + offset table): carries LFW to a machine without it."""
    import cv2

    blobs = [
        cv2.imencode(".jpg", img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])[1].ravel() for img in faces.images
    ]
    offsets = np.cumsum([0] + [len(b) for b in blobs])
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        out,
        jpeg=np.concatenate(blobs),
        offsets=offsets,
        files=np.array(faces.files),
        identity=faces.identity,
        people=np.array(faces.people),
        attributes=faces.attributes,
        attribute_names=np.array(faces.attribute_names),
    )


def unpack_faces(path: Path) -> FaceSet:
    """Read a :func:`pack_faces` file back."""
    import cv2

    d = np.load(path, allow_pickle=False)
    buf, off = d["jpeg"], d["offsets"]
    imgs = np.stack([cv2.imdecode(buf[off[i] : off[i + 1]], cv2.IMREAD_COLOR)[:, :, ::-1] for i in range(len(off) - 1)])
    return FaceSet(
        list(d["files"]),
        d["identity"],
        list(d["people"]),
        d["attributes"],
        list(d["attribute_names"]),
        np.ascontiguousarray(imgs),
        path,
    )
