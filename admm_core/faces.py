"""LFW / LFWA faces: loader, identity-disjoint split, face backbone and triplet loss.

Data (see ../shared/data/README.md): LFW deep-funneled images as ``<root>/lfw/
lfw-deepfunneled-160/<Person>/<Person>_NNNN.jpg`` (160×160 face crops) and the LFWA labels
``<root>/lfw/lfwa_att_40.csv`` (``image`` = ``Person/Person_NNNN.jpg``, then 40 0/1
attributes; 13,143 labelled images). Any LFW folder of ``<Person>/<file>.jpg`` works too:
250×250 originals are cropped to the same 160×160 face crop (offset 48, 48, as the shared
copy was made), other sizes are centre-cropped to a square. Images are resized to the
model's input size (INTER_AREA) and kept as uint8 RGB; a decoded copy is cached under
``$ADMM_CACHE`` (default ``~/.cache/admm_core``) so later runs skip the JPEG decoding.

Split: by identity (no person on both sides), from a seeded permutation of the sorted
person names — the same seed gives the same split on every machine.

Backbone: a ResNet-18-layout CNN (four stages of two BasicBlocks) narrowed for a CPU:
widths (16, 32, 64, 64), stem 3×3 stride 2, last stage at stride 1 (the "last stride 1"
trick, so a 48×48 input keeps a 6×6 map), then a 1×1 conv to ``out_channels`` + BN + ReLU.
That non-negative (C, 8, 8) map is Z_1, the activation DeepFacto factors. For the
backbone's own training a head (global average pool, Linear, L2 normalisation) gives a
face embedding trained with the batch-hard triplet loss (Hermans et al. 2017).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .data import candidate_roots
from .errors import CheckpointError, DataError, ImageError
from .lazy import F, nn, no_grad, torch

LFW_IMAGES = Path("lfw") / "lfw-deepfunneled-160"
LFWA_LABELS = Path("lfw") / "lfwa_att_40.csv"
FACE_CROP = 160  # LFW deep-funneled face crop (the shared copy's size)


def cache_dir() -> Path:
    p = Path(os.environ.get("ADMM_CACHE", Path.home() / ".cache" / "admm_core"))
    p.mkdir(parents=True, exist_ok=True)
    return p


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


def find_lfw(root=None, image_dir=None, labels=None) -> tuple[Path, Path]:
    """(image folder, label CSV). Looks under the data root(s) unless given explicitly."""
    looked = []
    if image_dir is None or labels is None:
        for r in candidate_roots(root):
            img, lab = r / LFW_IMAGES, r / LFWA_LABELS
            looked.append(r / "lfw")
            if (image_dir is not None or img.is_dir()) and (labels is not None or lab.is_file()):
                image_dir = image_dir if image_dir is not None else img
                labels = labels if labels is not None else lab
                break
    if image_dir is None or labels is None or not Path(image_dir).is_dir() or not Path(labels).is_file():
        places = ", ".join(str(p) for p in looked) or f"{image_dir}, {labels}"
        raise DataError(
            f"data set 'lfwa' not found (looked in: {places}). Put LFW deep-funneled faces in <root>/{LFW_IMAGES}/<Person>/*.jpg "
            f"and the LFWA labels in <root>/{LFWA_LABELS} (set --data-root or ADMM_DATA), or pass --image-dir/--labels"
        )
    return Path(image_dir), Path(labels)


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
            if cache:
                tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")  # one per writer: processes may race
                np.save(tmp, images)
                os.replace(tmp, path)
    return FaceSet.labelled(names, attrs, attr_names, images, image_dir)


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """(N, S, S, 3) uint8 -> (N, 3, S, S) float32 in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)


# --- backbone --------------------------------------------------------------------------------


def backbone_widths(width: int) -> tuple[int, int, int, int]:
    """Stage widths of a FaceBackbone with base width ``width``: (w, 2w, 4w, 4w)."""
    return (width, 2 * width, 4 * width, 4 * width)


