"""The face backbone (a narrow ResNet-18 layout whose non-negative feature map is Z_1), its
weights files, and its training: batch-hard triplet loss on identity-balanced batches."""

from __future__ import annotations

import pickle
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock

from ..checkpoint import atomic_torch_save
from ..errors import CheckpointError
from ..spec.archs import needs_image
from ..spec.faces import FACE_ARCH, FACE_FEATURES, backbone_widths
from .lfw import FaceSet
from .tensors import to_tensor

# --- backbone --------------------------------------------------------------------------------


def face_backbone_layers(in_shape: tuple[int, ...], cfg, n_out: int) -> OrderedDict:
    """The ``face-resnet18s`` record's builder (``cfg``: a ModelConfig, its ``width`` the base width
    w): a new FaceBackbone for ``in_shape`` faces as named layers, ``n_out`` the size of its embedding.
    Its table by arithmetic is :func:`admm_core.spec.faces.face_backbone_table`."""
    needs_image(FACE_ARCH, in_shape)
    return face_backbone(backbone_widths(cfg.width), FACE_FEATURES, n_out, in_shape[0]).layers()


def face_backbone(widths=(16, 32, 64, 64), out_channels: int = FACE_FEATURES, emb_dim: int = 128, in_channels: int = 3):
    """A new FaceBackbone."""
    return FaceBackbone(widths, out_channels, emb_dim, in_channels)


class Standardize(nn.Module):
    """(x − mean) / std with the backbone's own buffers (the first step of its ``features``)."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x):
        return (x - self.mean) / self.std


class UnitNorm(nn.Module):
    def forward(self, x):
        return F.normalize(x, dim=1)


class FaceBackbone(nn.Module):
    """ResNet-18 layout (2-2-2-2 BasicBlocks), narrow, last stage at stride 1; ``features`` = Z_1 ≥ 0."""

    def __init__(
        self, widths=(16, 32, 64, 64), out_channels: int = FACE_FEATURES, emb_dim: int = 128, in_channels: int = 3
    ):
        super().__init__()
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

    def layers(self) -> OrderedDict:
        """The same modules as named layers (the registry record ``face-resnet18s``,
        :data:`admm_core.spec.archs.ARCHS`): composing them is ``forward``; through ``expand`` it is ``features``."""
        names = ("conv2_x", "conv3_x", "conv4_x", "conv5_x")
        return OrderedDict(
            stem=nn.Sequential(Standardize(self.mean, self.std), self.stem),
            **dict(zip(names, self.stages)),
            expand=self.expand,
            head=nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), self.head, UnitNorm()),
        )


def save_backbone(path, net: nn.Module, meta: dict) -> None:  # net: a FaceBackbone
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(
        {"format": "admm-face-backbone-v1", "arch": net.arch, "state_dict": net.state_dict(), "meta": meta}, path
    )


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
        net = FaceBackbone(**{k: tuple(v) if isinstance(v, list) else v for k, v in ck["arch"].items()})
        state, meta = ck["state_dict"], dict(ck.get("meta", {}))
    else:
        net, state, meta = FaceBackbone(), ck, {}
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
    net = FaceBackbone(widths=tuple(widths)).to(device)
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