@functools.cache
def _face_backbone_class() -> type:
    """FaceBackbone, defined on first use: an ``nn.Module`` subclass needs the real torch, and
    the dashboard reads face paths (``find_lfw``, ``cache_dir``) from this module without it."""

    class FaceBackbone(nn.Module):
        """ResNet-18 layout (2-2-2-2 BasicBlocks), narrow, last stage at stride 1; ``features`` = Z_1 ≥ 0."""

        def __init__(self, widths=(16, 32, 64, 64), out_channels: int = 256, emb_dim: int = 128, in_channels: int = 3):
            super().__init__()
            from torchvision.models.resnet import BasicBlock

            self.arch = {
                "widths": list(widths),
                "out_channels": out_channels,
                "emb_dim": emb_dim,
                "in_channels": in_channels,
            }
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)
            )
            stages, c_in = [], widths[0]
            for w, stride in zip(widths, (1, 2, 2, 1)):
                down = None
                if stride != 1 or c_in != w:
                    down = nn.Sequential(nn.Conv2d(c_in, w, 1, stride, bias=False), nn.BatchNorm2d(w))
                stages.append(nn.Sequential(BasicBlock(c_in, w, stride, down), BasicBlock(w, w)))
                c_in = w
            self.stages = nn.Sequential(*stages)
            self.expand = nn.Sequential(
                nn.Conv2d(c_in, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True)
            )
            self.head = nn.Linear(out_channels, emb_dim)
            self.register_buffer("mean", torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)[:, :in_channels])
            self.register_buffer("std", torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1)[:, :in_channels])

        def features(self, x: torch.Tensor) -> torch.Tensor:
            """x (N, 3, S, S) in [0, 1] -> Z_1 (N, C, S/8, S/8), non-negative (after ReLU)."""
            return self.expand(self.stages(self.stem((x - self.mean) / self.std)))

        def embed_features(self, z: torch.Tensor) -> torch.Tensor:
            return F.normalize(self.head(z.mean(dim=(2, 3))), dim=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            """Unit-norm face embedding (the backbone's own triplet head)."""
            return self.embed_features(self.features(x))

    FaceBackbone.__qualname__ = "FaceBackbone"
    return FaceBackbone


def __getattr__(name: str):  # PEP 562: ``from admm_core.faces import FaceBackbone`` defines the class
    if name == "FaceBackbone":
        return _face_backbone_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save_backbone(path, net: nn.Module, meta: dict) -> None:  # net: a FaceBackbone
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": "admm-face-backbone-v1", "arch": net.arch, "state_dict": net.state_dict(), "meta": meta}, tmp)
    os.replace(tmp, path)


def load_backbone(path, map_location="cpu") -> tuple[nn.Module, dict]:  # (FaceBackbone, meta)
    """A backbone weights file: our format ({format, arch, state_dict, meta}) or a bare state_dict of the default arch."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--backbone-weights {path}: no such file")
    try:  # weights_only: tensors and plain containers only; a pickle that would run code is refused
        ck = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"--backbone-weights {path}: refused: not a plain-tensor weights file (loading it would run "
            "Python code it contains); use a state_dict saved with torch.save"
        ) from None
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(
            f"--backbone-weights {path}: not a PyTorch weights file ({type(e).__name__}: {first})"
        ) from None
    if isinstance(ck, dict) and ck.get("format") == "admm-face-backbone-v1":
        net = _face_backbone_class()(**{k: tuple(v) if isinstance(v, list) else v for k, v in ck["arch"].items()})
        state, meta = ck["state_dict"], dict(ck.get("meta", {}))
    else:
        net, state, meta = _face_backbone_class()(), ck, {}
    try:
        net.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        raise ValueError(
            f"--backbone-weights {path}: does not fit the face backbone ({str(e).splitlines()[0]})"
        ) from None
    return net, meta


# --- triplet loss and identity-balanced batches ----------------------------------------------


def triplet_loss(emb: torch.Tensor, labels: torch.Tensor, margin: float = 0.2, reduction: str = "mean") -> torch.Tensor:
    """Batch-hard triplet loss: per anchor, max(0, d(a, hardest positive) − d(a, hardest negative) + margin).

    Anchors without a positive (or a negative) in the batch contribute 0. Distances are
    Euclidean (the embeddings are usually unit-norm).
    """
    d = torch.cdist(emb, emb)  # (B, B)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=emb.device)
    pos = same & ~eye
    valid = pos.any(1) & (~same).any(1)
    hardest_pos = torch.where(pos, d, torch.zeros_like(d)).max(1).values
    hardest_neg = torch.where(same, torch.full_like(d, float("inf")), d).min(1).values
    loss = torch.where(valid, F.relu(hardest_pos - hardest_neg + margin), torch.zeros_like(hardest_pos))
    return loss.sum() if reduction == "sum" else loss.sum() / valid.sum().clamp(min=1)


def identity_batches(
    identity: np.ndarray, rng: np.random.Generator, k: int = 4, batch_size: int = 128
) -> list[np.ndarray]:
    """Positions 0..N−1 cut into batches of whole identity groups (2..k images of one person each).

    Every sample lands in exactly one batch (people with a single image form groups of one,
    which act as negatives only). Groups are shuffled, then packed into batches.
    """
    groups = []
    by_id: dict[int, list[int]] = {}
    for pos, p in enumerate(identity.tolist()):
        by_id.setdefault(p, []).append(pos)
    for members in by_id.values():
        members = list(rng.permutation(members))
        chunks = [members[i : i + k] for i in range(0, len(members), k)]
        if len(chunks) > 1 and len(chunks[-1]) == 1:
            chunks[-2].extend(chunks.pop())
        groups.extend(chunks)
    order = rng.permutation(len(groups))
    batches, cur = [], []
    for gi in order:
        cur.extend(groups[gi])
        if len(cur) >= batch_size:
            batches.append(np.array(cur, dtype=np.int64))
            cur = []
    if cur:
        batches.append(np.array(cur, dtype=np.int64))
    return batches


def augment(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random horizontal flip and a random shift of up to ``pad`` pixels (reflect padding)."""
    n, _, h, w = x.shape
    flip = torch.rand(n, generator=gen) < 0.5
    x = torch.where(flip.view(n, 1, 1, 1).to(x.device), x.flip(3), x)
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    dy, dx = torch.randint(0, 2 * pad + 1, (2,), generator=gen).tolist()
    return xp[:, :, dy : dy + h, dx : dx + w]


@no_grad
def embed_all(fn, x_uint8: np.ndarray, idx: np.ndarray, device, chunk: int = 256) -> torch.Tensor:
    """fn(batch float tensor on device) for the samples ``idx``, concatenated on the CPU."""
    out = []
    for s in range(0, len(idx), chunk):
        out.append(fn(to_tensor(x_uint8[idx[s : s + chunk]]).to(device)).cpu())
    return torch.cat(out)


def verification_pairs(identity: np.ndarray, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(pairs (2n, 2) of positions, same (2n,) bool): n same-person and n different-person pairs."""
    by_id: dict[int, list[int]] = {}
    for pos, p in enumerate(identity.tolist()):
        by_id.setdefault(p, []).append(pos)
    multi = [v for v in by_id.values() if len(v) >= 2]
    pairs, same = [], []
    for _ in range(n_pairs):
        g = multi[rng.integers(len(multi))]
        a, b = rng.choice(len(g), 2, replace=False)
        pairs.append((g[a], g[b]))
        same.append(True)
    n = len(identity)
    while len(pairs) < 2 * n_pairs:
        a, b = rng.integers(n, size=2)
        if identity[a] != identity[b]:
            pairs.append((a, b))
            same.append(False)
    return np.array(pairs), np.array(same)


def verification_accuracy(emb_fit: torch.Tensor, pairs_fit, emb_eval: torch.Tensor, pairs_eval) -> float:
    """Accuracy on ``pairs_eval`` of the distance threshold that is best on ``pairs_fit``."""

    def dists(emb, pairs):
        p, _ = pairs
        return (emb[p[:, 0]] - emb[p[:, 1]]).norm(dim=1).numpy()

    d_fit, same_fit = dists(emb_fit, pairs_fit), pairs_fit[1]
    cand = np.unique(d_fit)
    accs = [((d_fit <= c) == same_fit).mean() for c in cand]
    thr = cand[int(np.argmax(accs))]
    return float(((dists(emb_eval, pairs_eval) <= thr) == pairs_eval[1]).mean())


def people_with_pairs(identity: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The samples of ``idx`` whose person has ≥ 2 images there (they give triplet positives):
    (samples, their identity, their class 0..K-1 for the identity softmax, K)."""
    counts = np.bincount(identity[idx])
    use = idx[counts[identity[idx]] >= 2]
    classes, ident_cls = np.unique(identity[use], return_inverse=True)
    return use, identity[use], ident_cls, len(classes)


def backbone_loss(
    emb: torch.Tensor,
    y: torch.Tensor,
    y_cls: torch.Tensor,
    classifier: nn.Linear,
    margin: float = 0.2,
    id_weight: float = 1.0,
    id_scale: float = 16.0,
) -> torch.Tensor:
    """Batch-hard triplet(e) + id_weight · CE(id_scale · e·Ŵᵀ, class): e the unit-norm embedding,
    Ŵ the row-normalised identity classifier (a cosine softmax, dropped after training)."""
    loss = triplet_loss(emb, y, margin)
    if id_weight > 0:
        logits = id_scale * emb @ F.normalize(classifier.weight, dim=1).T
        loss = loss + id_weight * F.cross_entropy(logits, y_cls)
    return loss


def train_backbone(
    faces: FaceSet,
    train_idx: np.ndarray,
    *,
    epochs: int = 4,
    lr: float = 2e-3,
    batch_size: int = 128,
    k: int = 4,
    margin: float = 0.2,
    id_weight: float = 1.0,
    id_scale: float = 16.0,
    widths=(16, 32, 64, 64),
    seed: int = 0,
    device: torch.device | str = "cpu",
    log=print,
    should_stop=None,
) -> tuple[nn.Module, list[dict]]:  # (FaceBackbone, history)
    """Train a FaceBackbone on the training identities (Adam, one-cycle lr).

    Loss per batch: batch-hard triplet(e) + id_weight · CE(id_scale · ê·Ŵᵀ, identity), with e the
    unit-norm embedding and Ŵ a row-normalised identity classifier (a cosine softmax, dropped
    after training). Deviation from the paper (triplet only): from scratch on a 2-core CPU the
    triplet loss alone left the backbone at 56% verification after 4 epochs; the identity
    softmax gives every image a gradient every step (README, "DeepFacto").
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = torch.device(device)
    net = _face_backbone_class()(widths=tuple(widths)).to(device)
    use, ident, ident_cls, n_classes = people_with_pairs(faces.identity, train_idx)
    classifier = nn.Linear(net.arch["emb_dim"], n_classes, bias=False).to(device)
    params = list(net.parameters()) + (list(classifier.parameters()) if id_weight > 0 else [])
    opt = torch.optim.Adam(params, lr=lr, weight_decay=5e-4)
    n_batches = len(identity_batches(ident, np.random.default_rng(0), k, batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(1, epochs * (n_batches + 2)), pct_start=0.15
    )
    history, t0 = [], time.time()
    for ep in range(1, epochs + 1):
        net.train()
        tot, nb = 0.0, 0
        for b in identity_batches(ident, rng, k, batch_size):
            if should_stop and should_stop():
                raise KeyboardInterrupt("stop requested")
            x = augment(to_tensor(faces.images[use[b]]).to(device), gen)  # same draws on any device
            y = torch.from_numpy(ident[b]).to(device)
            y_cls = torch.from_numpy(ident_cls[b]).to(device)
            loss = backbone_loss(net(x), y, y_cls, classifier, margin, id_weight, id_scale)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched.last_epoch < sched.total_steps - 1:
                sched.step()
            tot, nb = tot + float(loss.detach()), nb + 1
        history.append({"epoch": ep, "loss": tot / max(nb, 1), "wall_time_s": time.time() - t0})
        log(f"backbone epoch {ep}/{epochs}: loss {tot / max(nb, 1):.4f} ({time.time() - t0:.0f}s)")
    net.eval()
    return net, history


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
